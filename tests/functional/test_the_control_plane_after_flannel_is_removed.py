"""The control plane's 01-default.conflist once flannel is removed from it.

The ops kubernetes-control-plane links /etc/cni/net.d/01-default.conflist to
the CNI's conflist, and when the CNI goes its reconcile stops at "Missing CNI
relation or config" before it touches the link (2d58730): the link stays,
dangling, since flannel's stop removes 10-flannel.conflist (its own file) and
never the principal's link. What containerd then does with new pods, and what
brings them back, is what an operator meets: docs/how-to/remove.md says it."""
from __future__ import annotations

import pytest
from functional_kit import deploy_and_wait, wait_cri_loaded

from sandbox.cluster import CONTROL_PLANE_CNI_RELATION, CONTROL_PLANE_MACHINE

pytestmark = [pytest.mark.functional,
              pytest.mark.xdist_group("the_control_plane_after_flannel_is_removed")]

CP = CONTROL_PLANE_MACHINE


def test_a_dangling_default_link_fails_new_pods_until_flannel_is_back(open_cluster):
    from sandbox.resource import crictl_path
    crictl_path()
    with open_cluster("control plane without flannel", workers=1,
                      control_plane=True) as cluster:
        deploy_and_wait(cluster)
        machine = cluster.machines[CP]
        before = cluster.start_pod(CP, runtime="cri")
        cluster.controller.remove_relation(*CONTROL_PLANE_CNI_RELATION)
        cluster.settle()
        unit = f"{cluster.control_plane_app.name}/0"
        cp_status = cluster.workload(unit)
        link = cluster.default_conflist_link(CP)
        target_left = machine.exists("/etc/cni/net.d/10-flannel.conflist")
        wait_cri_loaded(cluster, None, machine=CP)
        pod, error = cluster.try_pod(CP, runtime="cri")
        cluster.say(f"   {CP}: a new pod without flannel: {error}")
        state = before.inspect()["status"]["state"]

        cluster.controller.add_relation(*CONTROL_PLANE_CNI_RELATION)
        cluster.settle()
        cluster.wait_for_flannel(timeout=180)
        wait_cri_loaded(cluster, "CDK-flannel-network", machine=CP)
        after = cluster.start_pod(CP, runtime="cri")

    assert cp_status == ("blocked", "Missing CNI relation or config")
    assert link == "10-flannel.conflist" and not target_left, (link, target_left)
    assert pod is None, f"a pod got {pod.address} with no CNI at all"
    assert "cni plugin not initialized" in error, error
    assert state == "SANDBOX_READY", "the running pod was touched"
    assert after.address, "no address once flannel is back"
