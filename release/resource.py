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

# flanneld v0.28.10: its tencent-vpc backend imports
# tencentcloud-sdk-go/tencentcloud/vpc, whose zip the proxy refuses (403), so
# it is built from the wrapper module release/flanneld, which replaces that
# one package by a stub whose calls fail (the charm refuses that backend).
# v0.28.x fixes what v0.27.4 meets in etcd mode (facts/flanneld.py).
FLANNEL_MODULE = "github.com/flannel-io/flannel"
FLANNEL_VERSION = "v0.28.10"
FLANNEL_WRAPPER = Path(__file__).parent / "flanneld"
# v0.27.4, the flanneld of this charm's earlier resources, builds with `go
# install`: the sandbox attaches it to show a unit on an older resource.
FLANNEL_PREVIOUS_VERSION = "v0.27.4"
# The flannel CNI plugin: the dedicated module github.com/flannel-io/cni-plugin
# is refused by the proxy at every version, so the same plugin is built from
# its previous home, containernetworking/plugins, where it lived until v1.0.0.
# v0.9.1 is the last release that has it; the binary is named "flannel".
CNI_PLUGIN_MODULE = "github.com/containernetworking/plugins"
CNI_PLUGIN_PACKAGE = "github.com/containernetworking/plugins/plugins/meta/flannel"
CNI_PLUGIN_VERSION = "v0.9.1"
TARBALL_MEMBERS = ("flanneld", "cni-plugin/flannel")


def _flanneld(version: str, module_dir: str = "") -> GoBinary:
    return GoBinary(
        "flanneld", FLANNEL_MODULE, version, output="flannel", cgo_on=("amd64",),
        module_dir=module_dir,
        # so that `flanneld -version` prints the real version instead of "dev"
        ldflags=f"-s -w -X {FLANNEL_MODULE}/pkg/version.Version={version}")


FLANNELD = _flanneld(FLANNEL_VERSION, str(FLANNEL_WRAPPER))
FLANNELD_PREVIOUS = _flanneld(FLANNEL_PREVIOUS_VERSION)
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


def build_resource(arch: str = "amd64", out_dir: Path | str = ".", progress=None,
                   flanneld_binary: GoBinary = FLANNELD) -> Path:
    """Build (or reuse) flanneld and the flannel CNI plugin for `arch` and pack
    them into `out_dir/flannel-<arch>.tar.gz`, reproducibly (fixed mtimes and
    owners, so the same binaries always give the same bytes)."""
    flanneld = build(flanneld_binary, arch, progress)
    plugin = build(CNI_PLUGIN, arch, progress)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"flannel-{arch}.tar.gz"
    # The packed tarball is cached too, keyed on the binaries it holds.
    key = hashlib.sha256()
    for path in (flanneld, plugin):
        st = path.stat()
        key.update(f"{path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    stem = f"flannel-{arch}-{flanneld_binary.version}"
    packed = cache_root() / "resources" / f"{stem}-{key.hexdigest()[:16]}.tar.gz"
    if not packed.is_file():
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as gz:
            with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
                _add_member(tar, "flanneld", flanneld.read_bytes(), 0o755)
                _add_dir(tar, "cni-plugin")
                _add_member(tar, "cni-plugin/flannel", plugin.read_bytes(), 0o755)
        packed.parent.mkdir(parents=True, exist_ok=True)
        for old in packed.parent.glob(f"{stem}-*.tar.gz"):
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
