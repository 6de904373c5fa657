"""python -m sandbox faults --charm DIR [--resource TARBALL] [--only TEXT ...] [--soak]

Play every fault row, each on a fresh two-machine sandbox cluster with pods,
and print the table: fault, status seen during it, recovery time, files
lost. Exit status 1 if any row failed."""
from __future__ import annotations

import sys
from pathlib import Path

from sandbox.faults import ROWS, run_row, table


def selected(only: list[str], soak: bool) -> list:
    rows = [r for name, r in sorted(ROWS.items()) if soak or not r.soak]
    if only:
        rows = [r for r in rows if any(text in r.name for text in only)]
    return rows


def main(argv: list[str]) -> int:
    import argparse

    from sandbox.resource import build_resource, host_arch

    parser = argparse.ArgumentParser(prog="python -m sandbox faults", description=__doc__)
    parser.add_argument("--charm", type=Path, required=True, help="the built charm directory")
    parser.add_argument("--resource", type=Path,
                        help="flannel-<arch>.tar.gz (default: build it with go install)")
    parser.add_argument("--only", action="append", default=[],
                        help="play the rows whose name contains TEXT (repeatable)")
    parser.add_argument("--soak", action="store_true", help="include the long soak rows")
    args = parser.parse_args(argv)
    rows = selected(args.only, args.soak)
    if not rows:
        print(f"no fault row matches {args.only}; rows: {', '.join(sorted(ROWS))}",
              file=sys.stderr)
        return 2
    resource = args.resource or build_resource(host_arch(), Path(args.charm).parent,
                                               progress=print)
    outcomes = []
    for r in rows:
        print(f"== {r.name}", flush=True)
        outcomes.append(run_row(r, args.charm, resource, say=lambda t: print(t, flush=True)))
    print()
    print(table(outcomes))
    return 0 if all(o.passed for o in outcomes) else 1
