"""A series upgrade pauses flannel and resumes it, and a removal midway
leaves no mask behind. (The Nagios check over nrpe-external-master is in
test_the_charm_against_its_peers.)"""
import pytest

from functional_kit import deploy_and_wait

pytestmark = pytest.mark.functional


def test_series_upgrade_pauses_flannel_and_resumes_it(open_cluster):
    with open_cluster("series", workers=1) as cluster:
        deploy_and_wait(cluster)
        machine = cluster.machines["m1"]
        unit = cluster.unit_on("m1")

        cluster.controller.fire(unit, "pre-series-upgrade")
        cluster.settle()
        assert cluster.workload(unit) == ("blocked", "Series upgrade in progress")
        assert not machine.pids_of("flanneld")
        # Nothing restarts it behind the operator's back meanwhile.
        cluster.controller.update_status("flannel")
        cluster.settle()
        assert not machine.pids_of("flanneld")
        assert cluster.workload(unit)[1] == "Series upgrade in progress"

        cluster.controller.fire(unit, "post-series-upgrade")
        cluster.settle()
        assert machine.pids_of("flanneld")
        cluster.wait_for_flannel(timeout=60)
        assert cluster.start_pod("m1").address


def test_flannel_removed_during_a_series_upgrade_leaves_no_mask_behind(open_cluster):
    """pre-series-upgrade masks flannel.service (a link to /dev/null in
    /etc/systemd/system); removing flannel before post-series-upgrade must
    take that link away too, or a later flannel could never start there."""
    mask = "/etc/systemd/system/flannel.service"
    with open_cluster("series, removed midway", workers=1) as cluster:
        deploy_and_wait(cluster)
        machine = cluster.machines["m1"]
        cluster.controller.fire(cluster.unit_on("m1"), "pre-series-upgrade")
        cluster.settle()
        assert machine.exists(mask), "the control: the pause masks the unit"
        cluster.remove_cni_relation()
        cluster.settle()
        assert not machine.exists(mask)
        assert not machine.exists("/lib/systemd/system/flannel.service")
        assert not machine.pids_of("flanneld")
