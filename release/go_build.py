"""Go binaries from pinned modules of the Go module proxy, built once and
cached: what the release resource and the sandbox's tools are made of.

Everything Go produces is cached outside the repository, under
``$FLANNEL_CACHE/go`` (default ``/var/cache/flannel-charm/go``)::

    go/mod/                          GOMODCACHE (module downloads, shared)
    go/build/                        GOCACHE (compiler cache, shared)
    go/install/<arch>/<name>@<ver>/  one GOPATH per binary, arch and version;
                                     the binary lands in bin/ (native) or
                                     bin/linux_<arch>/ (cross-compiled)

A binary already in its install dir (with a stamp matching the build
settings, link mode included) is reused. A per-binary GOPATH rather than
GOBIN because ``go install`` refuses GOBIN when cross-compiling.

Every binary is statically linked, so that it runs on any Ubuntu (22.04 has
glibc 2.35; a binary linked dynamically against a newer host glibc would need
GLIBC_2.36 symbols there). Pure-Go builds (CGO_ENABLED=0: every binary but
amd64 flanneld) are static by construction. amd64 flanneld needs cgo for the
udp backend's cproxy, so it is linked externally with ``-extldflags=-static``
(as flannel's own Makefile does) and built with ``-tags netgo,osusergo``:
without those tags the net and os/user packages call glibc's NSS
(getaddrinfo, getpwnam_r, ...), which a static glibc binary still loads at
run time from the unit's own, possibly different, glibc. A binary that comes
out with an ELF interpreter (PT_INTERP) is rejected (BuildFailed).

Code from before Go modules is built from the proxy's module zips in GOPATH
mode instead (GoBinary.gopath_sources). A module that does not build with
``go install`` (its go.mod has replace directives, or one of its
dependencies is refused by the proxy) is built from a wrapper module kept in
the repository (GoBinary.module_dir), whose go.mod names it as a tool and
pins or replaces what it needs.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ARCHES = ("amd64", "arm64", "s390x")
# Every binary is static (see above); recorded in each binary's stamp.
LINK_MODE = "static"
# amd64 flanneld is the one cgo build: static glibc needs the pure-Go resolver
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
    # A wrapper module (a directory with go.mod, go.sum and any local
    # replacements) in which `go build PACKAGE` runs; empty: `go install`.
    module_dir: str = ""
    # with module_dir: `go test -c` of the package (a test binary, such as
    # Kubernetes' e2e suite), not `go build`
    test_binary: bool = False

    # the file name `go install` gives the binary (the package's last element)
    output: str = ""
    # flanneld's udp backend (cproxy) is cgo: without cgo on amd64 the build
    # fails; the other architectures compile the backend out
    cgo_on: tuple = ()
    # build tags the binary always takes (containerd's no_btrfs, ...)
    build_tags: tuple = ()

    def cgo(self, arch: str) -> bool:
        return arch in self.cgo_on

    def tags(self, arch: str) -> tuple[str, ...]:
        return (CGO_BUILD_TAGS if self.cgo(arch) else ()) + tuple(self.build_tags)

    def link_ldflags(self, arch: str) -> str:
        """The -ldflags given to go install: a cgo build is linked externally
        and statically; a pure-Go build is static anyway."""
        if self.cgo(arch):
            return f"{self.ldflags} {CGO_STATIC_LDFLAGS}"
        return self.ldflags


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
    if binary.module_dir:
        stamp["module"] = _tree_digest(Path(binary.module_dir))
    if binary.test_binary:
        stamp["test"] = True
    return json.dumps(stamp, sort_keys=True)


def _tree_digest(root: Path) -> str:
    """sha256 over a wrapper module's files (names and contents)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(root)}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


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
    out = binary.output or binary.name
    if arch == host_arch():
        return gopath / "bin" / out
    return gopath / "bin" / f"linux_{arch}" / out


def log(progress, text: str) -> None:
    if progress:
        progress(text)


#: Seconds between two of a long build's "still ..." lines.
HEARTBEAT_SECONDS = 30.0


def _tree_mib(path: Path) -> float:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total / (1 << 20)


