"""Functional tests: the built charm on sandbox machines (sandbox.cluster).

Marked `functional`: they need root, network and mount namespaces, Debian's
etcd and CNI plugins, and the Go-built flanneld, flannel plugin and cnitool
(scripts/setup-host installs all of it). Every module sets
`pytestmark = pytest.mark.functional`: select them with `-m functional`,
leave them out with `-m "not functional"`.

Session fixtures: the built charm (tests/conftest.py), the resource
tarball (sandbox.resource, cached) and
`open_cluster`, which starts a sandbox Cluster and records its phase timings
for the summary printed at the end of the session. The session ends with a
check that the host is clean (no flsb- namespaces, no etcd/flanneld or
machine processes, no sandbox mounts or state): a leftover fails the run.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# (cluster label, Timings) of every cluster this process opened, and each
# test's wall time (setup + call + teardown), for the closing summary.
CLUSTER_TIMINGS: list = []
TEST_SECONDS: dict[str, float] = {}
# What the summary shows, as the process that prints it received it: under
# pytest-xdist (scripts/test runs this tier with two workers) the workers
# send their clusters' phases and fault outcomes with each test's teardown
# report (user_properties); one process alone sends them to itself.
SEEN_PHASES: dict[str, tuple[str, list]] = {}   # cluster key -> (label, [(phase, s)])
SEEN_OUTCOMES: dict[str, dict] = {}             # fault row -> Outcome as a dict
# cluster label -> the hook-order seed it plays (sandbox.cluster.lock_order_seed)
OPEN_SEEDS: dict[str, object] = {}
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "functional: the built charm on sandbox machines (root, namespaces, "
        "real etcd/flanneld/CNI plugins; minutes)")
    config.addinivalue_line(
        "markers", "kubernetes: Kubernetes itself in the sandbox (kube-apiserver, kubelet, "
        "kube-proxy; `-m 'not kubernetes'` skips them)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and OPEN_SEEDS:
        # a failure names the hook order that reproduces it
        report.sections.append(("sandbox hook-order seeds", "\n".join(
            f"{label}: FLANNEL_SANDBOX_SEED={seed} scripts/test {item.nodeid}"
            for label, seed in OPEN_SEEDS.items())))
    if call.when != "teardown":
        return
    from dataclasses import asdict

    from functional_kit import FAULT_OUTCOMES
    report.user_properties.append(("cluster-phases", [
        (f"{WORKER}:{n}", label, [(p.name, p.seconds) for p in timings.phases])
        for n, (label, timings) in enumerate(CLUSTER_TIMINGS)]))
    report.user_properties.append(("fault-outcomes", [asdict(o) for o in FAULT_OUTCOMES]))


def pytest_runtest_logreport(report):
    if not report.nodeid.startswith("tests/functional/"):
        return
    TEST_SECONDS[report.nodeid] = TEST_SECONDS.get(report.nodeid, 0.0) + report.duration
    for name, value in report.user_properties:
        if name == "cluster-phases":
            SEEN_PHASES.update({key: (label, phases) for key, label, phases in value})
        elif name == "fault-outcomes":
            SEEN_OUTCOMES.update({o["fault"]: o for o in value})


def pytest_terminal_summary(terminalreporter):
    if SEEN_OUTCOMES:
        from sandbox.faults import Outcome, table
        terminalreporter.section("fault matrix (sandbox.faults)")
        outcomes = [Outcome(**o) for _, o in sorted(SEEN_OUTCOMES.items())]
        for line in table(outcomes).splitlines():
            terminalreporter.write_line(line)
    if not SEEN_PHASES and not TEST_SECONDS:
        return
    write = terminalreporter.write_line
    terminalreporter.section("functional timings (figures, not assertions)")
    total = 0.0
    rows = []
    for label, phases in SEEN_PHASES.values():
        for phase, seconds in phases:
            rows.append((f"{label}: {phase}", seconds))
            total += seconds
    width = max([len(name) for name, _ in rows] + [40])
    if rows:
        write("phases")
        for name, seconds in rows:
            write(f"  {name:<{width}} {seconds:8.1f}s")
        write(f"  {'total of phases':<{width}} {total:8.1f}s")
    if TEST_SECONDS:
        write("tests (setup + call + teardown)")
        tests_total = 0.0
        for nodeid, seconds in TEST_SECONDS.items():
            name = nodeid.split("::", 1)[-1]
            write(f"  {name:<{width}} {seconds:8.1f}s")
            tests_total += seconds
        write(f"  {'total':<{width}} {tests_total:8.1f}s")


def pytest_sessionfinish(session, exitstatus):
    """Under pytest-xdist the controller checks the host once every worker
    is done (a worker looking while another still runs would race it)."""
    if WORKER or not session.config.pluginmanager.hasplugin("dsession"):
        return   # a worker, or no workers at all: the clean_host fixture did it
    from sandbox.cluster import host_leftovers
    left = host_leftovers()
    if left:
        session.config.get_terminal_writer().line(
            "the functional tests left these on the host:\n  " + "\n  ".join(left), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (namespaces, mounts)"
    for tool in ("ip", "nsenter", "unshare", "iptables", "/usr/bin/etcd"):
        if shutil.which(tool) is None:
            return f"needs {tool} (scripts/setup-host)"
    if not Path("/usr/lib/cni/bridge").exists():
        return "needs Debian's containernetworking-plugins (scripts/setup-host)"
    return None


def say(text: str) -> None:
    print(text, flush=True)


@pytest.fixture(scope="session", autouse=True)
def clean_host():
    """Skip without root and tools; clear what dead earlier runs left; at the
    end of the session, fail if this run left anything on the host."""
    why = _missing()
    if why:
        pytest.skip(why)
    from sandbox.cluster import host_leftovers
    from sandbox.network import cleanup_stale
    cleanup_stale()
    yield
    if WORKER:
        return   # the controller looks once all workers are done (pytest_sessionfinish)
    left = host_leftovers()
    assert not left, "the functional tests left these on the host:\n  " + "\n  ".join(left)


@pytest.fixture(scope="session")
def resource(tmp_path_factory) -> Path:
    """flannel-<arch>.tar.gz of the host's architecture (Go builds cached),
    and cnitool built now rather than inside the first pod's timing."""
    from sandbox.resource import build_resource, cnitool_path, host_arch
    tarball = build_resource(host_arch(), tmp_path_factory.mktemp("resource"), progress=say)
    cnitool_path(progress=say)
    return tarball


