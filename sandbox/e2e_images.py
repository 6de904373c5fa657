"""The images Kubernetes' e2e network tests run (sandbox.conformance), under
the names the e2e framework's image manifest gives them
(k8s.io/kubernetes test/utils/image/manifest.go at the sandbox's release), so
that no test is changed: no registry is reachable here, so each is built on
this host and imported into every machine's containerd.

- ``agnhost:2.66.1``: test/images/agnhost of the same release
  (sandbox/e2e-module) on what its Dockerfile adds to alpine (dig, curl,
  netcat-openbsd, ip, iperf, bash, socat), taken from Debian's packages, with
  busybox's applets for the rest of alpine's userland, CoreDNS at /coredns,
  porter's certificate and the users the Dockerfile makes. Its userland is
  glibc's, not alpine's musl: the DNS specs' "musl" prober resolves as the
  glibc one does (no spec fails for it; musl's resolver goes untested);
- ``busybox:1.37.0-2``: Debian's busybox-static, as sandbox.cri's busybox;
- ``pause:3.10.2``: Kubernetes' own build/pause/linux/pause.c, compiled
  static;
- ``glibc-dns-testing:2.1.1``: a glibc userland with dig (Debian's
  bind9-dnsutils and libc-bin's getent), as upstream builds it on Debian;
- ``nginx:1.27.0-2``: Debian's nginx (1.22) serving its welcome page on :80;
- ``sandbox.local/coredns``: CoreDNS alone, for the cluster DNS.

A Debian image is the closure of its packages as apt resolves it with
nothing installed (``apt-get -s`` over an empty dpkg status), each .deb
unpacked with ``dpkg-deb -x`` (no maintainer scripts: what they would do is
done here), documentation left out.

API::

    archives(progress=None) -> {name: Path}   # OCI archives, built once, cached
    cached() -> bool                          # all built (nothing is built to know)
    import_into(runtime, names=None, progress=None)   # `ctr images import` of each
    IMAGES                                    # name -> the reference pods ask for
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.cri import (APPLETS, BUSYBOX, IMAGE_FORMAT, _layer as busybox_layer,
                         archive_paths, cached_archives, oci_archive)
from sandbox.resource import (AGNHOST_VERSION, COREDNS_VERSION, KUBERNETES_VERSION,
                              binary_path, cache_root, host_arch)

E2E_REGISTRY = "registry.k8s.io/e2e-test-images"
IMAGES = {
    "agnhost": f"{E2E_REGISTRY}/agnhost:{AGNHOST_VERSION}",
    "busybox": f"{E2E_REGISTRY}/busybox:1.37.0-2",
    "pause": "registry.k8s.io/pause:3.10.2",
    "glibc-dns-testing": f"{E2E_REGISTRY}/glibc-dns-testing:2.1.1",
    "nginx": f"{E2E_REGISTRY}/nginx:1.27.0-2",
    "coredns": f"sandbox.local/coredns:{COREDNS_VERSION.lstrip('v')}",
}
# Bumped when what an image holds changes beyond this module's source (the
# cache key hashes the source): Debian's packages, say.
FORMAT = "2"
DEBIAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# alpine's `adduser -u 1000 user-defined-in-image`, `addgroup -g 50000 ...`
# (agnhost's Dockerfile; the security-context tests look for them)
PASSWD = ("root:x:0:0:root:/root:/bin/sh\n"
          "www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin\n"
          "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"
          "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
GROUP = ("root:x:0:\nwww-data:x:33:\nuser-defined-in-image:x:1000:\n"
         "group-defined-in-image:x:50000:user-defined-in-image\nnogroup:x:65534:\n")
# what a .deb brings that no container reads
SKIPPED = ("usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/",
           "usr/share/lintian/")


@dataclass(frozen=True)
class Image:
    reference: str
    entrypoint: tuple = ()
    cmd: tuple = ()
    packages: tuple = ()           # Debian packages whose closure is the userland
    binaries: dict = field(default_factory=dict)   # path in image -> sandbox.resource name


SPECS = {
    "agnhost": Image(IMAGES["agnhost"], ("/agnhost",), ("pause",),
                     ("bind9-dnsutils", "curl", "netcat-openbsd", "iproute2", "iperf", "bash",
                      "socat", "dash", "coreutils", "libc-bin", "grep", "sed"),
                     {"agnhost": "agnhost", "coredns": "coredns"}),
    "glibc-dns-testing": Image(IMAGES["glibc-dns-testing"], (), ("/bin/sh",),
                               ("bind9-dnsutils", "dash", "bash", "coreutils", "libc-bin",
                                "grep", "sed"),
                               {"coredns": "coredns"}),
    # upstream's Cmd (nginx:1.27's), so that a pod's args replace it alone
    "nginx": Image(IMAGES["nginx"], (), ("nginx", "-g", "daemon off;"),
                   ("nginx", "dash", "coreutils")),
    "busybox": Image(IMAGES["busybox"], (), ("sh",)),
    "pause": Image(IMAGES["pause"], ("/pause",)),
    "coredns": Image(IMAGES["coredns"], ("/coredns",), (), (), {"coredns": "coredns"}),
}


def _say(progress, text: str) -> None:
    if progress:
        progress(text)


# --- Debian userlands ------------------------------------------------------------
def _apt(args: list[str], status: Path, archives: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["apt-get", *args, "-o", f"Dir::State::status={status}",
         "-o", f"Dir::Cache::archives={archives}", "-o", "Debug::NoLocking=1",
         "-o", "APT::Install-Recommends=false"],
        capture_output=True, text=True)


def _debs(packages: tuple, work: Path) -> list[Path]:
    """The .debs of `packages` and everything they depend on, as apt
    resolves them for an empty machine, downloaded into the cache."""
    status = work / "status"
    status.write_text("")
    archives = cache_root() / "images" / "debs"
    (archives / "partial").mkdir(parents=True, exist_ok=True)
    plan = _apt(["-s", "install", *packages], status, archives)
    if plan.returncode != 0:
        raise RuntimeError(f"apt cannot resolve {' '.join(packages)}: {plan.stderr.strip()}")
    wanted = re.findall(r"^Inst (\S+) \((\S+) ", plan.stdout, re.M)
    for attempt in (1, 2):
        got = _apt(["install", "--download-only", "-y", "-qq", *packages], status, archives)
        if got.returncode == 0:
            break
        if attempt == 1:     # a fresh machine's package lists may be stale
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
    else:
        raise RuntimeError(f"apt-get download of {' '.join(packages)} failed: "
                           f"{got.stderr.strip()[-1000:]}")
    debs = []
    for name, version in wanted:
        found = sorted(archives.glob(f"{name}_{version.replace(':', '%3a')}_*.deb"))
        if not found:
            raise RuntimeError(f"{name} {version}: no .deb in {archives}")
        debs.append(found[0])
    return debs


def _unpack(debs: list[Path], root: Path) -> None:
    for deb in debs:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    for skipped in SKIPPED:
        shutil.rmtree(root / skipped, ignore_errors=True)


def _userland(root: Path) -> None:
    """What debootstrap and the maintainer scripts would leave: /bin/sh,
    accounts, name service, the loader's cache."""
    (root / "bin").mkdir(exist_ok=True)
    sh = root / "bin" / "sh"
    if not sh.exists():
        sh.symlink_to("dash")
    etc = root / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(PASSWD)
    (etc / "group").write_text(GROUP)
    (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\nhosts: files dns\n")
    for d in ("tmp", "var/tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
        (root / d).chmod(0o1777)
    for d in ("proc", "sys", "dev", "run", "root"):
        (root / d).mkdir(exist_ok=True)
    subprocess.run(["ldconfig", "-r", str(root)], check=True, capture_output=True)


# what update-alternatives would link (the packages' postinst)
ALTERNATIVES = {"bin/nc": "nc.openbsd", "usr/bin/awk": "mawk"}


def _alternatives(root: Path) -> None:
    for link, target in ALTERNATIVES.items():
        path = root / link
        if (path.parent / target).exists() and not path.exists():
            path.symlink_to(target)


def _busybox_applets(root: Path) -> None:
    """busybox at /bin/busybox and a link for each of its applets the
    Debian packages did not bring (alpine's userland is busybox's)."""
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    listed = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True,
                            check=True).stdout.split()
    have = {p.name for d in ("bin", "sbin", "usr/bin", "usr/sbin")
            for p in (root / d).glob("*")}
    for applet in listed:
        if applet not in have:
            (root / "bin" / applet).symlink_to("busybox")


def _nginx(root: Path) -> None:
    """What nginx-common's postinst makes: the default site enabled, its
    welcome page in the site's root, the directories nginx writes."""
    enabled = root / "etc/nginx/sites-enabled"
    enabled.mkdir(parents=True, exist_ok=True)
    if not (enabled / "default").exists():
        (enabled / "default").symlink_to("/etc/nginx/sites-available/default")
    for d in ("var/log/nginx", "var/lib/nginx", "run", "var/www/html"):
        (root / d).mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "usr/share/nginx/html/index.html",
                root / "var/www/html/index.nginx-debian.html")