@contextlib.contextmanager
def heartbeat(progress, what: str, every: float = HEARTBEAT_SECONDS):
    """While the block runs, say every `every` s that `what` is still going
    on, for how long, and how big Go's module and build caches have grown: a
    cold Kubernetes build is minutes of `go` printing nothing."""
    if not progress:
        yield
        return
    done = threading.Event()
    start = time.monotonic()
    go = cache_root() / "go"

    def beat() -> None:
        while not done.wait(every):
            minutes, seconds = divmod(int(time.monotonic() - start), 60)
            log(progress, f"   ... {what}: {minutes}m{seconds:02d}s so far; Go's module cache "
                          f"{_tree_mib(go / 'mod'):.0f} MiB, build cache "
                          f"{_tree_mib(go / 'build'):.0f} MiB")
    beating = threading.Thread(target=beat, daemon=True)
    beating.start()
    try:
        yield
    finally:
        done.set()
        beating.join()


def cached(binary: GoBinary, arch: str) -> bool:
    built = _built_path(binary, arch)
    stamp_file = _install_dir(binary, arch) / "stamp.json"
    return (built.is_file() and stamp_file.is_file()
            and stamp_file.read_text() == _stamp(binary, arch) and _is_static(built))


def build(binary: GoBinary, arch: str = "amd64", progress=None) -> Path:
    """Path of a cached binary, running `go install` first if it is missing.
    One build per binary at a time: a second caller (another process, say
    scripts/setup-host's background build) waits for the first, then finds
    the binary cached."""
    if arch not in ARCHES:
        raise ValueError(f"unsupported arch {arch!r}; one of {', '.join(ARCHES)}")
    name = binary.name
    gopath = _install_dir(binary, arch)
    built = _built_path(binary, arch)
    if cached(binary, arch):
        log(progress, f"cached   {name} {binary.version} ({arch}): {built}")
        return built
    gopath.mkdir(parents=True, exist_ok=True)
    with open(gopath.parent / f".{gopath.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(progress, f"waiting  {name} {binary.version} ({arch}): another process is "
                          "building it (scripts/setup-host's background build, say)")
            with heartbeat(progress, f"waiting for {name}"):
                fcntl.flock(lock, fcntl.LOCK_EX)
        if cached(binary, arch):
            log(progress, f"cached   {name} {binary.version} ({arch}): {built}")
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
    log(progress, f"building {name} {binary.version} ({arch}, cgo={env['CGO_ENABLED']}, "
                  f"{LINK_MODE}) ...")
    start = time.monotonic()
    gopath.mkdir(parents=True, exist_ok=True)
    stamp_file.unlink(missing_ok=True)
    with heartbeat(progress, f"building {name}"):
        if binary.gopath_sources:
            proc = _gopath_build(binary, arch, env, built)
        elif binary.module_dir:
            proc = _wrapper_build(binary, arch, env, built)
        else:
            cmd = ["go", "install", "-trimpath", f"-ldflags={binary.link_ldflags(arch)}"]
            if binary.tags(arch):
                cmd.append(f"-tags={','.join(binary.tags(arch))}")
            cmd.append(f"{binary.package}@{binary.version}")
            proc = subprocess.run(cmd, env=env, cwd=str(gopath), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
    how = ("a GOPATH build of" if binary.gopath_sources
           else "a wrapper module build of" if binary.module_dir else "go install")
    if proc.returncode != 0 or not built.is_file():
        raise BuildFailed(
            f"{how} {binary.package}@{binary.version} for {arch} failed "
            f"(exit {proc.returncode}): {proc.stdout.strip()[-2000:]}", proc.stdout)
    if not _is_static(built):
        raise BuildFailed(
            f"{how} {binary.package}@{binary.version} for {arch} did not produce a "
            f"statically linked ELF binary: {built}", proc.stdout)
    stamp_file.write_text(stamp)
    log(progress, f"built    {name} in {time.monotonic() - start:.1f}s: {built}")
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


def _wrapper_build(binary: GoBinary, arch: str, env: dict,
                   built: Path) -> subprocess.CompletedProcess:
    """`go build PACKAGE` (`go test -c PACKAGE` for a test binary) in a copy
    of the wrapper module binary.module_dir (the copy keeps the repository
    untouched; -mod=readonly refuses a go.mod or go.sum that does not already
    say everything)."""
    src = Path(env["GOPATH"]) / "src" / "wrapper"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(binary.module_dir, src)
    verb = ["test", "-c"] if binary.test_binary else ["build"]
    cmd = ["go", *verb, "-mod=readonly", "-trimpath",
           f"-ldflags={binary.link_ldflags(arch)}"]
    if binary.tags(arch):
        cmd.append(f"-tags={','.join(binary.tags(arch))}")
    cmd += ["-o", str(built), binary.package]
    built.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.run(cmd, env=env, cwd=str(src), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