@pytest.fixture(scope="session")
def previous_resource(tmp_path_factory) -> Path:
    """The resource as this charm shipped it before: flanneld v0.27.4."""
    from sandbox.resource import previous_resource as build
    return build(tmp_path_factory.mktemp("previous-resource"), progress=say)


@pytest.fixture(scope="session")
def open_cluster(built_charm, resource):
    """open_cluster(label, workers=N, **options) -> a context manager giving a
    started sandbox Cluster (etcd and kubernetes-worker deployed, no flannel
    yet; options as Cluster's: worker_generation="reactive"|"ops",
    control_plane=True); its phase timings go into the session summary."""
    from sandbox.cluster import Cluster

    @contextlib.contextmanager
    def opener(label: str, workers: int, **options):
        cluster = Cluster(built_charm, resource, workers=workers, label=label,
                          say=lambda text: say(f"[{label}] {text}"), **options)
        OPEN_SEEDS[label] = cluster.seed
        CLUSTER_TIMINGS.append((label, cluster.timings))
        try:
            with cluster:
                try:
                    yield cluster
                finally:   # a failing test's hooks too: their stderr says why
                    failed = cluster.failed_hooks() if cluster.controller else []
                    if failed:
                        say(f"[{label}] hooks that failed during the run:\n  "
                            + "\n  ".join(failed))
        finally:
            OPEN_SEEDS.pop(label, None)

    return opener
