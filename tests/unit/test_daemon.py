"""What a change of network leaves behind (LP #1932551), taken away by
steps.flanneld.forget_old_network while flanneld is stopped: on a real bridge
and real vxlan devices in a network namespace of the test's own, with
subnet.env a real file. Also the devices and MTUs flanneld makes for a
network config (facts.netconfig, adapters.vxlan) and the interface it runs on."""
from __future__ import annotations

import ipaddress
import json

import pytest
import stepkit

from charms.flannel.adapters import links, vxlan
from charms.flannel.facts.flanneld import of_the_v2_era
from charms.flannel.facts.host_network import binding_interface
from charms.flannel.facts.netconfig import NetworkConfig
from charms.flannel.facts.status import Problem
from charms.flannel.steps.flanneld import forget_old_network
from charms.flannel.steps.checks import interface_problems


def network(cidr="10.3.0.0/16", subnet_len=24, backend="vxlan", vni=1, mtu=None,
            ipv6=None) -> NetworkConfig:
    """The network config flanneld reads from etcd; `ipv6` "fd10:1::/56"
    turns dual-stack on."""
    config = {"Network": cidr, "SubnetLen": subnet_len, "Backend": {"Type": backend}}
    if backend == "vxlan":
        config["Backend"]["VNI"] = vni
        if mtu:
            config["Backend"]["MTU"] = mtu
    if ipv6:
        config.update(EnableIPv6=True, IPv6Network=ipv6, IPv6SubnetLen=64)
    return NetworkConfig.from_json(config)


def subnet_env(network: str, subnet: str) -> str:
    return (f"FLANNEL_NETWORK={network}\nFLANNEL_SUBNET={subnet}\n"
            "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")


# --- flanneld's vxlan devices ------------------------------------------------------------

def vxlan_entry(name: str, vni: int, mtu: int = 1450) -> dict:
    return {"ifname": name, "mtu": mtu,
            "linkinfo": {"info_kind": "vxlan", "info_data": {"id": vni}}}


LINKS = [{"ifname": "lo"}, {"ifname": "eth0", "linkinfo": {"info_kind": "veth"}},
         {"ifname": "cni0", "linkinfo": {"info_kind": "bridge"}},
         vxlan_entry("flannel.1", 1), vxlan_entry("flannel.4097", 4097),
         vxlan_entry("flannel-v6.1", 1), vxlan_entry("vx0", 1),
         {"ifname": "flannel.7", "linkinfo": {"info_kind": "dummy"}}]


def test_flannel_vxlan_links_are_flanneld_s_vxlan_devices_only():
    assert vxlan.flannel_vxlan_links(LINKS) == ["flannel.1", "flannel.4097", "flannel-v6.1"]


def test_the_vxlan_device_s_name_follows_the_vni():
    assert network().vxlan_link == "flannel.1"
    assert network(vni=4097).vxlan_link == "flannel.4097"
    assert network(vni=4097, ipv6="fd10:1::/56").vxlan_v6_link == "flannel-v6.4097"
    assert network().vxlan_v6_link is None
    assert network(backend="host-gw").vxlan_link is None


# --- forget_old_network, on a real bridge and real vxlan devices in a namespace ---------

class Node:
    """A network namespace as flanneld and the bridge plugin left it."""

    def __init__(self, run):
        self.run = run

    def bridge(self, *addresses: str, mtu: int = 1450) -> "Node":
        self.run(["ip", "link", "add", "cni0", "mtu", str(mtu), "type", "bridge"])
        for address in addresses:
            self.run(["ip", "addr", "add", address, "dev", "cni0"]
                     + (["nodad"] if ":" in address else []))
        return self

    def vxlan(self, name: str, vni: int, mtu: int = 1450) -> "Node":
        self.run(["ip", "link", "add", name, "mtu", str(mtu), "type", "vxlan", "id", str(vni),
                  "dstport", "8472"])
        return self

    def pod(self) -> "Node":
        self.run(["ip", "link", "add", "vethpod", "type", "veth", "peer", "name", "vethpodp"])
        self.run(["ip", "link", "set", "vethpod", "master", "cni0"])
        return self

    def addresses(self) -> list[str]:
        shown = json.loads(self.run(["ip", "-j", "addr", "show", "dev", "cni0"]))
        return sorted(f"{a['local']}/{a['prefixlen']}" for a in shown[0]["addr_info"]
                      if a.get("scope") != "link")

    def links(self) -> dict[str, int]:
        return {link["ifname"]: link["mtu"]
                for link in json.loads(self.run(["ip", "-j", "link", "show"]))}

    def bridge_mtu(self) -> int:
        return self.links()["cni0"]


