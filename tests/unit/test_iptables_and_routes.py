"""What flanneld leaves after it stops, and taking it away: its iptables
rules (adapters/iptables.py), host-gw's routes (adapters/links.py) and an
idle cni0 (adapters/pod_bridge.py remove_idle), against a real kernel and
the node's real iptables in a network namespace of the test's own.

flanneld >= 0.18 cleans its iptables rules when it starts, not when it
exits: without the charm, a removed flannel leaves FLANNEL-POSTRTG
(MASQUERADE for the pod network), FLANNEL-FWD and their jumps on every
node, and host-gw's routes to the other nodes' subnets.
"""
from __future__ import annotations

import ipaddress
import json
import shutil

import pytest
import stepkit

from charms.flannel.adapters import iptables, links, pod_bridge
from charms.flannel.facts.netconfig import NetworkConfig
from charms.flannel.facts.subnet_env import parse_subnet_env
from charms.flannel.steps.flanneld import forget_old_rules

pytestmark = pytest.mark.skipif(not shutil.which("iptables-save"),
                                reason="needs iptables (and root, for a network namespace)")

# flanneld v0.27's rules for pod network 10.1.0.0/16, node subnet 10.1.52.0/24
# (pkg/trafficmngr/iptables: MasqRules, ForwardRules), and one of someone else's
MASQ, FWD = '-m comment --comment "flanneld masq"', '-m comment --comment "flanneld forward"'
FLANNELD_RULES = f"""
iptables -t nat -N FLANNEL-POSTRTG
iptables -t nat -I POSTROUTING 1 {MASQ} -j FLANNEL-POSTRTG
iptables -t nat -A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 {MASQ} -j RETURN
iptables -t nat -A FLANNEL-POSTRTG -s 10.1.52.0/24 -d 10.1.0.0/16 {MASQ} -j RETURN
iptables -t nat -A FLANNEL-POSTRTG -s 10.1.0.0/16 ! -d 224.0.0.0/4 {MASQ} -j MASQUERADE
iptables -t filter -N FLANNEL-FWD
iptables -t filter -A FORWARD {FWD} -j FLANNEL-FWD
iptables -t filter -A FLANNEL-FWD -s 10.1.0.0/16 {FWD} -j ACCEPT
iptables -t filter -A FLANNEL-FWD -d 10.1.0.0/16 {FWD} -j ACCEPT
iptables -t nat -N CNI-HOSTPORT-DNAT
iptables -t nat -A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
iptables -t filter -A FORWARD -s 192.168.9.0/24 -j ACCEPT
"""

NETWORK = ipaddress.ip_network("10.1.0.0/16")


@pytest.fixture
def node(netns_machine):
    """The namespace as a node's flanneld (host-gw) and bridge plugin left
    it: a Machine whose commands run there; node.netns(argv) for the test's
    own commands."""
    netns_machine.netns([
        "sh", "-ec",
        "ip link add eth0 type veth peer name eth0p\n"
        "ip link set eth0p up && ip link set eth0 up && ip addr add 172.31.254.11/24 dev eth0\n"
        "ip link add cni0 type bridge && ip addr add 10.1.52.1/24 dev cni0\n"
        "ip link set cni0 up\n"
        "ip route add 10.1.7.0/24 via 172.31.254.12 dev eth0\n"     # host-gw's
        "ip route add 10.9.0.0/16 via 172.31.254.1 dev eth0\n"      # someone else's
        + FLANNELD_RULES])
    return netns_machine


def test_flanneld_rules_are_found_per_table(node):
    found = iptables.flannel_rules(node.netns(["iptables-save"]))
    assert sorted(found) == ["filter", "nat"]
    assert found["nat"]["chains"] == ["FLANNEL-POSTRTG"]
    assert found["filter"]["chains"] == ["FLANNEL-FWD"]
    assert [rule[1] for rule in found["nat"]["jumps"]] == ["POSTROUTING"]
    assert [rule[1] for rule in found["filter"]["jumps"]] == ["FORWARD"]


def test_removal_takes_every_flannel_rule_and_leaves_everyone_elses(node):
    before = node.netns(["iptables-save"])
    removed = iptables.remove_iptables_rules(node, commands=["iptables"])
    after = node.netns(["iptables-save"])
    assert "FLANNEL" not in after, after
    assert len(removed) == 4, removed   # two jumps, two chains
    # the portmap chain and the operator's FORWARD rule stay, untouched
    for kept in ("-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
                 "-A FORWARD -s 192.168.9.0/24 -j ACCEPT"):
        assert kept in before and kept in after
    assert iptables.remove_iptables_rules(node, commands=["iptables"]) == []  # idempotent


