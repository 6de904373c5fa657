"""The CNI network name: CDK-flannel-network on a fresh
deploy, as the old charm named it, so every cluster has one host-local
allocation table whatever its history; a unit whose conflist already uses
another name keeps it across a refresh."""
from __future__ import annotations

import json
import shutil

import pytest
from functional_kit import allocation_tables, deploy_and_wait

pytestmark = pytest.mark.functional

CONFLIST = "/etc/cni/net.d/10-flannel.conflist"


def conflist_name(cluster, machine="m1"):
    return json.loads(cluster.machines[machine].read_file(CONFLIST))["name"]


def test_a_name_in_use_survives_a_refresh_and_fresh_units_use_the_old_charms(
        open_cluster, built_charm, resource, tmp_path):
    """A refresh keeps the network name "my-pods" a unit's conflist uses,
    and so does a fresh unit while pods use its table; with none left, a
    fresh unit names the network CDK-flannel-network. A charm whose refresh
    renamed "my-pods" to "cbr0" (the next pod was allocated from a second,
    empty table), and whose fresh unit's conflist said "cbr0" where
    CDK-flannel-network was expected, failed this test."""
    earlier = tmp_path / "flannel"   # an earlier build that named its network my-pods
    shutil.copytree(built_charm, earlier, symlinks=True)
    template = earlier / "templates" / "10-flannel.conflist"
    text = template.read_text()
    start = text.index('"name":')
    end = text.index(",", start)
    template.write_text(text[:start] + '"name": "my-pods"' + text[end:])
    with open_cluster("network name", workers=1) as cluster:
        deploy_and_wait(cluster, earlier)
        assert conflist_name(cluster) == "my-pods"
        first = cluster.start_pod("m1")
        cluster.upgrade_flannel(resource, charm_dir=built_charm)
        cluster.wait_for_flannel(timeout=240)
        assert conflist_name(cluster) == "my-pods", "the refresh renamed the network"
        second = cluster.start_pod("m1")
        assert second.address != first.address
        assert set(allocation_tables(cluster, "m1")) == {"my-pods"}
        assert {first.address, second.address} <= allocation_tables(cluster, "m1")["my-pods"]
        # Remove and re-add while the pods run: the fresh unit finds their
        # table in use and keeps its name; new pods get free addresses.
        cluster.remove_cni_relation()
        cluster.add_cni_relation()
        cluster.wait_for_flannel(timeout=240)
        assert conflist_name(cluster) == "my-pods"
        third = cluster.start_pod("m1")
        assert third.address not in (first.address, second.address)
        # With no pod left on the machine, a fresh unit names the network
        # as the old charm did.
        for pod in (first, second, third):
            pod.delete()
        cluster.remove_cni_relation()
        cluster.add_cni_relation()
        cluster.wait_for_flannel(timeout=240)
        assert conflist_name(cluster) == "CDK-flannel-network"
