"""The `cni-plugins` resource Kubernetes principals ship: a gzip tarball of
CNI plugin binaries that they extract into /opt/cni/bin.

    plugin_set("/usr/lib/cni")              # every plugin there but flannel
    build_cni_plugins_resource("/usr/lib/cni", ("bridge", "loopback"), dest,
                               extra={"flannel": plugin_bytes})
"""

from __future__ import annotations

import io
import os
import tarfile
import time

DEBIAN_PLUGINS = "/usr/lib/cni"
# Owner of the members, as upstream's release tarballs have it (not root): a
# principal extracting with --no-same-owner gets root's files, one
# extracting as root without it gets these ids.
MEMBER_UID, MEMBER_GID = 1001, 127


def plugin_set(plugin_dir: str = DEBIAN_PLUGINS) -> tuple[str, ...]:
    """The plugins a cni-plugins resource built from `plugin_dir` holds:
    every executable file there but flannel (it left containernetworking in
    v1.0.0)."""
    names = []
    for name in sorted(os.listdir(plugin_dir)):
        path = os.path.join(plugin_dir, name)
        if name != "flannel" and os.path.isfile(path) and os.access(path, os.X_OK):
            names.append(name)
    return tuple(names)


def build_cni_plugins_resource(plugin_dir: str, plugins, dest: str,
                               extra: dict[str, bytes] | None = None) -> str:
    """A cni-plugins tarball at `dest`: members ./NAME for each of `plugins`
    (read from `plugin_dir`) and of `extra` (name -> bytes), mode 0755,
    owned by MEMBER_UID:MEMBER_GID."""
    files = {}
    for name in plugins:
        with open(os.path.join(plugin_dir, name), "rb") as f:
            files[name] = f.read()
    files.update(extra or {})
    buf = io.BytesIO()
    # compresslevel 1: seconds faster per deployment than 9, for no purpose here
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size, info.mode = len(data), 0o755
            info.uid, info.gid = MEMBER_UID, MEMBER_GID
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "wb") as f:
        f.write(buf.getvalue())
    return dest
