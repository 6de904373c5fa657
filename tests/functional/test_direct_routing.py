"""vxlan with direct routing, on a cluster across a router: m1 and m2 share a
subnet, m3 sits on another one behind a router (sandbox.network's routed
segment), as nodes in another rack or zone do.

With `direct-routing` on, what an operator checks with `ip route` and the
vxlan device's counters: m1 reaches m2's pod subnet through m2's own address
on eth0, unencapsulated (flannel.1 sends nothing for it), and m3's through
flannel.1; pods on all three reach each other. Turned off on the running
cluster, every node is reached through flannel.1 again and pods still talk."""
from __future__ import annotations

import ipaddress

import pytest
from functional_kit import deploy_and_wait

pytestmark = [pytest.mark.functional, pytest.mark.xdist_group("direct_routing")]

MACHINES = ("m1", "m2", "m3")


@pytest.fixture(scope="module")
def cluster(open_cluster):
    with open_cluster("direct routing", workers=3, routed_workers=1) as opened:
        deploy_and_wait(opened, config={"direct-routing": True})
        yield opened


def pod_subnet(cluster, machine: str) -> str:
    return str(ipaddress.ip_interface(cluster.subnet_env(machine)["FLANNEL_SUBNET"]).network)


def route_to(cluster, machine: str, subnet: str) -> dict:
    [route] = cluster.machines[machine].ip_json("route", "show", subnet)
    return route


def vxlan_sent(cluster, machine: str) -> int:
    [link] = cluster.machines[machine].ip_json("-s", "link", "show", "dev", "flannel.1")
    return int(link["stats64"]["tx"]["packets"])


def pings(pod, other, count: int = 5) -> bool:
    return pod.ping(other.address, count=count)


def test_the_routed_node_is_on_another_subnet(cluster):
    m1, m3 = cluster.machines["m1"], cluster.machines["m3"]
    assert m1.subnet != m3.subnet and ipaddress.ip_address(m3.address) in m3.subnet
    assert route_to(cluster, "m1", str(m3.subnet)).get("gateway"), "m3 is not behind a router"


def test_same_subnet_is_routed_directly_and_the_routed_node_through_vxlan(cluster):
    assert cluster.network_config()["Backend"] == {"Type": "vxlan", "VNI": 1,
                                                   "DirectRouting": True}
    m2 = cluster.machines["m2"]
    direct = route_to(cluster, "m1", pod_subnet(cluster, "m2"))
    assert (direct.get("gateway"), direct.get("dev")) == (m2.address, "eth0"), direct
    across = route_to(cluster, "m1", pod_subnet(cluster, "m3"))
    assert across.get("dev") == "flannel.1", across
    back = route_to(cluster, "m3", pod_subnet(cluster, "m1"))
    assert back.get("dev") == "flannel.1", back

    pods = {m: cluster.start_pod(m) for m in MACHINES}
    before = vxlan_sent(cluster, "m1")
    assert pings(pods["m1"], pods["m2"]) and pings(pods["m2"], pods["m1"])
    direct_sent = vxlan_sent(cluster, "m1") - before
    before = vxlan_sent(cluster, "m1")
    assert pings(pods["m1"], pods["m3"]) and pings(pods["m3"], pods["m2"])
    vxlan_sent_to_m3 = vxlan_sent(cluster, "m1") - before
    cluster.say(f"   flannel.1 on m1 sent {direct_sent} packets for 5 pings to m2's pod, "
                f"{vxlan_sent_to_m3} for 5 to m3's")
    assert direct_sent == 0, "m1 encapsulated traffic for a node on its own subnet"
    assert vxlan_sent_to_m3 >= 5, "m1 did not send m3's traffic through vxlan"


def test_check_network_probes_the_direct_node_itself_and_the_routed_one_over_vxlan(cluster):
    """`juju run flannel/0 check-network` on m1: ok for both; m2 probed at its
    own address through eth0 (where a packet over the pods' MTU is no
    fault), m3 at its flannel.1 through vxlan."""
    run = cluster.run_action(cluster.unit_on("m1"), "check-network", timeout=0.5)
    assert run.ok, (run.message, run.results)
    nodes = {node["subnet"]: node for node in run.results["nodes"].values()}
    assert nodes[pod_subnet(cluster, "m2")]["gateway"] == cluster.machines["m2"].address
    assert nodes[pod_subnet(cluster, "m3")]["gateway"] == pod_subnet(cluster, "m3").split("/")[0]


def test_turning_it_off_routes_every_node_through_vxlan(cluster):
    cluster.configure(direct_routing=False)
    cluster.wait_for_flannel(timeout=120)
    assert "DirectRouting" not in cluster.network_config()["Backend"]
    assert route_to(cluster, "m1", pod_subnet(cluster, "m2")).get("dev") == "flannel.1"
    pods = {m: cluster.start_pod(m) for m in MACHINES}
    before = vxlan_sent(cluster, "m1")
    assert pings(pods["m1"], pods["m2"]) and pings(pods["m1"], pods["m3"])
    assert vxlan_sent(cluster, "m1") - before >= 10
