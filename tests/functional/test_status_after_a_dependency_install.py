"""The unit's status after a refresh that brings new dependencies.

The bootstrap sets `maintenance: Installing the charm's Python dependencies`
while it installs a new wheelhouse (upgrade-charm of a charm whose
dependencies changed). The charm then sets its status only when it differs
from the one it last set, to spare update-status a hook-tool call; before
this test the comparison trusted its own memory in every hook, so the unit
stayed in `maintenance` after the refresh, on a network that was up.
"""
from __future__ import annotations

import shutil

import pytest
from functional_kit import deploy_and_wait

pytestmark = pytest.mark.functional


def test_a_refresh_with_new_dependencies_ends_active_without_update_status(
        open_cluster, built_charm, resource, tmp_path):
    newer = tmp_path / "flannel"
    shutil.copytree(built_charm, newer, symlinks=True)
    # A different wheelhouse (its key covers wheelhouse.txt): the next hook reinstalls.
    with open(newer / "wheelhouse.txt", "a") as f:
        f.write("# a newer build\n")
    with open_cluster("status after a bootstrap", workers=1) as cluster:
        deploy_and_wait(cluster)
        unit = cluster.unit_on("m1")
        state, message = cluster.workload(unit)
        assert state == "active", message
        cluster.upgrade_flannel(resource, charm_dir=newer)   # settles; no update-status
        log = cluster.machines["m1"].read_file(
            "/var/lib/juju/agents/unit-{}/flannel-bootstrap.log".format(unit.replace("/", "-")))
        assert log.decode().count("installing wheelhouse") == 2, "the refresh reinstalled"
        assert cluster.workload(unit) == (state, message)
        assert not cluster.failed_hooks()
