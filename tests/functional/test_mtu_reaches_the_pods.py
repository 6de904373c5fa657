"""The MTU pods get, on an underlay of 1400 and of 9000 bytes, with flanneld's
own choice (`mtu` 0) and with the option set, as an operator checks it: the
FLANNEL_MTU flanneld writes, flannel.1's MTU, the pod's eth0, and pings with
DF set from a pod on m1 to one on m2 over vxlan: the largest echo the pod's
MTU allows is answered, one byte more is refused by the pod's own kernel
("Message too long"), never lost in silence on the way.

An `mtu` change restarts flanneld with its vxlan device made anew (flanneld
keeps a device it finds, MTU and all) and cni0 set to the new MTU (the bridge
plugin sets it only when it makes the bridge: left at 1250, it turned 8950-byte
packets from the other node away with "fragmentation needed"); a value the
interface cannot carry is refused and the running network is left as it was."""
from __future__ import annotations

import pytest
from functional_kit import deploy_and_wait

pytestmark = [pytest.mark.functional, pytest.mark.xdist_group("mtu_reaches_the_pods")]

MACHINES = ("m1", "m2")
IP_AND_ICMP_HEADERS = 28


@pytest.fixture(scope="module")
def cluster(open_cluster):
    with open_cluster("mtu", workers=2) as opened:
        opened.set_underlay_mtu(1400)
        deploy_and_wait(opened)
        yield opened


def assert_pods_get(cluster, pod_mtu: int) -> None:
    for m in MACHINES:
        assert cluster.subnet_env(m)["FLANNEL_MTU"] == str(pod_mtu), cluster.subnet_env(m)
        assert cluster.vxlan_links(m)["flannel.1"]["mtu"] == pod_mtu, cluster.vxlan_links(m)
    pods = {m: cluster.start_pod(m) for m in MACHINES}
    for pod in pods.values():
        assert pod.link_mtu() == pod_mtu, f"{pod.name} on {pod.machine.name}"
    for m in MACHINES:   # the bridge the pods hang on (made with the first pods)
        [bridge] = cluster.machines[m].ip_json("link", "show", "dev", "cni0")
        assert bridge["mtu"] == pod_mtu, f"{m}: cni0 has MTU {bridge['mtu']}"
    full = pod_mtu - IP_AND_ICMP_HEADERS
    a, b = pods["m1"], pods["m2"]
    assert a.ping_unfragmented(b.address, full) == "answered", \
        f"a {pod_mtu}-byte packet did not cross vxlan unfragmented"
    assert b.ping_unfragmented(a.address, full) == "answered"
    assert a.ping_unfragmented(b.address, full + 1) == "Message too long"
    cluster.say(f"   pods: eth0 mtu {pod_mtu}; ping -M do -s {full} answered, "
                f"-s {full + 1}: Message too long")


def test_flanneld_gives_pods_the_underlay_mtu_less_vxlan_overhead(cluster):
    assert_pods_get(cluster, 1400 - 50)


def test_an_mtu_change_remakes_the_vxlan_device_and_new_pods_get_it(cluster):
    before = {m: cluster.flanneld_pids(m) for m in MACHINES}
    cluster.configure(mtu=1300)
    cluster.wait_for_flannel(timeout=120)
    assert cluster.network_config()["Backend"] == {"Type": "vxlan", "VNI": 1, "MTU": 1300}
    for m in MACHINES:
        assert cluster.flanneld_pids(m) != before[m], f"flanneld on {m} was not restarted"
    assert_pods_get(cluster, 1300 - 50)


def test_jumbo_frames_give_pods_jumbo_mtu(cluster):
    cluster.set_underlay_mtu(9000)
    cluster.configure(mtu=9000)
    cluster.wait_for_flannel(timeout=120)
    assert_pods_get(cluster, 9000 - 50)


def test_an_mtu_the_interface_cannot_carry_is_refused_and_nothing_moves(cluster):
    settled = cluster.network_config()
    pids = {m: cluster.flanneld_pids(m) for m in MACHINES}
    try:
        cluster.configure(mtu=9001)
        messages = cluster.wait_for_flannel(timeout=120, state="blocked")
        for unit, message in messages.items():
            assert message == ("Invalid mtu: 9001 is more than the MTU of eth0 (9000), which "
                               "flanneld sends vxlan packets on; use at most 9000, or 0 for "
                               "the interface's"), f"{unit}: {message}"
        assert cluster.network_config() == settled, "etcd's network config changed"
        assert {m: cluster.flanneld_pids(m) for m in MACHINES} == pids, "flanneld restarted"
    finally:
        cluster.configure(mtu=9000)
        cluster.wait_for_flannel(timeout=120)
    assert {m: cluster.flanneld_pids(m) for m in MACHINES} == pids


def test_moving_flanneld_to_a_smaller_interface_is_refused_with_the_mtu(cluster):
    """An iface change is checked against the mtu too: flanneld moved to a
    1500-byte eth1 with mtu 9000 would send vxlan packets eth1 cannot carry
    (the mtu was once checked only when the network config changed)."""
    for m in MACHINES:
        cluster.network.add_interface(m, "eth1")
    pids = {m: cluster.flanneld_pids(m) for m in MACHINES}
    try:
        cluster.configure(iface="eth1")
        messages = cluster.wait_for_flannel(timeout=120, state="blocked")
        for unit, message in messages.items():
            assert message == ("Invalid mtu: 9000 is more than the MTU of eth1 (1500), which "
                               "flanneld sends vxlan packets on; use at most 1500, or 0 for "
                               "the interface's"), f"{unit}: {message}"
        assert {m: cluster.flanneld_pids(m) for m in MACHINES} == pids, "flanneld restarted"
    finally:
        cluster.configure(iface="")
        cluster.wait_for_flannel(timeout=120)
    assert {m: cluster.flanneld_pids(m) for m in MACHINES} == pids
