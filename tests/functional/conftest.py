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

# (cluster label, Timings) of every cluster the session opened, and each
# test's wall time (setup + call + teardown), for the closing summary.
CLUSTER_TIMINGS: list = []
TEST_SECONDS: dict[str, float] = {}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "functional: the built charm on sandbox machines (root, namespaces, "
        "real etcd/flanneld/CNI plugins; minutes)")


def pytest_runtest_logreport(report):
    # Called through the item's own hook proxy: only for tests of this directory.
    TEST_SECONDS[report.nodeid] = TEST_SECONDS.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    from functional_kit import FAULT_OUTCOMES
    if FAULT_OUTCOMES:
        from sandbox.faults import table
        terminalreporter.section("fault matrix (sandbox.faults)")
        for line in table(FAULT_OUTCOMES).splitlines():
            terminalreporter.write_line(line)
    if not CLUSTER_TIMINGS and not TEST_SECONDS:
        return
    write = terminalreporter.write_line
    terminalreporter.section("functional timings (figures, not assertions)")
    total = 0.0
    rows = []
    for label, timings in CLUSTER_TIMINGS:
        for phase in timings.phases:
            rows.append((f"{label}: {phase.name}", phase.seconds))
            total += phase.seconds
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
def open_cluster(built_charm, resource):
    """open_cluster(label, workers=N, **options) -> a context manager giving a
    started sandbox Cluster (etcd and kubernetes-worker deployed, no flannel
    yet; options as Cluster's: worker_generation="reactive"|"ops",
    control_plane=True); its phase timings go into the session summary."""
    from sandbox.cluster import Cluster

    @contextlib.contextmanager
    def opener(label: str, workers: int, **options):
        cluster = Cluster(built_charm, resource, workers=workers,
                          say=lambda text: say(f"[{label}] {text}"), **options)
        CLUSTER_TIMINGS.append((label, cluster.timings))
        with cluster:
            yield cluster
            failed = cluster.failed_hooks()
            if failed:
                say(f"[{label}] hooks that failed during the run:\n  " + "\n  ".join(failed))

    return opener
