"""What every `python -m sandbox` command takes: the built charm and the
flannel resource to attach (built with go install when not given)."""

from __future__ import annotations

import argparse
from pathlib import Path


def charm_parser(command: str, description: str | None) -> argparse.ArgumentParser:
    """An argument parser for `python -m sandbox <command>` with --charm and
    --resource; the command adds its own options."""
    parser = argparse.ArgumentParser(prog=f"python -m sandbox {command}", description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--charm", type=Path, required=True, help="the built charm directory")
    parser.add_argument("--resource", type=Path,
                        help="flannel-<arch>.tar.gz (default: build it with go install)")
    return parser


def resource_for(args: argparse.Namespace) -> Path:
    """The resource given, or this machine's, built (and cached) beside the charm."""
    from sandbox.resource import build_resource, host_arch

    return args.resource or build_resource(host_arch(), Path(args.charm).parent, progress=print)