def _agnhost(root: Path) -> None:
    """agnhost's Dockerfile: /agnhost-2, /uploads, porter's certificate,
    iperf in /usr/local/bin."""
    (root / "agnhost-2").symlink_to("agnhost")
    (root / "uploads").mkdir()
    porter = _kubernetes_source() / "test/images/agnhost/porter"
    for name in ("localhost.crt", "localhost.key"):
        shutil.copy(porter / name, root / name)
    (root / "usr/local/bin").mkdir(parents=True, exist_ok=True)
    (root / "usr/local/bin/iperf").symlink_to("/usr/bin/iperf")
    _alternatives(root)
    _busybox_applets(root)


def _kubernetes_source() -> Path:
    """k8s.io/kubernetes at the sandbox's release, as Go's module cache holds
    it (the e2e binaries' build downloaded it)."""
    return cache_root() / "go" / "mod" / "k8s.io" / f"kubernetes@{KUBERNETES_VERSION}"


def _pause(root: Path, work: Path) -> None:
    """Kubernetes' pause, compiled static as its Makefile does."""
    version = IMAGES["pause"].rsplit(":", 1)[1]
    subprocess.run(["gcc", "-Os", "-Wall", "-static", f"-DVERSION=v{version}", "-o",
                    str(root / "pause"), str(_kubernetes_source() / "build/pause/linux/pause.c")],
                   check=True, capture_output=True)


