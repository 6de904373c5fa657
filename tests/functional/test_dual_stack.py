"""Dual-stack pods, as an operator checks them after `juju config flannel
ipv6-cidr=fd10:1::/56`: each node leases an IPv6 subnet beside its IPv4 one
(the status names both), the principal hears "v4,v6" on the cni relation,
every pod (cnitool's and containerd's) gets an address of each family, and
pods on different machines reach each other by ping and ping6, over vxlan
(flannel.1 and flannel-v6.1) and over host-gw (a route per family to each
other node). The sandbox's machines have IPv6 twins of their addresses
(fdf1:31:254::11 beside 172.31.254.11), as on a dual-stack data-centre
network.

Turning IPv6 off and on is a network change: flanneld leases every node
anew, with no reboot, new pods get the new shape at once, and nothing of
IPv6 (flannel-v6.1, ip6tables chains, the bridge's IPv6 gateway) stays
while it is off. Removing flannel leaves nothing of either family on the
nodes, and adding it back keeps both subnets."""
from __future__ import annotations

import ipaddress
import re
import time

import pytest
from functional_kit import deploy_and_wait, wait_past_restart_grace

from charms.flannel.facts.restarts import GRACE
from sandbox.cluster import CNI_RELATION, IPV6_CIDR
from sandbox.waiting import wait_for

pytestmark = [pytest.mark.functional, pytest.mark.xdist_group("dual_stack")]

MACHINES = ("m1", "m2")
IPV6_AND_ICMPV6_HEADERS = 48
IPV4_AND_ICMP_HEADERS = 28
FLANNELD_LOG = "/var/log/journal/flannel.service.log"   # the sandbox's journal
DUAL = {"ipv6-cidr": IPV6_CIDR}
ACTIVE_DUAL = re.compile(r"Flannel subnet 10\.1\.\d+\.1/24, fd10:1:0:[0-9a-f]+::1/64")
ACTIVE_V4 = re.compile(r"Flannel subnet 10\.1\.\d+\.1/24")


@pytest.fixture(scope="module")
def cluster(open_cluster):
    with open_cluster("dual-stack", workers=2) as opened:
        deploy_and_wait(opened, config=DUAL)
        yield opened


def gateways(cluster, machine: str) -> tuple:
    env = cluster.subnet_env(machine)
    return env.get("FLANNEL_SUBNET"), env.get("FLANNEL_IPV6_SUBNET")


def delete_pods(cluster, pods) -> None:
    """kubectl delete pod: the runtime's CNI DEL, and the sandbox gone."""
    for pod in list(pods):
        pod.delete()
        cluster.pods.remove(pod)


# A lease flanneld missed is mended by the first update-status past
# flanneld's restart grace (steps/supervision.py), and the restarted flanneld
# routes every lease within seconds: waited for with room for a loaded
# machine's slow hooks, and far under the 10-minute back-off that once held
# such a restart back
MENDED_WITHIN = GRACE + 45


def reaches(cluster, pod, peer_address: str, within: float = MENDED_WITHIN) -> None:
    """`pod` pings `peer_address` (on the other machine) within `within`
    seconds, Juju's update-status timer running: once both units are active
    each flanneld still has to hear of the other's new lease from etcd, and
    after IPv6 is turned on or off flanneld can miss it for good
    (facts/host_network.py unrouted_subnets), which update-status mends by
    restarting it. Fails with what the two nodes route and their flanneld's
    log."""
    deadline = time.monotonic() + within
    while not pod.ping(peer_address, count=1):
        cluster.controller.update_status("flannel")
        cluster.settle()
        if time.monotonic() > deadline:
            seen = {m: {"routes": cluster.machines[m].run(["ip", "route"]).stdout,
                        "routes6": cluster.machines[m].run(["ip", "-6", "route"]).stdout,
                        "fdb": cluster.machines[m].run(["bridge", "fdb", "show"]).stdout,
                        "subnet.env": cluster.subnet_env(m),
                        "flanneld": (cluster.machines[m].read_file(FLANNELD_LOG) or b"")
                        .decode(errors="replace")[-20000:]} for m in MACHINES}
            raise AssertionError(f"{pod.name} ({pod.address}, {pod.address6}) on "
                                 f"{pod.machine.name} got no answer from {peer_address} in "
                                 f"{within:.0f}s; leases {cluster.etcd_values()}; {seen}")


def published_cidr(cluster) -> str:
    rid = cluster.controller.relation_id(*CNI_RELATION)
    return cluster.controller.relation_data(rid, cluster.unit_on("m1")).get("cidr", "")


