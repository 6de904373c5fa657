"""What the Kubernetes principals do with the CNI on their machine: the
`cni-plugins` resource they ship (a tarball of CNI plugin binaries)
extracted into /opt/cni/bin, and their default link to the CNI's conf file
in /etc/cni/net.d.

The real charms ship a gzip tarball and run `tar xfz` (the ops charms `tar
-xzvf ... --no-same-owner`); the sandbox's is left
uncompressed and extracted with `tar -xf`: the same files written the same
way. The ops principals extract on nearly every hook, and gunzipping 44 MB of
Debian's plugins each time was about two CPU-minutes of the everyday suite.

    plugin_set("/usr/lib/cni")              # every plugin there but flannel
    build_cni_plugins_resource("/usr/lib/cni", ("bridge", "loopback"), dest,
                               extra={"flannel": plugin_bytes})
    resource_path(controller, app)          # where an app's tarball is built
    extract_plugins(ctx, tarball, same_owner=False)
    link_default_conf(ctx, "01-default", "10-flannel.conflist")
"""

from __future__ import annotations

import io
import os
import tarfile
import time

DEBIAN_PLUGINS = "/usr/lib/cni"
CNI_BIN = "/opt/cni/bin"
CNI_NET_D = "/etc/cni/net.d"
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
    with tarfile.open(fileobj=buf, mode="w") as tar:
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


def resource_path(controller, app_name: str) -> str:
    return os.path.join(controller.state_dir, "resources", app_name, "cni-plugins.tar")


def extract_plugins(ctx, tarball: str, same_owner: bool) -> None:
    """`tar -xf` the tarball into the unit machine's /opt/cni/bin, as root:
    with same_owner (tar's default for root, the reactive worker's `tar
    xfz`) the archive's owners are kept; without (the ops principals'
    --no-same-owner) the files are root's."""
    flags = "" if same_owner else " --no-same-owner"
    ctx.run(["/bin/sh", "-c", f'mkdir -p "$1" && exec tar -xf "$2" -C "$1"{flags}',
             "sh", ctx.executor.machine_path(CNI_BIN), tarball])


def link_default_conf(ctx, stem: str, conf_file: str | None) -> None:
    """Remove every /etc/cni/net.d/<stem>.*; with a conf file, symlink
    <stem>.<ext> to it (relative, in /etc/cni/net.d, which is made 0700 if
    missing: a CNI that published its conf file has made it already)."""
    script = (f'set -e; d=$1; mkdir -p -m 0700 "$d"; rm -f "$d"/{stem}.*; '
              f'if [ -n "$2" ]; then ln -s "$2" "$d/{stem}.${{2##*.}}"; fi')
    ctx.run(["/bin/sh", "-c", script, "sh", ctx.executor.machine_path(CNI_NET_D),
             conf_file or ""])
