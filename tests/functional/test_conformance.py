"""Kubernetes' own e2e tests judge the charm (sandbox.conformance): every
`[sig-network]` `[Conformance]` spec of k8s.io/kubernetes v1.37.2, unchanged,
on a control plane and two workers, in each mode flannel serves, and after
the bug report's remove/add cycle, and the negative control on the charm
it replaces. Each mode is a cluster and a few minutes (the suite under
ginkgo's four processes; 8 minutes one spec after another in etcd mode):
scripts/test --full only. The everyday suite runs five of these
specs (test_kubernetes_sees_the_overlay.py).
"""
from __future__ import annotations

import pytest

from sandbox import profile
from sandbox.conformance import MODES, cluster_options, prepare, remove_and_add, run_suite

pytestmark = [pytest.mark.functional, pytest.mark.kubernetes,
              pytest.mark.skipif(profile.current() != profile.FULL,
                                 reason="the whole conformance selection: scripts/test --full")]


def judged(open_cluster, mode: str, tmp_path, *, after_remove_add: bool = False):
    with open_cluster(f"conformance-{mode}", **cluster_options(mode)) as cluster:
        prepare(cluster, mode, print)
        if after_remove_add:
            remove_and_add(cluster, print)
        report = run_suite(cluster, mode, None, tmp_path, print)
    print(report.table())
    return report


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_sig_network_conformance_spec_passes(open_cluster, mode, tmp_path):
    report = judged(open_cluster, mode, tmp_path)
    assert report.passed, report.table()


def test_every_spec_passes_after_the_bug_reports_remove_add(open_cluster, tmp_path):
    report = judged(open_cluster, "etcd", tmp_path, after_remove_add=True)
    assert report.passed, report.table()


def test_the_charm_it_replaces_fails_them_after_remove_add(built_charm, resource, tmp_path):
    """The negative control: charm-flannel f79f180's stop hook takes the
    workers' flannel plugin, so after remove/add every one of the everyday
    five specs (each placing pods on the workers) fails."""
    from sandbox.conformance import run
    report = run(built_charm, resource, "etcd", after_remove_add=True, old_charm=True,
                 junit_dir=tmp_path)
    print(report.table())
    failed = [s.name for s in report.specs if s.state == "failed" and s.kind == "spec"]
    assert report.selected == 5 and len(failed) == 5, report.table()
    assert sum("Granular Checks: Pods" in name for name in failed) == 4, failed
    assert any("Services should serve a basic endpoint" in name for name in failed), failed
    # why, in kubelet's words (the framework dumps the failed specs' events)
    assert report.bug_events > 0, report.table()