def assert_pods_reach_each_other_in_both_families(cluster) -> dict:
    pods = {m: cluster.start_pod(m) for m in MACHINES}
    for m, pod in pods.items():
        v4, v6 = gateways(cluster, m)
        assert pod.address6 is not None, f"the pod on {m} got no IPv6 address: {pod.result}"
        assert ipaddress.ip_address(pod.address) in ipaddress.ip_interface(v4).network
        assert ipaddress.ip_address(pod.address6) in ipaddress.ip_interface(v6).network
    a, b = pods["m1"], pods["m2"]
    for pod, peer in ((a, b), (b, a)):
        reaches(cluster, pod, peer.address)
        reaches(cluster, pod, peer.address6)
    cluster.say(f"   pods {a.address}/{a.address6} <-> {b.address}/{b.address6}: "
                "ping and ping6 answered")
    return pods


def test_each_node_leases_both_families_and_pods_reach_each_other(cluster):
    messages = cluster.wait_for_flannel()
    for unit, message in messages.items():
        assert ACTIVE_DUAL.fullmatch(message), f"{unit}: {message}"
    assert published_cidr(cluster) == f"10.1.0.0/16,{IPV6_CIDR}"
    config = cluster.network_config()
    assert (config["EnableIPv6"], config["IPv6Network"], config["IPv6SubnetLen"]) == \
        (True, IPV6_CIDR, 64)
    for m in MACHINES:
        links = cluster.vxlan_links(m)
        assert {"flannel.1", "flannel-v6.1"} <= set(links), links
        assert links["flannel-v6.1"]["dev"] == "eth0"
    assert_pods_reach_each_other_in_both_families(cluster)


def test_pods_get_what_flannel_v6_carries_and_full_size_packets_cross(cluster):
    """vxlan over IPv6 costs 20 bytes more than over IPv4: Linux caps
    flannel-v6.1 below flanneld's FLANNEL_MTU, and pods given that MTU sent
    full-size IPv6 packets that crossed only by "packet too big" (and not
    at all where it is filtered). The conflist gives pods what flannel-v6.1
    carries: a full-size don't-fragment ping crosses in each family, and
    one byte more is refused in the pod itself."""
    device = cluster.vxlan_links("m1")["flannel-v6.1"]["mtu"]
    assert device == int(cluster.subnet_env("m1")["FLANNEL_MTU"]) - 20
    a, b = cluster.start_pod("m1"), cluster.start_pod("m2")
    assert a.link_mtu() == b.link_mtu() == device
    for address, headers in ((b.address6, IPV6_AND_ICMPV6_HEADERS),
                             (b.address, IPV4_AND_ICMP_HEADERS)):
        full = device - headers
        assert a.ping_unfragmented(address, full) == "answered", address
        assert a.ping_unfragmented(address, full + 1) == "Message too long", address
    delete_pods(cluster, [a, b])


def test_a_deleted_flannel_v6_device_is_made_again_at_the_next_update_status(cluster):
    """flanneld (v0.28.10) watches flannel.1 alone: with flannel-v6.1
    deleted, IPv6 pod traffic to the other node stopped for good and the
    unit said active. The first update-status past flanneld's grace
    restarts it, which makes the device again."""
    # (on m1: the next test restarts m2's flanneld, and need not wait out a
    # grace this one began)
    a, b = cluster.start_pod("m1"), cluster.start_pod("m2")
    reaches(cluster, a, b.address6)
    cluster.machines["m1"].run(["ip", "link", "del", "flannel-v6.1"])
    assert not a.ping(b.address6, count=2)
    pids = cluster.flanneld_pids("m1")
    wait_past_restart_grace(cluster, "m1")
    cluster.controller.update_status("flannel")
    cluster.settle()
    assert cluster.flanneld_pids("m1") != pids, "update-status did not restart flanneld on m1"
    # (flanneld makes it as it starts, after the hook that started it)
    assert wait_for(lambda: "flannel-v6.1" in cluster.vxlan_links("m1"), 30), \
        "the restarted flanneld made no flannel-v6.1 on m1"
    reaches(cluster, a, b.address6)
    reaches(cluster, b, a.address6)
    delete_pods(cluster, [a, b])


def test_update_status_finds_each_dual_stack_lease_and_restarts_nothing(cluster):
    """update-status looks for the node's lease in etcd under flanneld's key
    for it, both subnets ("10.1.3.0-24&fd10:1:0:3b::-64"): looked for under the
    IPv4 subnet alone, it was "lost" at every update-status, and flanneld
    restarted every five minutes."""
    pids = {m: cluster.flanneld_pids(m) for m in MACHINES}
    cluster.controller.update_status("flannel")
    cluster.settle()
    assert {m: cluster.flanneld_pids(m) for m in MACHINES} == pids
    assert not cluster.failed_hooks()


