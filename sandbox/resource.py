"""Build the charm's resource tarball and ``cnitool`` from pinned Go modules.

The flannel charm takes one resource per architecture, ``flannel-<arch>``: a
gzip tar holding ``flanneld`` and ``cni-plugin/flannel`` (both 0755).  This
module builds both binaries, plus libcni's own runtime ``cnitool`` (used by
:mod:`sandbox.pod`), with ``go install MODULE@VERSION`` from the Go module
proxy.  Nothing is vendored or downloaded by hand.  The flanneld of the bug
report's cluster (v0.11.0, from before Go modules) is built from the proxy's
module zips in GOPATH mode instead (:mod:`sandbox.flanneld_v011`).

Everything Go produces is cached outside the repository, under
``$FLANNEL_CACHE/go`` (default ``/var/cache/flannel-charm/go``)::

    go/mod/                          GOMODCACHE (module downloads, shared)
    go/build/                        GOCACHE (compiler cache, shared)
    go/install/<arch>/<name>@<ver>/  one GOPATH per binary, arch and version;
                                     the binary lands in bin/ (native) or
                                     bin/linux_<arch>/ (cross-compiled)
    resources/flannel-<arch>-<key>.tar.gz   the packed tarball, keyed on the
                                     binaries in it, copied to out_dir

A binary already in its install dir (with a stamp matching the build
settings, link mode included) is reused, so a second build only re-packs the
tarball.  A per-binary GOPATH rather than GOBIN because ``go install`` refuses
GOBIN when cross-compiling.

Every binary is statically linked, so that the resource runs on any Ubuntu
(22.04 has glibc 2.35; a binary linked dynamically against a newer host glibc
would need GLIBC_2.36 symbols there).  Pure-Go builds (CGO_ENABLED=0: every
binary but amd64 flanneld) are static by construction.  amd64 flanneld needs
cgo for the udp backend's cproxy, so it is linked externally with
``-extldflags=-static`` (as flannel's own Makefile does) and built with
``-tags netgo,osusergo``: without those tags the net and os/user packages call
glibc's NSS (getaddrinfo, getpwnam_r, ...), which a static glibc binary still
loads at run time from the unit's own, possibly different, glibc.  A binary
that comes out with an ELF interpreter (PT_INTERP) is rejected (BuildFailed).

API::

    build_resource(arch="amd64", out_dir=Path) -> Path   # out_dir/flannel-<arch>.tar.gz
    cnitool_path() -> Path                               # host-arch cnitool, built if missing
    crictl_path() -> Path                                # host-arch crictl, built if missing
    binary_path(name, arch="amd64") -> Path
        # "flanneld" | "flannel" | "cnitool" | "crictl" | "actionlint" | "flanneld-v0.11.0"
    host_arch() -> str                                   # "amd64" | "arm64" | "s390x"
    elf_interpreter(path) -> str | None                  # PT_INTERP of an ELF file; None: static
    ARCHES                                               # ("amd64", "arm64", "s390x")
    class BuildFailed(RuntimeError)                      # .log holds go's output

Command line::

    python -m sandbox.resource [--arch amd64|arm64|s390x|all] [--out DIR] [--cnitool]
                               [--crictl]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fcntl
import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox import flanneld_v011

# --- pinned versions ---------------------------------------------------------
# flanneld: v0.27.4 is the newest flannel that builds from the module proxy.
# v0.28.x import tencentcloud-sdk-go/tencentcloud/vpc@v1.3.188, whose zip the
# proxy refuses (403 "This module version is not available").
FLANNEL_MODULE = "github.com/flannel-io/flannel"
FLANNEL_VERSION = "v0.27.4"
# The flannel CNI plugin: the dedicated module github.com/flannel-io/cni-plugin
# is refused by the proxy at every version, so we build the same plugin from
# its previous home, containernetworking/plugins, where it lived until v1.0.0.
# v0.9.1 is the last release that has it; the binary is named "flannel".
CNI_PLUGIN_MODULE = "github.com/containernetworking/plugins"
CNI_PLUGIN_PACKAGE = "github.com/containernetworking/plugins/plugins/meta/flannel"
CNI_PLUGIN_VERSION = "v0.9.1"
# cnitool: libcni's runtime CLI; v1.3.0 is the newest cni release.
CNITOOL_PACKAGE = "github.com/containernetworking/cni/cnitool"
CNITOOL_VERSION = "v1.3.0"
# crictl: the CRI client kubelet's operators use, for the sandbox's CRI pods
# (sandbox.cri); it speaks CRI v1, which Debian's containerd 1.6 serves.
CRICTL_PACKAGE = "sigs.k8s.io/cri-tools/cmd/crictl"
CRICTL_VERSION = "v1.37.0"
# actionlint: the linter for .github/workflows (tests/packaging/test_workflows.py)
ACTIONLINT_PACKAGE = "github.com/rhysd/actionlint/cmd/actionlint"
ACTIONLINT_VERSION = "v1.7.12"

ARCHES = ("amd64", "arm64", "s390x")
TARBALL_MEMBERS = ("flanneld", "cni-plugin/flannel")
# How every binary is linked; part of the cache stamp, so that binaries built
# before a change of link mode (amd64 flanneld was once dynamic) are rebuilt.
LINK_MODE = "static"
# cgo builds: pure-Go resolver and user lookups, no glibc NSS in a static binary
CGO_BUILD_TAGS = ("netgo", "osusergo")
CGO_STATIC_LDFLAGS = "-linkmode=external -extldflags=-static"


def cache_root() -> Path:
    return Path(os.environ.get("FLANNEL_CACHE", "/var/cache/flannel-charm"))


class BuildFailed(RuntimeError):
    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class GoBinary:
    name: str          # the binary's file name as go install writes it
    package: str       # the package path given to go install (without @version)
    version: str
    ldflags: str = "-s -w"
    # Code from before Go modules (sandbox.flanneld_v011): built with
    # GO111MODULE=off from these module@version zips laid out under GOPATH,
    # after `prepare(main package dir)`; empty for a `go install` build.
    gopath_sources: tuple = ()
    prepare: object = None

    def cgo(self, arch: str) -> bool:
        # flanneld's udp backend (cproxy) is cgo: without cgo on amd64 the
        # build fails; the other architectures compile the backend out (and
        # so does the v0.11.0 build, on every architecture).
        return self.name == "flanneld" and arch == "amd64"

    def tags(self, arch: str) -> tuple[str, ...]:
        return CGO_BUILD_TAGS if self.cgo(arch) else ()

    def link_ldflags(self, arch: str) -> str:
        """The -ldflags given to go install: a cgo build is linked externally
        and statically; a pure-Go build is static anyway."""
        if self.cgo(arch):
            return f"{self.ldflags} {CGO_STATIC_LDFLAGS}"
        return self.ldflags


BINARIES = {
    "flanneld": GoBinary(
        "flanneld", FLANNEL_MODULE, FLANNEL_VERSION,
        # so that `flanneld -version` prints the real version instead of "dev"
        ldflags=f"-s -w -X {FLANNEL_MODULE}/pkg/version.Version={FLANNEL_VERSION}",
    ),
    "flannel": GoBinary("flannel", CNI_PLUGIN_PACKAGE, CNI_PLUGIN_VERSION),
    "cnitool": GoBinary("cnitool", CNITOOL_PACKAGE, CNITOOL_VERSION),
    "crictl": GoBinary(
        "crictl", CRICTL_PACKAGE, CRICTL_VERSION,
        # so that `crictl --version` prints the pinned version instead of "unknown"
        ldflags=f"-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version={CRICTL_VERSION}",
    ),
    "actionlint": GoBinary(
        "actionlint", ACTIONLINT_PACKAGE, ACTIONLINT_VERSION,
        ldflags=f"-s -w -X github.com/rhysd/actionlint.version={ACTIONLINT_VERSION}",
    ),
    # the bug report's flanneld (charm-flannel f79f180), for sandbox.old_flannel
    "flanneld-v0.11.0": GoBinary(
        "flanneld-v0.11.0", flanneld_v011.PACKAGE, flanneld_v011.VERSION,
        ldflags=flanneld_v011.LDFLAGS, gopath_sources=flanneld_v011.SOURCES,
        prepare=flanneld_v011.prepare,
    ),
}
# go install names flanneld's binary after the module's last element.
_GO_OUTPUT_NAME = {"flanneld": "flannel", "flannel": "flannel", "cnitool": "cnitool",
                   "crictl": "crictl", "actionlint": "actionlint",
                   "flanneld-v0.11.0": "flanneld"}


def host_arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64",
            "s390x": "s390x", "amd64": "amd64"}.get(machine, machine)


def _install_dir(binary: GoBinary, arch: str) -> Path:
    return cache_root() / "go" / "install" / arch / f"{binary.name}@{binary.version}"


def _stamp(binary: GoBinary, arch: str) -> str:
    stamp = {"package": binary.package, "version": binary.version,
             "ldflags": binary.link_ldflags(arch), "cgo": binary.cgo(arch),
             "tags": list(binary.tags(arch)), "link": LINK_MODE, "arch": arch}
    if binary.gopath_sources:
        stamp["sources"] = list(binary.gopath_sources)
    return json.dumps(stamp, sort_keys=True)


_PT_INTERP = 3


def elf_interpreter(path: Path | str) -> str | None:
    """The program interpreter an ELF executable asks for (its PT_INTERP
    segment, e.g. "/lib64/ld-linux-x86-64.so.2"), or None if it has none, i.e.
    it is statically linked.  Either ELF class and byte order (s390x is
    big-endian).  ValueError if `path` is not an ELF file."""
    with open(path, "rb") as f:
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) \
                or ident[5] not in (1, 2):
            raise ValueError(f"{path}: not an ELF file")
        is64 = ident[4] == 2
        order = "<" if ident[5] == 1 else ">"
        if is64:
            f.seek(0x20)
            (phoff,) = struct.unpack(order + "Q", f.read(8))
            f.seek(0x36)
        else:
            f.seek(0x1C)
            (phoff,) = struct.unpack(order + "I", f.read(4))
            f.seek(0x2A)
        phentsize, phnum = struct.unpack(order + "HH", f.read(4))
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            if is64:
                p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack(
                    order + "IIQQQQ", f.read(40))
            else:
                p_type, p_offset, _vaddr, _paddr, p_filesz = struct.unpack(
                    order + "IIIII", f.read(20))
            if p_type == _PT_INTERP:
                f.seek(p_offset)
                return f.read(p_filesz).rstrip(b"\0").decode(errors="replace")
    return None


def _is_static(path: Path) -> bool:
    try:
        return elf_interpreter(path) is None
    except (OSError, ValueError, struct.error):
        return False


def _built_path(binary: GoBinary, arch: str) -> Path:
    gopath = _install_dir(binary, arch)
    out = _GO_OUTPUT_NAME[binary.name]
    if arch == host_arch():
        return gopath / "bin" / out
    return gopath / "bin" / f"linux_{arch}" / out


def _log(progress, text: str) -> None:
    if progress:
        progress(text)


def _cached(binary: GoBinary, arch: str) -> bool:
    built = _built_path(binary, arch)
    stamp_file = _install_dir(binary, arch) / "stamp.json"
    return (built.is_file() and stamp_file.is_file()
            and stamp_file.read_text() == _stamp(binary, arch) and _is_static(built))


def binary_path(name: str, arch: str = "amd64", progress=None) -> Path:
    """Path of a cached binary, running `go install` first if it is missing.
    One build per binary at a time: a second caller (another process, say
    scripts/setup-host's background build) waits for the first, then finds
    the binary cached."""
    if arch not in ARCHES:
        raise ValueError(f"unsupported arch {arch!r}; one of {', '.join(ARCHES)}")
    binary = BINARIES[name]
    gopath = _install_dir(binary, arch)
    built = _built_path(binary, arch)
    if _cached(binary, arch):
        _log(progress, f"cached   {name} {binary.version} ({arch}): {built}")
        return built
    gopath.mkdir(parents=True, exist_ok=True)
    with open(gopath.parent / f".{gopath.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _cached(binary, arch):
            _log(progress, f"cached   {name} {binary.version} ({arch}): {built}")
            return built
        return _go_install(binary, arch, progress)


def _go_install(binary: GoBinary, arch: str, progress) -> Path:
    name = binary.name
    gopath = _install_dir(binary, arch)
    built = _built_path(binary, arch)
    stamp_file = gopath / "stamp.json"
    stamp = _stamp(binary, arch)
    if shutil.which("go") is None:
        raise BuildFailed("the Go toolchain (`go`) is not installed")
    go = cache_root() / "go"
    env = dict(os.environ)
    env.update({
        "GOPATH": str(gopath),
        "GOMODCACHE": str(go / "mod"),
        "GOCACHE": str(go / "build"),
        "GOOS": "linux",
        "GOARCH": arch,
        "CGO_ENABLED": "1" if binary.cgo(arch) else "0",
        "GOFLAGS": "-buildvcs=false -modcacherw",
        "GOTOOLCHAIN": "local",
        "GO111MODULE": "on",
    })
    env.pop("GOBIN", None)
    _log(progress, f"building {name} {binary.version} ({arch}, cgo={env['CGO_ENABLED']}, "
                   f"{LINK_MODE}) ...")
    start = time.monotonic()
    gopath.mkdir(parents=True, exist_ok=True)
    stamp_file.unlink(missing_ok=True)
    if binary.gopath_sources:
        proc = _gopath_build(binary, arch, env, built)
    else:
        cmd = ["go", "install", "-trimpath", f"-ldflags={binary.link_ldflags(arch)}"]
        if binary.tags(arch):
            cmd.append(f"-tags={','.join(binary.tags(arch))}")
        cmd.append(f"{binary.package}@{binary.version}")
        proc = subprocess.run(cmd, env=env, cwd=str(gopath), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    how = "a GOPATH build of" if binary.gopath_sources else "go install"
    if proc.returncode != 0 or not built.is_file():
        raise BuildFailed(
            f"{how} {binary.package}@{binary.version} for {arch} failed "
            f"(exit {proc.returncode}): {proc.stdout.strip()[-2000:]}", proc.stdout)
    if not _is_static(built):
        raise BuildFailed(
            f"{how} {binary.package}@{binary.version} for {arch} did not produce a "
            f"statically linked ELF binary: {built}", proc.stdout)
    stamp_file.write_text(stamp)
    _log(progress, f"built    {name} in {time.monotonic() - start:.1f}s: {built}")
    return built


def _gopath_build(binary: GoBinary, arch: str, env: dict,
                  built: Path) -> subprocess.CompletedProcess:
    """A GOPATH-mode build of code from before Go modules: each module zip
    of binary.gopath_sources (downloaded through the proxy into the shared
    module cache) copied to $GOPATH/src/<module>, binary.prepare() run on
    the main package's copy, then `go build` with GO111MODULE=off."""
    gopath = Path(env["GOPATH"])
    src = gopath / "src"
    shutil.rmtree(src, ignore_errors=True)
    log = []
    for source in binary.gopath_sources:
        download = subprocess.run(["go", "mod", "download", "-json", source],
                                  env={**env, "GO111MODULE": "on"}, cwd=str(gopath),
                                  capture_output=True, text=True)
        info = json.loads(download.stdout or "{}") if download.stdout.strip() else {}
        if download.returncode != 0 or not info.get("Dir"):
            return subprocess.CompletedProcess(
                download.args, download.returncode or 1,
                f"go mod download {source}: {info.get('Error') or download.stderr}")
        dest = src / source.split("@")[0]
        shutil.copytree(info["Dir"], dest)
        for path in [dest, *dest.rglob("*")]:   # the module cache's copies are read-only
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o200)
        log.append(f"{source} -> {dest}")
    if binary.prepare is not None:
        binary.prepare(src / binary.package)
    cmd = ["go", "build", "-trimpath", f"-ldflags={binary.link_ldflags(arch)}",
           "-o", str(built), "."]
    built.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(cmd, env={**env, "GO111MODULE": "off", "GOFLAGS": ""},
                          cwd=str(src / binary.package), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    proc.stdout = "\n".join(log) + "\n" + proc.stdout
    return proc


def cnitool_path(progress=None) -> Path:
    """The host-arch cnitool, built into the cache if missing."""
    return binary_path("cnitool", host_arch(), progress)


def crictl_path(progress=None) -> Path:
    """The host-arch crictl, built into the cache if missing."""
    return binary_path("crictl", host_arch(), progress)


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
    flanneld = binary_path("flanneld", arch, progress)
    plugin = binary_path("flannel", arch, progress)
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
        _log(progress, f"packed   {packed}")
    if target.resolve() != packed.resolve():
        tmp = target.with_name(target.name + ".tmp")
        shutil.copyfile(packed, tmp)
        os.replace(tmp, target)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()[:16]
    _log(progress, f"resource {target} ({target.stat().st_size} bytes, sha256 {digest}...)")
    return target


HOST_TOOLS = ("flanneld", "crictl", "flanneld-v0.11.0", "actionlint", "flannel",
              "cnitool")  # longest first


def build_host_tools(progress, start: float) -> int:
    """Every Go binary the sandbox runs here, built (or found cached) at once."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = {name: pool.submit(binary_path, name, host_arch(), progress)
                   for name in HOST_TOOLS}
    failed = [f"{name}: {future.exception()}" for name, future in futures.items()
              if future.exception() is not None]
    for line in failed:
        print(f"error: {line}", file=sys.stderr)
    progress(f"host tools done in {time.monotonic() - start:.1f}s")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.resource",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--arch", default=host_arch(), choices=ARCHES + ("all",))
    parser.add_argument("--out", default=".",
                        help="directory for flannel-<arch>.tar.gz (default: %(default)s)")
    parser.add_argument("--cnitool", action="store_true", help="also build cnitool (host arch)")
    parser.add_argument("--crictl", action="store_true", help="also build crictl (host arch)")
    parser.add_argument("--host-tools", action="store_true",
                        help="build what the sandbox runs on this host (flanneld, the flannel "
                             "plugin, cnitool, crictl), as many at once as there are cores, "
                             "and nothing else")
    parser.add_argument("--cached-only", action="store_true",
                        help="with --host-tools: build nothing, exit 1 unless all are cached")
    args = parser.parse_args(argv)
    arches = ARCHES if args.arch == "all" else (args.arch,)
    progress = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    start = time.monotonic()
    if args.host_tools and args.cached_only:
        return 0 if all(_cached(BINARIES[n], host_arch()) for n in HOST_TOOLS) else 1
    if args.host_tools:
        return build_host_tools(progress, start)
    try:
        paths = [build_resource(a, Path(args.out), progress) for a in arches]
        if args.cnitool:
            progress(f"cnitool: {cnitool_path(progress)}")
        if args.crictl:
            progress(f"crictl: {crictl_path(progress)}")
    except BuildFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    progress(f"done in {time.monotonic() - start:.1f}s")
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
