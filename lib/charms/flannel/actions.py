"""The charm's actions (actions.yaml), as reactive/flannel.py is its hooks'
table of contents: each reads its parameters, runs one step and hands Juju
what it returns. actions/<name> runs main() once the bootstrap has the
charm's venv (charms/flannel/bootstrap.py run_action)."""
from __future__ import annotations

import os
import sys
import time
import traceback

from charmhelpers.core import hookenv

from .hook import context
from .steps import debug_bundle, diagnosis


def check_network(params: dict) -> None:
    report = diagnosis.check_network(context(), timeout=float(params["timeout"]))
    set_results(report.as_results())
    if not report.ok:
        hookenv.action_fail(report.summary)


def list_leases(params: dict) -> None:
    try:
        rows = diagnosis.list_leases(context(), timeout=float(params["timeout"]))
    except diagnosis.LeasesUnreadable as error:
        hookenv.action_fail(f"cannot read the leases from {error.where}: {error.reason}")
        return
    unanswered = [row.lease.subnet for row in rows if row.node_answers is False]
    without_unit = [row.lease.subnet for row in rows if row.unit is None]
    gone = [row.lease.subnet for row in rows if row.unheld]
    set_results({"count": str(len(rows)),
                 "leases": {f"lease-{n}": row.as_results() for n, row in enumerate(rows)},
                 "unanswered": ", ".join(unanswered) or "none",
                 "without-unit": ", ".join(without_unit) or "none",
                 "nodes-gone": ", ".join(gone) or "none"})


def debug(params: dict) -> None:
    path = debug_bundle.write(context(), journal_lines=int(params["journal-lines"]),
                              now=time.time())
    unit = hookenv.local_unit()
    set_results({"path": str(path),
                 "command": f"juju ssh {unit} -- sudo cat {path} > {path.name}"})


ACTIONS = {"check-network": check_network, "list-leases": list_leases, "debug": debug}


def set_results(results: dict) -> None:
    """action-set, a nested dict as Juju's dotted keys."""
    flat = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else key, inner)
        else:
            flat[prefix] = str(value)
    walk("", results)
    hookenv.action_set(flat)


def main() -> None:
    name = os.path.basename(sys.argv[0])
    try:
        ACTIONS[name](hookenv.action_get() or {})
    except Exception as error:   # an action answers with a reason, never a traceback
        hookenv.log(f"{name} failed:\n{traceback.format_exc()}", level=hookenv.ERROR)
        hookenv.action_fail(f"{name} could not finish: {type(error).__name__}: {error}")
