"""The fault matrix: every row of sandbox.faults on a two-machine cluster
with pods (the same rows `python -m sandbox faults` plays, each on a fresh
cluster there). A row passes when the unit came back by itself, no worker
file was lost, the install record matches the disk and the pods still talk;
the table (statuses seen during each fault, recovery times) is printed in
the session summary. The rows about the pod network play in dual-stack,
whose checks cover both families (the reboot in IPv4 alone too).
A failed hook waits for the bench's `juju resolve` (auto_retry=False), so
that what the fault did is seen before anything retries it.

The rows of a chain (CHAINS) play one after the other on one cluster: the
first deploys flannel, each next one finds it as the row before handed it
on (FaultBench.handover_problems: the row passed, every unit active, no
kill left armed, flannel configured as deployed; the row's pods deleted)
and holds it to its checks from there. A row that fails, or does not hand
the cluster on, closes it: the next row opens its own. A chain is one
pytest-xdist group: one worker plays it whole, in order."""
from __future__ import annotations

import contextlib
import sys

import pytest
from functional_kit import FAULT_OUTCOMES

from sandbox.faults import DUAL_STACK, DUAL_STACK_ONLY, NETWORK_ROWS, ROWS, FaultBench, table

pytestmark = pytest.mark.functional

MATRIX = [name for name, r in sorted(ROWS.items()) if not r.soak and name not in DUAL_STACK_ONLY]

# Each chain's first row may fault flannel's install; a later row must start
# from an active flannel (bench.deploy()); only a chain's last row may leave
# flannel configured otherwise (1c's port, 4b's VNI, 4c's resource). Fresh
# clusters for the rest: 5 (a tmpfs left over /usr/local/bin), 6 (files the
# record cannot prove left on the nodes), 1e (etcd replaced, then stopped),
# 9 (four machines).
CHAINS = {
    "fault-chain-1a": ("1a etcd down during install", "4a install killed (SIGKILL sweep)",
                       "4b config-changed killed (SIGKILL sweep)"),
    # 4d plays on a cluster of its own: after 1b a unit re-added by its
    # sweep may lease another subnet than its snapshot's (seen in CI)
    "fault-chain-1b": ("1b etcd down at the first network config",
                       "4c upgrade-charm killed (SIGKILL sweep)"),
    "fault-chain-3": ("3 etcd CA and client certificate replaced",
                      "7b flanneld crash-looping (broken binary in an upgraded resource)",
                      "8 machine reboot",
                      "1c etcd down during update-status and a config change"),
}
DUAL_STACK_CHAINS = {
    "fault-chain-dual-stack": ("7a flanneld killed with SIGKILL", "8 machine reboot",
                               "2 etcd data wiped"),
}


def chained(names, chains: dict) -> tuple[list, dict]:
    """(the parameters: each chain's rows in its order, then the rest;
    row -> (chain, whether it is the chain's last row))."""
    of = {n: (chain, n == rows[-1]) for chain, rows in chains.items() for n in rows}
    unknown = sorted(set(of) - set(names))
    if unknown:
        raise ValueError(f"chained rows not in the matrix: {unknown}")
    params = [pytest.param(n, marks=pytest.mark.xdist_group(chain))
              for chain, rows in chains.items() for n in rows]
    return params + [n for n in names if n not in of], of


MATRIX_PARAMS, CHAIN_OF = chained(MATRIX, CHAINS)
DUAL_STACK_PARAMS, DUAL_STACK_CHAIN_OF = chained(NETWORK_ROWS, DUAL_STACK_CHAINS)


@pytest.fixture(scope="module")
def held():
    """chain -> (an ExitStack holding its open cluster, the cluster, the rows
    played on it): what a chain's row hands the next; closed at the end."""
    chains: dict = {}
    yield chains
    with contextlib.ExitStack() as closing:
        for stack, _, _ in chains.values():
            closing.push(stack)


def play(name: str, open_cluster, held: dict, chain_of: dict, network_config=None,
         suffix: str = ""):
    """Play row `name` on a fresh cluster, or on its chain's (the cluster
    the row before handed on, else a new one); returns (cluster, outcome)."""
    r = ROWS[name]
    if name not in chain_of:
        with open_cluster(f"fault {name}{suffix}", r.workers, auto_retry=False) as cluster:
            outcome = r.play(FaultBench(cluster, say=cluster.say, network_config=network_config))
        return cluster, outcome
    chain, last = chain_of[name]
    stack, cluster, before = held.pop(chain, (None, None, []))
    if stack is None:
        stack = contextlib.ExitStack()
        cluster = stack.enter_context(open_cluster(chain, r.workers, auto_retry=False))
    cluster.say(f"== {name}{suffix}" + (f", on the cluster of {', '.join(before)} "
                                        "(alone, it deploys flannel afresh)" if before else ""))
    bench = FaultBench(cluster, say=cluster.say, network_config=network_config, shared=True)
    try:
        outcome = r.play(bench)
        why = [] if last else bench.handover_problems(outcome)
    except BaseException:
        stack.__exit__(*sys.exc_info())
        raise
    if last or why:
        if why:
            cluster.say(f"   the cluster goes with this row: {'; '.join(why)}")
        stack.close()   # the command-line check of Cluster.__exit__ fails the row
    else:
        held[chain] = (stack, cluster, before + [name])
    return cluster, outcome


@pytest.mark.parametrize("name", MATRIX_PARAMS)
def test_fault_row(name, open_cluster, held):
    cluster, outcome = play(name, open_cluster, held, CHAIN_OF)
    FAULT_OUTCOMES.append(outcome)
    cluster.say(table([outcome]))
    assert outcome.files_lost == 0, outcome.problems
    assert outcome.problems == []


@pytest.mark.parametrize("name", DUAL_STACK_PARAMS)
def test_fault_row_in_dual_stack(name, open_cluster, held):
    """The same row with ipv6-cidr set: the leases, routes and devices it
    breaks are of both families, and every pod check pings both."""
    cluster, outcome = play(name, open_cluster, held, DUAL_STACK_CHAIN_OF, DUAL_STACK,
                            " (dual-stack)")
    outcome.fault += " (dual-stack)"
    FAULT_OUTCOMES.append(outcome)
    cluster.say(table([outcome]))
    assert outcome.files_lost == 0, outcome.problems
    assert outcome.problems == []