def test_check_network_probes_both_families_and_names_a_missing_ipv6_route(cluster):
    """check-network on m1 probes m2's lease in each family (the IPv6 one
    through flannel-v6.1, up to that device's MTU); with m1's IPv6 route to
    m2 gone, and IPv4 whole, it names that route."""
    unit = cluster.unit_on("m1")
    run = cluster.run_action(unit, "check-network", timeout=0.5)
    assert run.ok, (run.message, run.results)
    v4, v6 = (str(ipaddress.ip_interface(gw).network) for gw in gateways(cluster, "m2"))
    nodes = {node["subnet"]: node for node in run.results["nodes"].values()}
    assert set(nodes) == {v4, v6}
    assert nodes[v6]["gateway"] == str(ipaddress.ip_network(v6).network_address)
    assert nodes[v6]["largest-packet"] == \
        str(cluster.vxlan_links("m1")["flannel-v6.1"]["mtu"]), nodes[v6]
    m1 = cluster.machines["m1"]
    [route] = m1.ip_json("-6", "route", "show", v6)
    m1.run(["ip", "-6", "route", "del", v6])
    try:
        broken = cluster.run_action(unit, "check-network", timeout=0.5)
    finally:
        m1.run(["ip", "-6", "route", "add", v6, "via", route["gateway"], "dev", route["dev"],
                "onlink"])
    assert broken.status == "failed" and f"this node has no route to {v6}" in broken.message
    assert {node["subnet"]: node["status"] for node in broken.results["nodes"].values()} == \
        {v4: "ok", v6: "broken"}


def test_a_node_without_a_route_to_another_nodes_lease_gets_it_back_at_update_status(
        cluster):
    """What flanneld v0.27.4 leaves when it misses a lease event (seen after
    IPv6 is turned off or on: a handler stuck on a lease of the other IPv6
    shape): no route to that node's subnet, pods cut off from it, status
    active. update-status compares etcd's leases with the node's routes and
    restarts flanneld, which routes every lease it lists. A charm that made
    no such comparison failed this test: the route stayed missing."""
    a, b = cluster.start_pod("m1"), cluster.start_pod("m2")
    m1_subnet = str(ipaddress.ip_interface(gateways(cluster, "m1")[0]).network)
    cluster.machines["m2"].run(["ip", "route", "del", m1_subnet])
    pids = cluster.flanneld_pids("m2")
    wait_past_restart_grace(cluster, "m2")
    cluster.controller.update_status("flannel")
    cluster.settle()
    assert cluster.flanneld_pids("m2") != pids, "update-status did not restart flanneld on m2"
    reaches(cluster, b, a.address)
    reaches(cluster, b, a.address6)
    delete_pods(cluster, [a, b])


def test_a_cri_pod_gets_both_families_and_reaches_the_other_machine(cluster):
    """containerd's pod sandbox, as a kubelet makes it: CRI reports the IPv6
    address as an additional IP, and the busybox inside pings both ways."""
    cri = cluster.start_pod("m1", runtime="cri")
    other = cluster.start_pod("m2")
    assert cri.address6 and ipaddress.ip_address(cri.address6) in \
        ipaddress.ip_network(IPV6_CIDR), cri.inspect()["status"]["network"]
    assert cri.ping(other.address6), f"busybox ping {other.address6} from {cri.address6}"
    assert other.ping(cri.address6)
    delete_pods(cluster, [cri, other])


def test_an_ipv6_cidr_the_machines_are_on_is_refused_and_nothing_moves(cluster):
    settled = cluster.network_config()
    pids = {m: cluster.flanneld_pids(m) for m in MACHINES}
    try:
        cluster.configure(**{"ipv6-cidr": "fdf1:31::/32"})
        messages = cluster.wait_for_flannel(timeout=120, state="blocked")
        for unit, message in messages.items():
            assert message.startswith("Invalid ipv6-cidr: fdf1:31::/32 overlaps "
                                      "fdf1:31:254::/64, the network of eth0"), message
        assert cluster.network_config() == settled
        assert {m: cluster.flanneld_pids(m) for m in MACHINES} == pids
    finally:
        cluster.configure(**DUAL)
    cluster.wait_for_flannel(timeout=120)