@pytest.fixture
def node(netns_machine):
    return Node(netns_machine.netns)


@pytest.fixture
def ctx(tmp_path, netns_machine):
    """A hook's context whose machine is the node's namespace."""
    return stepkit.context(tmp_path, machine=netns_machine)


def write_env(ctx, text: str):
    """subnet.env where flanneld writes it (below the test's directory)."""
    path = ctx.paths.subnet_env
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_cidr_change_drops_the_old_gateway_and_the_old_subnet_env(node, ctx):
    node.bridge("10.1.52.1/24")
    env = write_env(ctx, subnet_env("10.1.0.0/16", "10.1.52.1/24"))
    gone = forget_old_network(ctx, network(), None)
    assert gone.bridge_addresses == ["10.1.52.1/24"] and gone.subnet_env and gone
    assert str(gone.old_lease.subnet) == "10.1.52.1/24"
    assert node.addresses() == [] and not env.exists()


def test_a_unit_back_with_no_subnet_env_and_no_pod_drops_flannel_s_gateway(node, ctx):
    """A unit added back after its lease expired (removal took subnet.env):
    flanneld will lease anew, and the bridge plugin would refuse the new
    gateway beside the old one. An address of no flannel network stays."""
    node.bridge("10.3.29.1/24", "192.168.9.1/24")
    gone = forget_old_network(ctx, network(), None)
    assert gone.bridge_addresses == ["10.3.29.1/24"]
    assert node.addresses() == ["192.168.9.1/24"]


def test_a_unit_back_with_pods_on_the_bridge_keeps_their_gateway_for_now(node, ctx):
    node.bridge("10.3.29.1/24").pod()
    assert not forget_old_network(ctx, network(), None).bridge_addresses
    assert node.addresses() == ["10.3.29.1/24"]


def test_vni_change_deletes_the_old_vxlan_device_only(node, ctx):
    node.bridge("10.3.7.1/24").vxlan("flannel.1", 1).vxlan("vx0", 7)
    write_env(ctx, subnet_env("10.3.0.0/16", "10.3.7.1/24"))
    gone = forget_old_network(ctx, network(vni=4097), None)
    assert gone.vxlan_links == ["flannel.1"] and gone
    assert "flannel.1" not in node.links() and "vx0" in node.links()
    assert node.addresses() == ["10.3.7.1/24"]


def test_an_mtu_change_recreates_the_device_flanneld_would_reuse(node, ctx):
    node.vxlan("flannel.1", 1, mtu=1450)
    gone = forget_old_network(ctx, network(mtu=1400), None)   # pods: 1350
    assert gone.vxlan_links == ["flannel.1"] and "flannel.1" not in node.links()


def test_the_bridge_gets_the_pods_new_mtu(node, ctx):
    node.bridge("10.3.7.1/24", mtu=1350).vxlan("flannel.1", 1, mtu=1350)
    write_env(ctx, subnet_env("10.3.0.0/16", "10.3.7.1/24"))
    gone = forget_old_network(ctx, network(), 9000)   # mtu 0: the interface's, pods 8950
    assert gone.bridge_mtu == (1350, 8950) and node.bridge_mtu() == 8950


