"""flanneld's interface on a fan-enabled model.

On a model with Juju's fan networking, `network-get cni` lists a `fan-*`
bridge among the binding's addresses, possibly first. flannel's vxlan cannot
ride the fan: the charm skips `fan-*` and takes the next interface (else the
default route's), as the old charm did. Before the fix it took the first bind
address: flanneld ran with `-iface=fan-252`, an interface this machine does
not have, and the unit sat in "Waiting for flannel.service to start." with
no pod getting an address.
"""
from __future__ import annotations

import pytest
from functional_kit import deploy_and_wait

pytestmark = pytest.mark.functional

UNIT_FILE = "/lib/systemd/system/flannel.service"


def test_a_fan_bridge_listed_first_is_skipped(open_cluster):
    with open_cluster("fan binding", workers=1) as cluster:
        machine = cluster.machines["m1"]
        cluster.controller.add_bind_address(cluster.machine_ids["m1"], "fan-252",
                                            "252.0.12.1", cidr="252.0.0.0/8", first=True)
        deploy_and_wait(cluster)
        unit_file = machine.read_file(UNIT_FILE).decode()
        assert f" -iface={machine.iface} " in unit_file, unit_file
        assert "fan-252" not in unit_file
        state, message = cluster.workload(cluster.unit_on("m1"))
        assert state == "active", message
        pod = cluster.start_pod("m1")
        assert pod.address, pod