def test_removal_uses_every_iptables_front_end_the_node_has(node):
    """Without commands named: iptables and ip6tables, as the node has them."""
    if not shutil.which("ip6tables-save"):
        pytest.skip("needs ip6tables")
    assert iptables.iptables_commands(node) == ["iptables", "ip6tables"]
    node.netns(["sh", "-ec", f"ip6tables -t nat -N FLANNEL-POSTRTG\n"
                             f"ip6tables -t nat -A POSTROUTING {MASQ} -j FLANNEL-POSTRTG"])
    removed = iptables.remove_iptables_rules(node)
    assert "ip6tables -t nat chain FLANNEL-POSTRTG" in removed
    assert "iptables -t filter chain FLANNEL-FWD" in removed
    assert "FLANNEL" not in node.netns(["iptables-save"]) + node.netns(["ip6tables-save"])


# flannel v0.11's (charm-flannel f79f180, --ip-masq), as it wrote them on a
# node of subnet 10.1.88.0/24: straight into the built-in chains
V011_RULES = """
iptables -t nat -A POSTROUTING -s 10.1.0.0/16 -d 10.1.0.0/16 -j RETURN
iptables -t nat -A POSTROUTING -s 10.1.0.0/16 ! -d 224.0.0.0/4 -j MASQUERADE --random-fully
iptables -t nat -A POSTROUTING ! -s 10.1.0.0/16 -d 10.1.88.0/24 -j RETURN
iptables -t nat -A POSTROUTING ! -s 10.1.0.0/16 -d 10.1.0.0/16 -j MASQUERADE --random-fully
iptables -t filter -A FORWARD -s 10.1.0.0/16 -j ACCEPT
iptables -t filter -A FORWARD -d 10.1.0.0/16 -j ACCEPT
iptables -t nat -A POSTROUTING -s 10.2.0.0/16 -d 10.2.0.0/16 -j RETURN
iptables -t nat -A POSTROUTING -s 10.1.0.0/16 -d 10.1.0.0/16 -p tcp -j RETURN
"""


def test_flannel_v011s_rules_go_for_the_pod_network_and_no_other(node):
    """flannel v0.11 left its --ip-masq and forward rules in POSTROUTING and
    FORWARD, and flanneld v0.27 never touches them: a node refreshed from
    charm-flannel f79f180 kept them for good (and its removal did too)."""
    node.netns(["sh", "-ec", V011_RULES])
    found = iptables.flannel_rules(node.netns(["iptables-save"]), [NETWORK])
    assert len(found["nat"]["v011"]) == 4 and len(found["filter"]["v011"]) == 2
    removed = iptables.remove_v011_rules(node, [NETWORK])
    assert len(removed) == 6, removed
    after = node.netns(["iptables-save"])
    assert "FLANNEL-POSTRTG" in after and "FLANNEL-FWD" in after, "flanneld >= 0.18's stay"
    assert "-A FORWARD -s 10.1.0.0/16 -j ACCEPT" not in after
    # another network's, a rule of another shape, the operator's: theirs
    for kept in ("-A POSTROUTING -s 10.2.0.0/16 -d 10.2.0.0/16 -j RETURN",
                 "-A POSTROUTING -s 10.1.0.0/16 -d 10.1.0.0/16 -p tcp -j RETURN",
                 "-A FORWARD -s 192.168.9.0/24 -j ACCEPT"):
        assert kept in after, kept
    assert iptables.remove_v011_rules(node, [NETWORK]) == []


def test_removal_takes_flannel_v011s_rules_with_flanneld_s(node):
    node.netns(["sh", "-ec", V011_RULES])
    iptables.remove_iptables_rules(node, commands=["iptables"], networks=[NETWORK])
    after = node.netns(["iptables-save"]).splitlines()
    assert not [line for line in after if "FLANNEL" in line], after
    for rule in V011_RULES.strip().splitlines()[:6]:
        assert "-A " + rule.split(" -A ", 1)[1] not in after, rule


