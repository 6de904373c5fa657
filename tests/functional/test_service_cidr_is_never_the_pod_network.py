"""A pod network over the Kubernetes service network is refused on every
node, the workers' included, before any unit writes it.

Only kubernetes-control-plane publishes `service-cidr`, and only to its own
flannel unit (kubernetes-cni's service_cidr(), which the charm never called
before). Before, `juju config flannel cidr=10.152.0.0/16` was written to etcd,
flanneld restarted on every node and each unit said active, with pods
handed addresses that kube-proxy sends to services. The control plane's unit
now records the service-cidr in etcd, so the units beside workers refuse the
same value.
"""
from __future__ import annotations

import pytest
from functional_kit import deploy_and_wait

pytestmark = pytest.mark.functional


def test_a_cidr_over_the_service_cidr_is_blocked_everywhere_and_etcd_keeps_the_network(
        open_cluster):
    with open_cluster("service-cidr", workers=1, control_plane=True) as cluster:
        deploy_and_wait(cluster)
        settled = cluster.network_config()
        pids = {m: cluster.flanneld_pids(m) for m in cluster.machines}
        assert all(pids.values()), pids
        with cluster.timings.phase("juju config flannel cidr=10.152.0.0/16", cluster.say):
            cluster.configure(cidr="10.152.0.0/16")
            messages = cluster.wait_for_flannel(timeout=120, state="blocked")
        assert len(messages) == 2, messages   # the worker's unit and the control plane's
        for unit, message in messages.items():
            assert message == ("Invalid cidr: 10.152.0.0/16 overlaps the Kubernetes service-cidr "
                               "10.152.183.0/24 the control plane publishes; use a range "
                               "outside it"), f"{unit}: {message}"
        assert cluster.network_config() == settled, "etcd's network config changed"
        assert {m: cluster.flanneld_pids(m) for m in cluster.machines} == pids
        with cluster.timings.phase("juju config flannel cidr=10.1.0.0/16", cluster.say):
            cluster.configure(cidr="10.1.0.0/16")
            cluster.wait_for_flannel(timeout=120)
        assert cluster.network_config() == settled
        assert {m: cluster.flanneld_pids(m) for m in cluster.machines} == pids
        pod, error = cluster.try_pod("m1")
        assert pod is not None, error
