"""python -m sandbox faults --charm DIR [--resource TARBALL] [--only TEXT ...] [--soak]
                           [--dual-stack]

Play every fault row, each on a fresh two-machine sandbox cluster with pods,
and print the table: fault, status seen during it, recovery time, files
lost. With --dual-stack, flannel is deployed with ipv6-cidr and the pods
must reach each other by both families (by default only NETWORK_ROWS, the
rows about the pod network; --only picks others). Exit status 1 if any row
failed."""
from __future__ import annotations

import sys
from sandbox.cli import charm_parser, resource_for
from sandbox.faults import DUAL_STACK, NETWORK_ROWS, ROWS, run_row, table


def selected(only: list[str], soak: bool) -> list:
    rows = [r for name, r in sorted(ROWS.items()) if soak or not r.soak]
    if only:
        rows = [r for r in rows if any(text in r.name for text in only)]
    return rows


def main(argv: list[str]) -> int:
    parser = charm_parser("faults", __doc__)
    parser.add_argument("--only", action="append", default=[],
                        help="play the rows whose name contains TEXT (repeatable)")
    parser.add_argument("--soak", action="store_true", help="include the long soak rows")
    parser.add_argument("--dual-stack", action="store_true",
                        help=f"deploy flannel with {DUAL_STACK} (the network rows by default)")
    args = parser.parse_args(argv)
    only = args.only or (list(NETWORK_ROWS) if args.dual_stack else [])
    rows = selected(only, args.soak)
    if not rows:
        print(f"no fault row matches {args.only}; rows: {', '.join(sorted(ROWS))}",
              file=sys.stderr)
        return 2
    resource = resource_for(args)
    outcomes = []
    for r in rows:
        print(f"== {r.name}", flush=True)
        outcomes.append(run_row(r, args.charm, resource, say=lambda t: print(t, flush=True),
                                network_config=DUAL_STACK if args.dual_stack else None))
    print()
    print(table(outcomes))
    return 0 if all(o.passed for o in outcomes) else 1