def test_routes_into_the_pod_network_go_and_the_bridges_and_others_stay(node):
    node.netns(["ip", "route", "add", "10.1.200.0/22", "via", "172.31.254.1"])  # no node's
    removed = links.remove_pod_network_routes(node, [(NETWORK, 24)])
    assert removed == ["10.1.7.0/24 via 172.31.254.12 dev eth0"]
    routes = {r["dst"]: r.get("dev")
              for r in json.loads(node.netns(["ip", "-j", "route", "show"]))}
    assert routes.get("10.1.52.0/24") == "cni0"        # the running pods' own
    assert routes.get("10.9.0.0/16") == "eth0"         # not the pod network
    assert "10.1.7.0/24" not in routes
    assert routes.get("10.1.200.0/22") == "eth0"      # another shape: someone else's


def test_an_idle_bridge_of_flannels_network_goes_with_its_empty_table(node, tmp_path):
    table = tmp_path / "CDK-flannel-network"
    table.mkdir()
    (table / "last_reserved_ip.0").write_text("10.1.52.7")
    (table / "lock").write_text("")
    removed = pod_bridge.remove_idle(node, [NETWORK], "CDK-flannel-network", tmp_path)
    assert removed == ["bridge cni0", f"host-local table {table}"]
    assert pod_bridge.ports(node) is None and not table.exists()


def test_an_idle_bridge_of_an_old_cidr_is_flannels_by_host_local_s_table(node, tmp_path):
    """A cidr changed since the bridge got its address: host-local's table
    of flannel's network still names an address in the bridge's subnet."""
    table = tmp_path / "CDK-flannel-network"
    table.mkdir()
    (table / "last_reserved_ip.0").write_text("10.1.52.7")
    removed = pod_bridge.remove_idle(node, [ipaddress.ip_network("10.7.0.0/16")],
                                     "CDK-flannel-network", tmp_path)
    assert removed[0] == "bridge cni0" and pod_bridge.ports(node) is None


def test_a_bridge_with_a_pod_on_it_stays_and_so_does_its_table(node, tmp_path):
    node.netns(["sh", "-ec", "ip link add vethpod type veth peer name vethpodp\n"
                             "ip link set vethpod master cni0"])
    table = tmp_path / "CDK-flannel-network"
    table.mkdir()
    (table / "10.1.52.7").write_text("pod")
    assert pod_bridge.remove_idle(node, [NETWORK], "CDK-flannel-network", tmp_path) == []
    assert pod_bridge.ports(node) == ["vethpod"] and table.exists()


def test_another_networks_idle_cni0_is_not_flannels(node, tmp_path):
    assert pod_bridge.remove_idle(node, [ipaddress.ip_network("10.7.0.0/16")], "../../etc",
                                  tmp_path / "t") == []
    assert pod_bridge.ports(node) == []


def test_after_ipv6_is_turned_off_its_rules_and_host_gw_routes_go(node, tmp_path):
    """forget_old_rules, as restart_if_changed calls it while flanneld is
    stopped after IPv6 went off: flanneld never touches ip6tables again, nor
    routes into a pod network it does not serve; the IPv4 routes it serves
    stay, and its IPv4 rules go too (it writes them afresh as it starts)."""
    node.netns(["sh", "-ec",
                "ip -6 addr add fdf1:31:254::11/64 dev eth0 nodad\n"
                "ip -6 route add fd10:1:0:9::/64 via fdf1:31:254::12 dev eth0\n"   # host-gw's
                "ip6tables -t nat -N FLANNEL-POSTRTG\n"
                f"ip6tables -t nat -A POSTROUTING {MASQ} -j FLANNEL-POSTRTG\n"
                f"ip6tables -t nat -A FLANNEL-POSTRTG -s fd10:1::/56 {MASQ} -j MASQUERADE\n"])
    old = parse_subnet_env("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.52.1/24\n"
                           "FLANNEL_MTU=1500\nFLANNEL_IPMASQ=true\n"
                           "FLANNEL_IPV6_NETWORK=fd10:1::/56\n"
                           "FLANNEL_IPV6_SUBNET=fd10:1:0:5::1/64\n")
    ipv4_only = NetworkConfig.from_json({"Network": "10.1.0.0/16", "SubnetLen": 24,
                                         "Backend": {"Type": "host-gw"}})
    gone = forget_old_rules(stepkit.context(tmp_path, machine=node), old, ipv4_only)
    assert "ip6tables -t nat chain FLANNEL-POSTRTG" in gone
    assert "FLANNEL" not in node.netns(["ip6tables-save"])
    assert "FLANNEL" not in node.netns(["iptables-save"])
    assert "fd10:1:0:9::/64" not in node.netns(["ip", "-6", "route", "show"])
    assert "10.1.7.0/24" in node.netns(["ip", "-4", "route", "show"])   # IPv4 is still served