# --- layers and archives ---------------------------------------------------------------
def _tar_of(root: Path) -> tuple[bytes, bytes]:
    """(uncompressed tar, gzip of it) of a tree, owners and mtimes fixed."""
    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime = 0
        info.uname = info.gname = "root" if info.uid == 0 else ""
        return info

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(root.iterdir()):
            tar.add(path, arcname=path.name, filter=normalise)
    tar_bytes = raw.getvalue()
    return tar_bytes, _gzip(tar_bytes)


def _gzip(data: bytes) -> bytes:
    return subprocess.run(["gzip", "-n", "-6"], input=data, capture_output=True,
                          check=True).stdout


def _layer(name: str, spec: Image, work: Path, progress) -> tuple[bytes, bytes]:
    if name == "busybox":
        return busybox_layer()
    root = work / "root"
    root.mkdir()
    if spec.packages:
        debs = _debs(spec.packages, work)
        _say(progress, f"   {name}: {len(debs)} Debian packages")
        _unpack(debs, root)
        _userland(root)
    else:
        for d in ("tmp", "etc"):
            (root / d).mkdir()
        (root / "tmp").chmod(0o1777)
    for path, binary in spec.binaries.items():
        shutil.copy(binary_path(binary, host_arch(), progress), root / path)
    if name == "agnhost":
        _agnhost(root)
    elif name == "nginx":
        _nginx(root)
    elif name == "pause":
        _pause(root, work)
    return _tar_of(root)


