"""The fault matrix: every row of sandbox.faults, each on a fresh
two-machine cluster with pods (the same rows `python -m sandbox faults`
plays). A row passes when the unit came back by itself, no worker file was
lost, the install record matches the disk and the pods still talk; the
table (statuses seen during each fault, recovery times) is printed in the
session summary. The rows about the pod network play in dual-stack, whose
checks cover both families (the reboot in IPv4 alone too).
A failed hook waits for the bench's `juju resolve` (auto_retry=False), so
that what the fault did is seen before anything retries it."""
from __future__ import annotations

import pytest
from functional_kit import FAULT_OUTCOMES

from sandbox.faults import DUAL_STACK, DUAL_STACK_ONLY, NETWORK_ROWS, ROWS, FaultBench, table

pytestmark = pytest.mark.functional

MATRIX = [name for name, r in sorted(ROWS.items()) if not r.soak and name not in DUAL_STACK_ONLY]


@pytest.mark.parametrize("name", MATRIX)
def test_fault_row(name, open_cluster):
    r = ROWS[name]
    with open_cluster(f"fault {name}", r.workers, auto_retry=False) as cluster:
        outcome = r.play(FaultBench(cluster, say=cluster.say))
    FAULT_OUTCOMES.append(outcome)
    cluster.say(table([outcome]))
    assert outcome.files_lost == 0, outcome.problems
    assert outcome.problems == []


@pytest.mark.parametrize("name", NETWORK_ROWS)
def test_fault_row_in_dual_stack(name, open_cluster):
    """The same row with ipv6-cidr set: the leases, routes and devices it
    breaks are of both families, and every pod check pings both."""
    r = ROWS[name]
    with open_cluster(f"fault {name} (dual-stack)", r.workers, auto_retry=False) as cluster:
        outcome = r.play(FaultBench(cluster, say=cluster.say, network_config=DUAL_STACK))
    outcome.fault += " (dual-stack)"
    FAULT_OUTCOMES.append(outcome)
    cluster.say(table([outcome]))
    assert outcome.files_lost == 0, outcome.problems
    assert outcome.problems == []