def test_host_gw_pods_get_the_interface_mtu_and_the_bridge_follows(node, ctx):
    host_gw = network(backend="host-gw")
    assert host_gw.pod_mtu(1500) == 1500
    assert network(mtu=1400).pod_mtu(1500) == 1350
    node.bridge("10.3.7.1/24", mtu=1350)   # left from vxlan
    gone = forget_old_network(ctx, host_gw, 1500)
    assert gone.bridge_mtu == (1350, 1500) and node.bridge_mtu() == 1500


def test_the_device_with_the_wanted_mtu_is_kept(node, ctx):
    node.bridge("10.3.7.1/24", mtu=1350).vxlan("flannel.1", 1, mtu=1350)
    env = write_env(ctx, subnet_env("10.3.0.0/16", "10.3.7.1/24"))
    assert not forget_old_network(ctx, network(mtu=1400), 1500)
    assert "flannel.1" in node.links() and env.exists()


@pytest.mark.parametrize("backend, underlay, device", [
    ({"Type": "vxlan", "MTU": 1400}, 9000, 1350),   # the option wins
    ({"Type": "vxlan"}, 9000, 8950),               # flanneld's: the interface's
    ({"Type": "vxlan"}, None, None),               # not known: not compared
    ({"Type": "host-gw"}, 1500, None),             # no device
    ({"Type": "udp"}, 1500, None),                 # no Backend at all: flanneld's udp
])
def test_the_vxlan_device_mtu_flanneld_makes(backend, underlay, device):
    config = NetworkConfig.from_json({"Network": "10.3.0.0/16", "Backend": backend})
    assert config.vxlan_mtus(underlay).get("flannel.1") == device
    if device is not None:
        assert config.pod_mtu(underlay) == device   # pods get the device's MTU


def test_a_backend_without_vxlan_keeps_no_vxlan_device(node, ctx):
    node.vxlan("flannel.1", 1)
    assert forget_old_network(ctx, network(backend="host-gw"), None).vxlan_links == \
        ["flannel.1"]
    assert "flannel.1" not in node.links()


def test_delete_vxlan_links_on_stop_deletes_every_vni(node, netns_machine):
    node.vxlan("flannel.1", 1).vxlan("flannel.4097", 4097).vxlan("flannel-v6.1", 11)
    node.vxlan("vx0", 7)
    assert sorted(vxlan.delete_vxlan_links(netns_machine)) == \
        ["flannel-v6.1", "flannel.1", "flannel.4097"]
    assert "vx0" in node.links() and not any(n.startswith("flannel") for n in node.links())


def test_same_network_touches_nothing(node, ctx):
    node.bridge("10.3.7.1/24").vxlan("flannel.1", 1)
    env = write_env(ctx, subnet_env("10.3.0.0/16", "10.3.7.1/24"))
    assert not forget_old_network(ctx, network(), None)
    assert node.addresses() == ["10.3.7.1/24"] and "flannel.1" in node.links()
    assert env.exists()


def test_subnet_len_change_drops_the_lease_of_the_old_length(node, ctx):
    node.bridge("10.3.7.1/24")
    env = write_env(ctx, subnet_env("10.3.0.0/16", "10.3.7.1/24"))
    gone = forget_old_network(ctx, network(subnet_len=26), None)
    assert gone.bridge_addresses == ["10.3.7.1/24"] and node.addresses() == []
    assert gone.subnet_env and not env.exists()


def test_no_bridge_and_no_subnet_env_yet(node, ctx):
    assert not forget_old_network(ctx, network(), None)


def test_an_incomplete_subnet_env_is_flanneld_s_business(node, ctx):
    env = write_env(ctx, "FLANNEL_NETWORK=10.1.0.0/16\n")   # flanneld still writing it
    assert not forget_old_network(ctx, network(), None)
    assert env.exists()


def test_a_garbled_subnet_env_goes(node, ctx):
    env = write_env(ctx, subnet_env("10.1.0.0/16", "not-an-address"))
    assert forget_old_network(ctx, network(), None).subnet_env
    assert not env.exists()