def _key() -> str:
    """What the archives are made of: this module (its specs and how it
    lays out each userland), sandbox.cri's image format (the busybox layer
    and the archive), the binaries' builds and busybox's."""
    stamps = {}
    for name in ("agnhost", "coredns"):
        built = binary_path(name, host_arch())
        st = built.stat()
        stamps[name] = f"{st.st_size}:{st.st_mtime_ns}"
    st = BUSYBOX.stat()
    specs = {n: [s.reference, s.entrypoint, s.cmd, s.packages, s.binaries]
             for n, s in SPECS.items()}
    source = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    text = json.dumps([FORMAT, source, IMAGE_FORMAT, specs, stamps,
                       f"{st.st_size}:{st.st_mtime_ns}", APPLETS, host_arch()], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# IMAGES' names in the e2e framework's manifest (test/utils/image/manifest.go)
MANIFEST_NAMES = {"agnhost": "Agnhost", "busybox": "BusyBox", "pause": "Pause",
                  "glibc-dns-testing": "GlibcDnsTesting", "nginx": "Nginx"}
REGISTRIES = {"PromoterE2eRegistry": E2E_REGISTRY, "GcRegistry": "registry.k8s.io"}


def manifest_references() -> dict[str, str]:
    """The references the e2e framework of the sandbox's release asks for,
    read from its image manifest."""
    text = (_kubernetes_source() / "test/utils/image/manifest.go").read_text()
    found = {}
    for name, config in MANIFEST_NAMES.items():
        m = re.search(rf'configs\[{config}\] = Config\{{list\.(\w+), "([^"]+)", "([^"]+)"\}}',
                      text)
        if m and m.group(1) in REGISTRIES:
            found[name] = f"{REGISTRIES[m.group(1)]}/{m.group(2)}:{m.group(3)}"
    return found


def archives(progress=None) -> dict[str, Path]:
    """Every image's OCI archive, built into $FLANNEL_CACHE/images/e2e once
    (one builder at a time; the others find them made). Refuses to build
    under a name the e2e framework does not ask for."""
    key = _key()      # the binaries built first: their build brings the e2e sources
    wanted = manifest_references()
    wrong = {n: (IMAGES[n], wanted.get(n)) for n in MANIFEST_NAMES if wanted.get(n) != IMAGES[n]}
    if wrong:
        raise RuntimeError(f"e2e images named otherwise than the e2e framework asks "
                           f"(ours, its): {wrong}")
    out_dir = cache_root() / "images" / "e2e"

    def make(name: str) -> bytes:
        spec = SPECS[name]
        _say(progress, f"building image {spec.reference}")
        with tempfile.TemporaryDirectory(dir=out_dir) as work:
            layer = _layer(name, spec, Path(work), progress)
        return oci_archive(spec.reference, list(spec.entrypoint), layer,
                           cmd=list(spec.cmd) or None, path=DEBIAN_PATH)
    return cached_archives(out_dir, key, list(SPECS), make)


def cached() -> bool:
    """Every archive is built for what this checkout would build (its
    binaries cached too); builds nothing."""
    from sandbox.resource import BINARIES, cached as binary_cached
    if not all(binary_cached(BINARIES[name], host_arch()) for name in ("agnhost", "coredns")):
        return False
    return all(path.is_file() for path in
               archive_paths(cache_root() / "images" / "e2e", _key(), SPECS).values())


def import_into(runtime, names=None, progress=None) -> None:
    """The images `names` (every one if None) into `runtime`'s containerd
    (sandbox.cri.Containerd)."""
    for name, archive in archives(progress).items():
        if names is None or name in names:
            runtime.ctr("images", "import", "--snapshotter", "native", str(archive))


if __name__ == "__main__":
    # scripts/setup-host builds them in the background, after the e2e
    # binaries; --cached-only: exit 1 unless all are built, build nothing
    if sys.argv[1:] == ["--cached-only"]:
        sys.exit(0 if cached() else 1)
    for image, path in archives(progress=print).items():
        print(f"{image}: {path}")
