"""What every `python -m sandbox` command takes: the built charm and the
flannel resource to attach (built with go install when not given), and how a
command that brings a cluster up ends."""

from __future__ import annotations

import argparse
import atexit
import shutil
import signal
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable


def charm_dir(path: str) -> Path:
    """--charm: a charm directory as it is, or a packed .charm (charmcraft's or
    build-charm's) unpacked as `juju deploy ./x.charm` unpacks it, into a
    directory removed when the command ends, with the archive linked beside
    it as scripts/build-charm leaves it (what a Juju 4.0 cluster deploys)."""
    from sandbox.juju.charm_archive import BadCharmArchive, unpack

    given = Path(path)
    if not given.is_file():
        return given
    tmp = Path(tempfile.mkdtemp(prefix="unpacked-charm."))
    atexit.register(shutil.rmtree, tmp, True)
    try:
        unpacked = unpack(given, tmp / "flannel")
        unpacked.with_suffix(".charm").symlink_to(given.resolve())
        return unpacked
    except (BadCharmArchive, zipfile.BadZipFile, OSError) as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def charm_parser(command: str, description: str | None) -> argparse.ArgumentParser:
    """An argument parser for `python -m sandbox <command>` with --charm and
    --resource; the command adds its own options."""
    parser = argparse.ArgumentParser(prog=f"python -m sandbox {command}", description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--charm", type=charm_dir, required=True,
                        help="the built charm directory, or a packed .charm")
    parser.add_argument("--resource", type=Path,
                        help="flannel-<arch>.tar.gz (default: build it with go install)")
    return parser


def resource_for(args: argparse.Namespace) -> Path:
    """The resource given, or this machine's, built (and cached) beside the charm."""
    from sandbox.resource import build_resource, host_arch

    return args.resource or build_resource(host_arch(), Path(args.charm).parent, progress=print)


def run_with_cluster(command: str, body: Callable[[], int]) -> int:
    """Runs `body`, which brings a cluster up and tears it down in its own
    `with`: a kill (SIGTERM) raises KeyboardInterrupt as Ctrl-C does, so that
    teardown runs either way; a ClusterError, or the sandbox's Juju refusing
    what it is asked (a .charm without manifest bases on 4.0), is one line,
    not a traceback."""
    from sandbox.cluster import ClusterError
    from sandbox.juju.model import ModelError

    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        return body()
    except (ClusterError, ModelError) as error:
        print(f"{command} failed: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; the sandbox was torn down", file=sys.stderr)
        return 130
    finally:
        # (None: a handler installed outside Python, which cannot be put back)
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