DUAL_ENV = (subnet_env("10.3.0.0/16", "10.3.7.1/24")
            + "FLANNEL_IPV6_NETWORK=fd10:1::/56\nFLANNEL_IPV6_SUBNET=fd10:1:0:5::1/64\n")


@pytest.mark.parametrize("address, ipv6, fits", [
    ("10.3.7.1/24", None, True),
    ("10.1.52.1/24", None, False),       # the old cidr
    ("10.3.7.1/26", None, False),        # another lease length
    ("fd10:1:0:5::1/64", "fd10:1::/56", True),
    ("fd10:1:0:5::1/64", None, False),   # IPv6 off
    ("fd20::1/64", "fd10:1::/56", False),
    ("fd10:1:0:6::1/80", "fd10:1::/56", False),
])
def test_could_be_gateway(address, ipv6, fits):
    assert network(ipv6=ipv6).could_be_gateway(ipaddress.ip_interface(address)) is fits


@pytest.mark.parametrize("env_text, ipv6", [
    (subnet_env("10.3.0.0/16", "10.3.7.1/24"), "fd10:1::/56"),   # IPv6 turned on
    (DUAL_ENV, None),                                            # IPv6 turned off
])
def test_turning_ipv6_on_or_off_drops_the_lease_and_both_its_gateways(node, ctx, env_text,
                                                                      ipv6):
    """flanneld drops a lease of the other shape and leases every node anew,
    IPv4 subnet included: the old IPv4 gateway, inside the network, would
    make the bridge plugin refuse the new one. Pods on the bridge or not."""
    was_dual = ipv6 is None
    node.bridge(*["10.3.7.1/24"] + (["fd10:1:0:5::1/64"] if was_dual else [])).pod()
    node.vxlan("flannel.1", 1)
    if was_dual:
        node.vxlan("flannel-v6.1", 11, mtu=1430)
    env = write_env(ctx, env_text)
    gone = forget_old_network(ctx, network(ipv6=ipv6), None)
    assert gone.subnet_env and not env.exists() and gone.old_lease is not None
    assert sorted(gone.bridge_addresses) == ["10.3.7.1/24"] + (
        ["fd10:1:0:5::1/64"] if was_dual else [])
    assert node.addresses() == []
    assert "flannel-v6.1" not in node.links() and "flannel.1" in node.links()


def test_a_dual_stack_node_on_its_network_touches_nothing(node, ctx):
    """flannel-v6.1 is 20 bytes smaller than the pods' MTU (Linux caps it at
    the interface's less 70): compared with the pods' MTU it would be
    deleted at every restart, and IPv6 pod traffic dropped each time."""
    node.bridge("10.3.7.1/24", "fd10:1:0:5::1/64").vxlan("flannel.1", 1, mtu=1450)
    node.vxlan("flannel-v6.1", 11, mtu=1430)
    env = write_env(ctx, DUAL_ENV)
    assert not forget_old_network(ctx, network(ipv6="fd10:1::/56"), 1500)
    assert node.addresses() == ["10.3.7.1/24", "fd10:1:0:5::1/64"]
    assert {"flannel.1", "flannel-v6.1"} <= set(node.links()) and env.exists()


def test_a_dual_stack_config_keeps_both_devices_at_their_own_mtus():
    assert network(ipv6="fd10:1::/56").vxlan_mtus(1500) == {"flannel.1": 1450,
                                                            "flannel-v6.1": 1430}
    assert network(mtu=1400, ipv6="fd10:1::/56").vxlan_mtus(1500) == {"flannel.1": 1350,
                                                                      "flannel-v6.1": 1350}


