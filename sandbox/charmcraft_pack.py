"""`charmcraft pack` of this project on a Debian host, as on an Ubuntu one.

    python -m sandbox charmcraft-pack [--platform ubuntu-22.04-amd64] [--out DIR]

charmcraft builds in an LXD container (none here) or, with
`--destructive-mode`, on the host, which it accepts only if the host is the
platform's base (it reads /etc/os-release). So it runs:
- in a private mount namespace whose /etc/os-release is the base's Ubuntu
  identity (sandbox.ubuntu, what the sandbox's machines show), on a copy of
  the working tree (tracked and untracked files git does not ignore), so the
  checkout gets no parts/, stage/, prime/;
- with charmcraft from PyPI (scripts/charmcraft-requirements.txt, in the venv
  scripts/setup-host makes of Debian's python3, the one python3-apt is built
  for: craft-parts asks apt about build-packages through it);
- with charm-tools from PyPI behind a `charm` command: charmcraft's reactive
  plugin calls the charm snap's CLI (`charm version --format json`, `charm
  proof`, `charm build`), and PyPI's charm-tools installs `charm-version`,
  `charm-proof` and `charm-build` instead. The copy's charmcraft.yaml drops
  `build-snaps` (no snapd here; the shim stands in for the charm snap).
- with CHARMCRAFT_ENABLE_EXPERIMENTAL_EXTENSIONS=1: charmcraft 4.5.0 offers
  the reactive plugin on ubuntu@26.04 as experimental only, and refuses the
  whole project (every platform) without it.
Everything else is charmcraft.yaml as users run it, its override-build
(scripts/finish-charm) included.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import yaml

from sandbox import ubuntu

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PLATFORM = "ubuntu-22.04-amd64"

# The charm snap's CLI, as the reactive plugin calls it, on PyPI's charm-tools.
CHARM_SHIM = """#!/bin/sh
# `charm` as charmcraft's reactive plugin calls it, on charm-tools from PyPI
# (sandbox/charmcraft_pack.py).
bin={bin}
case "$1" in
  version)
    exec "$bin/python3" -c 'import importlib.metadata as m, json
print(json.dumps({{"charm-tools": {{"version": m.version("charm-tools"), "git": "pypi"}}}}))' ;;
  build) shift; exec "$bin/charm-build" "$@" ;;
  proof) shift; exec "$bin/charm-proof" "$@" ;;
  *) echo "charm: only version, build and proof are provided here, not $1" >&2; exit 2 ;;
esac
"""


class PackFailed(Exception):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("FLANNEL_CACHE", "/var/cache/flannel-charm"))


def charmcraft_path() -> Path:
    path = cache_dir() / "charmcraft" / "bin" / "charmcraft"
    if not path.exists():
        raise PackFailed(f"{path} is missing: run scripts/setup-host")
    return path


def charm_tools_bin() -> Path:
    path = cache_dir() / "charm-tools" / "bin"
    if not (path / "charm-build").exists():
        raise PackFailed(f"{path}/charm-build is missing: run scripts/setup-host")
    return path


def base_series(platform: str) -> str:
    """ubuntu-22.04-amd64 -> jammy."""
    parts = platform.split("-")
    if len(parts) != 3 or parts[0] != "ubuntu" or parts[1] not in ubuntu.SERIES_OF_VERSION:
        raise PackFailed(f"platform {platform!r}: not one of ubuntu-<"
                         + "|".join(ubuntu.SERIES_OF_VERSION) + ">-<arch>")
    return ubuntu.SERIES_OF_VERSION[parts[1]]


def stage_tree(project: Path, dest: Path) -> None:
    """Copies what git tracks or would track (not what it ignores) to `dest`."""
    listed = subprocess.run(["git", "-C", str(project), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, check=True).stdout
    for rel in filter(None, listed.decode().split("\0")):
        src = project / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel, follow_symlinks=False)
    described = subprocess.run(["git", "-C", str(project), "describe", "--dirty", "--always"],
                               capture_output=True, text=True)
    if described.returncode == 0:   # charm-build's version file (juju status shows it)
        (dest / "version").write_text(described.stdout)


def without_build_snaps(charmcraft_yaml: Path) -> None:
    project = yaml.safe_load(charmcraft_yaml.read_text())
    for part in project.get("parts", {}).values():
        part.pop("build-snaps", None)
    charmcraft_yaml.write_text(yaml.safe_dump(project, sort_keys=False))


def pack(out: Path, platform: str = DEFAULT_PLATFORM, project: Path = REPO,
         say: Callable[[str], None] = print) -> Path:
    """Packs the charm for `platform` and returns the .charm written in `out`."""
    series = base_series(platform)
    charmcraft, tools = charmcraft_path(), charm_tools_bin()
    out.mkdir(parents=True, exist_ok=True)
    (cache_dir() / "tmp").mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=cache_dir() / "tmp", prefix="charmcraft.") as tmp:
        work = Path(tmp)
        src = work / "flannel"
        stage_tree(project, src)
        without_build_snaps(src / "charmcraft.yaml")
        shim = work / "bin"
        shim.mkdir()
        (shim / "charm").write_text(CHARM_SHIM.format(bin=tools))
        (shim / "charm").chmod(0o755)
        identity = work / "os-release"
        identity.write_text(ubuntu.os_release(series))
        # craftctl (override-build) is beside charmcraft, as in its snap; python3
        # on PATH is charm-tools' (it has pip): finish-charm runs it.
        path = f"{shim}:{tools}:{charmcraft.parent}:{os.environ['PATH']}"
        env = dict(os.environ, PATH=path,
                   HOME=str(work / "home"), XDG_RUNTIME_DIR=str(work / "run"),
                   CHARMCRAFT_NO_PROMPT="1",
                   # charmcraft 4.5.0 has the reactive plugin on ubuntu@26.04 as
                   # experimental (const.REACTIVE_PLUGIN_EXPERIMENTAL_BASES) and
                   # refuses a project that names that base without this
                   CHARMCRAFT_ENABLE_EXPERIMENTAL_EXTENSIONS="1")
        for d in ("home", "run"):
            (work / d).mkdir(mode=0o700)
        log = out / f"charmcraft-{platform}.log"
        with open(log, "w") as logfile:
            done = subprocess.run(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                 'mount --bind "$0" /etc/os-release && exec "$@"', str(identity),
                 str(charmcraft), "pack", "--destructive-mode", "--verbose",
                 "--platform", platform],
                cwd=src, env=env, stdout=logfile, stderr=subprocess.STDOUT)
        packed = sorted(src.glob(f"*_{platform}.charm"))
        if done.returncode != 0 or len(packed) != 1:
            tail = "".join(log.read_text().splitlines(True)[-30:])
            raise PackFailed(f"charmcraft pack --platform {platform} failed "
                             f"(exit {done.returncode}; log {log}):\n{tail}")
        target = out / packed[0].name
        shutil.move(str(packed[0]), target)
    say(f"charmcraft pack: {target} in {time.monotonic() - started:.1f}s (log: {log})")
    return target


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox charmcraft-pack",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--platform", default=DEFAULT_PLATFORM,
                        help=f"a platform of charmcraft.yaml (default {DEFAULT_PLATFORM})")
    parser.add_argument("--out", type=Path, default=REPO / "build",
                        help="where the .charm goes (default build/)")
    args = parser.parse_args(argv)
    try:
        pack(args.out, args.platform)
    except PackFailed as error:
        print(f"charmcraft-pack: {error}", file=sys.stderr)
        return 1
    return 0
