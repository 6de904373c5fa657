"""The python3 of an Ubuntu release this host has no build of, built from
source once and cached: Ubuntu 26.04 ships CPython 3.14 (its python3.14
3.14.4), which neither Debian bookworm nor the image's pyenv has, and which
pyenv and uv would fetch from hosts that do not resolve here. Debian's
archive carries the same upstream tarball (python3.14_3.14.4.orig.tar.xz).

    python -m sandbox.cpython            # build what is missing (minutes), then print paths
    python -m sandbox.cpython --cached-only   # exit 1 if a build is missing

Built under ``$FLANNEL_CACHE/cpython/<version>`` (``bin/python3.14``), with
the modules the charm's hooks use (ssl, sqlite3, zlib, ctypes: Debian's -dev
packages scripts/setup-host installs) and no test modules; one build at a
time per version (a lock), a finished build marked by a stamp. Standard
library only: the host's python3 runs it.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Source:
    version: str
    url: str
    sha256: str   # pinned when first fetched: the archive's file must not change

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


# Ubuntu 26.04's python3.14 (packages.ubuntu.com/resolute/python3.14: 3.14.4)
SOURCES = {
    "3.14": Source("3.14.4", "http://deb.debian.org/debian/pool/main/p/python3.14/"
                             "python3.14_3.14.4.orig.tar.xz",
                   "d923c51303e38e249136fc1bdf3568d56ecb03214efdef48516176d3d7faaef8"),
}
# what the build needs beyond gcc and make (scripts/setup-host installs them)
BUILD_PACKAGES = ("libssl-dev", "zlib1g-dev", "libffi-dev", "libsqlite3-dev", "libbz2-dev",
                  "liblzma-dev", "uuid-dev")


def cache_root() -> Path:
    return Path(os.environ.get("FLANNEL_CACHE", "/var/cache/flannel-charm"))


def prefix(source: Source) -> Path:
    return cache_root() / "cpython" / source.version


def interpreter(minor: str) -> Path | None:
    """The cached build's python<minor>, if it was built; None otherwise."""
    source = SOURCES.get(minor)
    if source is None:
        return None
    built = prefix(source) / "bin" / f"python{minor}"
    return built if (prefix(source) / ".built").exists() and built.exists() else None


def build(source: Source, log=sys.stdout) -> Path:
    """Build `source` into its prefix unless it is there; returns the binary."""
    where = prefix(source)
    where.parent.mkdir(parents=True, exist_ok=True)
    with open(where.parent / f".{source.version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = interpreter(source.minor)
        if found:
            return found
        shutil.rmtree(where, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="cpython-", dir=where.parent) as tmp:
            archive = Path(tmp) / Path(source.url).name
            print(f"cpython: fetching {source.url}", file=log, flush=True)
            with urllib.request.urlopen(source.url, timeout=120) as answer, \
                    open(archive, "wb") as out:
                shutil.copyfileobj(answer, out)
            digest = hashlib.sha256(archive.read_bytes()).hexdigest()
            if digest != source.sha256:
                raise RuntimeError(f"{source.url}: sha256 {digest}, not {source.sha256}")
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
            tree = Path(tmp) / f"Python-{source.version}"
            print(f"cpython: building {source.version} into {where} (about 3 minutes on 2 "
                  "cores)", file=log, flush=True)
            steps = (["./configure", f"--prefix={where}", "--without-ensurepip",
                      "--disable-test-modules"],
                     ["make", f"-j{os.cpu_count() or 2}"],
                     ["make", "altinstall"])
            for step in steps:
                done = subprocess.run(step, cwd=tree, capture_output=True, text=True)
                if done.returncode:
                    raise RuntimeError(f"{' '.join(step)} failed:\n{done.stdout[-3000:]}"
                                       f"{done.stderr[-3000:]}")
        (where / ".built").write_text(source.sha256 + "\n")
    return interpreter(source.minor)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.cpython", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cached-only", action="store_true",
                        help="build nothing: exit 1 if a build is missing")
    args = parser.parse_args(argv)
    missing = [s for s in SOURCES.values() if interpreter(s.minor) is None]
    if args.cached_only:
        return 1 if missing else 0
    for source in missing:
        build(source)
    for minor in SOURCES:
        print(interpreter(minor))
    return 0


if __name__ == "__main__":
    sys.exit(main())