def test_the_network_config_reads_what_flanneld_reads():
    config = NetworkConfig.from_json({"Network": "10.3.0.0/16", "SubnetLen": 26,
                                      "Backend": {"Type": "vxlan", "VNI": 4097}})
    assert (config.network, config.subnet_len, config.vxlan_link) == (
        ipaddress.IPv4Network("10.3.0.0/16"), 26, "flannel.4097")
    defaults = NetworkConfig.from_json({"Network": "10.1.0.0/16", "Backend": {"Type": "vxlan"}})
    assert (defaults.subnet_len, defaults.backend.vni) == (24, 1)
    assert NetworkConfig.from_json({"Network": "10.1.0.0/16",
                                    "Backend": {"Type": "host-gw"}}).vxlan_link is None


# -- the interface flanneld uses ---------------------------
# A fan-* bridge (Juju's fan overlay) cannot carry flannel's vxlan, and a
# missing binding must not leave flanneld without an interface.

def bound(*names):
    return [{"interface-name": name, "addresses": []} for name in names]


def no_default_route():
    return ""


def test_the_first_non_fan_bind_address_is_used():
    assert binding_interface(bound("fan-252", "ens3", "ens4"), no_default_route) == "ens3"


def test_only_fan_bind_addresses_fall_back_to_the_default_route():
    assert binding_interface(bound("fan-252"), lambda: "ens5") == "ens5"


def test_no_binding_falls_back_to_the_default_route():
    assert binding_interface([], lambda: "ens5") == "ens5"
    assert binding_interface([], no_default_route) == ""


def test_the_legacy_spelling_of_the_interface_name_is_read():
    assert binding_interface([{"interfacename": "eth1"}], no_default_route) == "eth1"


def test_default_route_interface_reads_the_machine_s_routes(netns_machine):
    assert links.default_route_interface(netns_machine) == ""   # no default route yet
    netns_machine.netns(["sh", "-ec", "ip link add eth0 type veth peer name eth0p\n"
                                      "ip link set eth0p up && ip link set eth0 up\n"
                                      "ip addr add 172.31.254.11/24 dev eth0\n"
                                      "ip route add default via 172.31.254.1 dev eth0"])
    assert links.default_route_interface(netns_machine) == "eth0"


def test_an_ipv6_only_machine_s_default_route_names_flanneld_s_interface(
        netns_machine, tmp_path):
    """With no IPv4 default route and no cni binding, the iface, mtu and
    IPv6 checks found no interface and were skipped silently."""
    ip = netns_machine.netns
    ip(["sh", "-ec", "ip link add eth0 type veth peer name eth0p\n"
                     "ip link set eth0p up && ip link set eth0 up\n"
                     "ip addr add fd00::11/64 dev eth0 nodad\n"
                     "ip -6 route add default via fd00::1 dev eth0"])
    assert links.default_route_interface(netns_machine) == "eth0"
    assert links.default_route_interface(netns_machine, (6, 4)) == "eth0"
    ctx = stepkit.context(tmp_path, machine=netns_machine, config={
        "cidr": "", "ipv6-cidr": "fd10:1::/56", "subnet-manager": "kubernetes"})
    assert ctx.binding_interface == "eth0"
    assert all(text is None for text in interface_problems(ctx, ctx.options).values())


def test_without_an_interface_for_flanneld_what_needs_one_is_not_passed_silently(
        netns_machine, tmp_path):
    ctx = stepkit.context(tmp_path, machine=netns_machine, config={"mtu": 1400})
    assert ctx.binding_interface == ""   # no binding, no default route
    assert interface_problems(ctx, ctx.options)[Problem.IFACE] == (
        "Invalid iface: flanneld's interface cannot be found (no cni binding names an "
        "interface and this machine has no default route), so mtu cannot be checked against "
        "it and flanneld would not start; set iface")


@pytest.mark.parametrize("version, v2_era", [
    ("v0.11.0", True), ("0.14.0", True), ("v0.17.0", True), ("v0.18.0", False),
    ("v0.27.4", False), ("v1.0.0", False), (None, False), ("dev", False)])
def test_flannel_before_v0_18_is_of_etcd_v2s_era(version, v2_era):
    assert of_the_v2_era(version) is v2_era
