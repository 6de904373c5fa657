"""The charm's release resource, `flannel-<arch>`: a gzip tar holding
``flanneld`` and ``cni-plugin/flannel`` (both 0755, static binaries), built
with ``go install MODULE@VERSION`` from the Go module proxy (release/go_build.py).
Nothing is vendored or downloaded by hand. The tarball is reproducible: the
same binaries always give the same bytes.

    scripts/build-resource [--arch amd64|arm64|s390x|all] [--out DIR]

prints the path of each tarball it wrote (packed tarballs are cached under
$FLANNEL_CACHE/resources, keyed on the binaries in them).
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

from .go_build import ARCHES, BuildFailed, GoBinary, build, cache_root, host_arch, log

# flanneld: v0.27.4 is the newest flannel that builds from the module proxy.
# v0.28.x import tencentcloud-sdk-go/tencentcloud/vpc@v1.3.188, whose zip the
# proxy refuses (403 "This module version is not available").
FLANNEL_MODULE = "github.com/flannel-io/flannel"
FLANNEL_VERSION = "v0.27.4"
# The flannel CNI plugin: the dedicated module github.com/flannel-io/cni-plugin
# is refused by the proxy at every version, so the same plugin is built from
# its previous home, containernetworking/plugins, where it lived until v1.0.0.
# v0.9.1 is the last release that has it; the binary is named "flannel".
CNI_PLUGIN_MODULE = "github.com/containernetworking/plugins"
CNI_PLUGIN_PACKAGE = "github.com/containernetworking/plugins/plugins/meta/flannel"
CNI_PLUGIN_VERSION = "v0.9.1"
TARBALL_MEMBERS = ("flanneld", "cni-plugin/flannel")

FLANNELD = GoBinary(
    "flanneld", FLANNEL_MODULE, FLANNEL_VERSION, output="flannel", cgo_on=("amd64",),
    # so that `flanneld -version` prints the real version instead of "dev"
    ldflags=f"-s -w -X {FLANNEL_MODULE}/pkg/version.Version={FLANNEL_VERSION}")
CNI_PLUGIN = GoBinary("flannel", CNI_PLUGIN_PACKAGE, CNI_PLUGIN_VERSION, output="flannel")


def _add_member(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    info.mtime = 0
    info.uname = info.gname = "root"
    tar.addfile(info)


def build_resource(arch: str = "amd64", out_dir: Path | str = ".", progress=None) -> Path:
    """Build (or reuse) flanneld and the flannel CNI plugin for `arch` and pack
    them into `out_dir/flannel-<arch>.tar.gz`, reproducibly (fixed mtimes and
    owners, so the same binaries always give the same bytes)."""
    flanneld = build(FLANNELD, arch, progress)
    plugin = build(CNI_PLUGIN, arch, progress)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"flannel-{arch}.tar.gz"
    # The packed tarball is cached too, keyed on the binaries it holds.
    key = hashlib.sha256()
    for path in (flanneld, plugin):
        st = path.stat()
        key.update(f"{path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    packed = cache_root() / "resources" / f"flannel-{arch}-{key.hexdigest()[:16]}.tar.gz"
    if not packed.is_file():
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
                _add_member(tar, "flanneld", flanneld.read_bytes(), 0o755)
                _add_dir(tar, "cni-plugin")
                _add_member(tar, "cni-plugin/flannel", plugin.read_bytes(), 0o755)
        packed.parent.mkdir(parents=True, exist_ok=True)
        for old in packed.parent.glob(f"flannel-{arch}-*.tar.gz"):
            old.unlink()
        tmp = packed.with_name(packed.name + ".tmp")
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, packed)
        log(progress, f"packed   {packed}")
    if target.resolve() != packed.resolve():
        tmp = target.with_name(target.name + ".tmp")
        shutil.copyfile(packed, tmp)
        os.replace(tmp, target)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()[:16]
    log(progress, f"resource {target} ({target.stat().st_size} bytes, sha256 {digest}...)")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/build-resource",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--arch", default=host_arch(), choices=ARCHES + ("all",))
    parser.add_argument("--out", default=".",
                        help="directory for flannel-<arch>.tar.gz (default: %(default)s)")
    args = parser.parse_args(argv)
    arches = ARCHES if args.arch == "all" else (args.arch,)
    progress = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    start = time.monotonic()
    try:
        paths = [build_resource(a, Path(args.out), progress) for a in arches]
    except BuildFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    progress(f"done in {time.monotonic() - start:.1f}s")
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