def test_turning_ipv6_off_and_on_is_a_network_change_without_a_reboot(cluster):
    old = {m: cluster.start_pod(m) for m in MACHINES}
    cluster.configure(**{"ipv6-cidr": ""})
    messages = cluster.wait_for_flannel(timeout=180)
    for unit, message in messages.items():
        assert ACTIVE_V4.fullmatch(message), f"{unit}: {message}"
    assert published_cidr(cluster) == "10.1.0.0/16"
    assert "EnableIPv6" not in cluster.network_config()
    for m in MACHINES:
        assert gateways(cluster, m)[1] is None, cluster.subnet_env(m)
        assert "flannel-v6.1" not in cluster.vxlan_links(m)
        ip6 = cluster.machines[m].run(["ip6tables-save"]).stdout
        assert "FLANNEL" not in ip6, f"{m} keeps flanneld's ip6tables rules:\n{ip6}"
        assert not [r for r in cluster.machines[m].ip_json("-6", "addr", "show", "dev", "cni0")
                    [0].get("addr_info", []) if r.get("scope") == "global"], \
            f"{m}: cni0 keeps an IPv6 gateway"
    delete_pods(cluster, old.values())   # of the old leases: recreated, as pods are
    pods = {m: cluster.start_pod(m) for m in MACHINES}
    assert all(pod.address6 is None for pod in pods.values()), pods
    reaches(cluster, pods["m1"], pods["m2"].address)
    reaches(cluster, pods["m2"], pods["m1"].address)

    cluster.configure(**DUAL)
    messages = cluster.wait_for_flannel(timeout=180)
    for unit, message in messages.items():
        assert ACTIVE_DUAL.fullmatch(message), f"{unit}: {message}"
    assert published_cidr(cluster) == f"10.1.0.0/16,{IPV6_CIDR}"
    delete_pods(cluster, pods.values())
    assert_pods_reach_each_other_in_both_families(cluster)


def test_remove_add_keeps_both_subnets_and_leaves_nothing_of_either_family(cluster):
    before = {m: gateways(cluster, m) for m in MACHINES}
    delete_pods(cluster, cluster.pods)
    cluster.remove_cni_relation()
    assert cluster.flannel_units() == []
    for m in MACHINES:
        left = cluster.flannel_leftovers(m, pods_stay=False)
        assert left == [], f"{m} keeps what flannel made: {left}"
    cluster.add_cni_relation()
    cluster.wait_for_flannel(timeout=180)
    assert {m: gateways(cluster, m) for m in MACHINES} == before
    assert_pods_reach_each_other_in_both_families(cluster)


def test_host_gw_routes_each_family_to_the_other_node(open_cluster):
    with open_cluster("dual-stack-host-gw", workers=2) as cluster:
        deploy_and_wait(cluster, config={**DUAL, "backend": "host-gw"})
        for m, other in (("m1", "m2"), ("m2", "m1")):
            v6 = str(ipaddress.ip_interface(gateways(cluster, other)[1]).network)
            routes = {(r.get("dst"), r.get("gateway"), r.get("dev"))
                      for r in cluster.machines[m].ip_json("-6", "route", "show")}
            assert (v6, cluster.machines[other].address6, "eth0") in routes, routes
            assert not cluster.vxlan_links(m)
        assert_pods_reach_each_other_in_both_families(cluster)
        # check-network over host-gw: the other node probed at its own address
        # in each family
        run = cluster.run_action(cluster.unit_on("m1"), "check-network", timeout=0.5)
        assert run.ok, (run.message, run.results)
        assert sorted(node["gateway"] for node in run.results["nodes"].values()) == \
            sorted((cluster.machines["m2"].address, cluster.machines["m2"].address6))
        # a network that drops what is not a machine's own address (anti-spoofing,
        # a cloud's source/destination check): the nodes answer, pods do not
        m2, v4 = cluster.machines["m2"], str(ipaddress.ip_interface(gateways(cluster, "m2")[0])
                                             .network)
        spoofing = ["PREROUTING", "-s", "10.1.0.0/16", "-j", "DROP"]
        m2.run(["iptables", "-t", "raw", "-I", *spoofing])
        try:
            broken = cluster.run_action(cluster.unit_on("m1"), "check-network", timeout=0.5)
        finally:
            m2.run(["iptables", "-t", "raw", "-D", *spoofing])
        assert broken.status == "failed", broken.results
        nodes = {node["subnet"]: node for node in broken.results["nodes"].values()}
        assert nodes[v4]["status"] == "broken", nodes
        assert nodes[v4]["cause"].startswith("packets between pod addresses"), nodes[v4]
        assert "set backend=vxlan" in nodes[v4]["cause"]
        assert [n["status"] for s, n in nodes.items() if s != v4] == ["ok"]
        delete_pods(cluster, cluster.pods)
        cluster.remove_cni_relation()
        for m in MACHINES:
            left = cluster.flannel_leftovers(m, pods_stay=False)
            assert left == [], f"{m} keeps what flannel made: {left}"
