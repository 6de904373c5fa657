"""charms.flannel.daemon: what a change of network leaves behind (LP #1932551)."""
from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path

import pytest

from charms.flannel import daemon

ROOT = Path(__file__).resolve().parents[2]
NET = ipaddress.IPv4Network("10.3.0.0/16")


def inet(address: str, prefixlen: int) -> dict:
    return {"family": "inet", "local": address, "prefixlen": prefixlen, "scope": "global"}


def subnet_env(network: str, subnet: str) -> str:
    return (f"FLANNEL_NETWORK={network}\nFLANNEL_SUBNET={subnet}\n"
            "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")


# --- forget_old_network, on a real bridge and real vxlan devices in a namespace ---------

def vxlan(name: str, vni: int, mtu: int = 1450) -> dict:
    return {"ifname": name, "mtu": mtu,
            "linkinfo": {"info_kind": "vxlan", "info_data": {"id": vni}}}


LINKS = [{"ifname": "lo"}, {"ifname": "eth0", "linkinfo": {"info_kind": "veth"}},
         {"ifname": "cni0", "linkinfo": {"info_kind": "bridge"}},
         vxlan("flannel.1", 1), vxlan("flannel.4097", 4097), vxlan("flannel-v6.1", 1),
         vxlan("vx0", 1), {"ifname": "flannel.7", "linkinfo": {"info_kind": "dummy"}}]


def test_flannel_vxlan_links_are_flanneld_s_vxlan_devices_only():
    assert daemon.flannel_vxlan_links(LINKS) == ["flannel.1", "flannel.4097", "flannel-v6.1"]


def test_vxlan_link_name_follows_the_vni():
    assert daemon.vxlan_link_name(1) == daemon.VXLAN_LINK == "flannel.1"
    assert daemon.vxlan_link_name(4097) == "flannel.4097"


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
def node(netns):
    return Node(netns)


def forget(node: Node, env: Path, vxlan_link, network=NET, subnet_len=24, **kwargs):
    return daemon.forget_old_network(network, subnet_len, env, vxlan_link, run=node.run,
                                     **kwargs)


def test_cidr_change_drops_the_old_gateway_and_the_old_subnet_env(node, tmp_path):
    node.bridge("10.1.52.1/24")
    env = tmp_path / "subnet.env"
    env.write_text(subnet_env("10.1.0.0/16", "10.1.52.1/24"))
    gone = forget(node, env, "flannel.1")
    assert gone.bridge_addresses == ["10.1.52.1/24"] and gone.subnet_env and gone
    assert node.addresses() == [] and not env.exists()


def test_a_unit_back_with_no_subnet_env_and_no_pod_drops_flannel_s_gateway(node, tmp_path):
    """A unit added back after its lease expired (removal took subnet.env):
    flanneld will lease anew, and the bridge plugin would refuse the new
    gateway beside the old one. An address of no flannel network stays."""
    node.bridge("10.3.29.1/24", "192.168.9.1/24")
    gone = forget(node, tmp_path / "subnet.env", "flannel.1")
    assert gone.bridge_addresses == ["10.3.29.1/24"]
    assert node.addresses() == ["192.168.9.1/24"]


def test_a_unit_back_with_pods_on_the_bridge_keeps_their_gateway_for_now(node, tmp_path):
    node.bridge("10.3.29.1/24").pod()
    assert not forget(node, tmp_path / "subnet.env", "flannel.1").bridge_addresses
    assert node.addresses() == ["10.3.29.1/24"]


def test_vni_change_deletes_the_old_vxlan_device_only(node, tmp_path):
    node.bridge("10.3.7.1/24").vxlan("flannel.1", 1).vxlan("vx0", 7)
    env = tmp_path / "subnet.env"
    env.write_text(subnet_env("10.3.0.0/16", "10.3.7.1/24"))
    gone = forget(node, env, "flannel.4097")
    assert gone.vxlan_links == ["flannel.1"] and gone
    assert "flannel.1" not in node.links() and "vx0" in node.links()
    assert node.addresses() == ["10.3.7.1/24"]


def test_an_mtu_change_recreates_the_device_flanneld_would_reuse(node, tmp_path):
    node.vxlan("flannel.1", 1, mtu=1450)
    gone = forget(node, tmp_path / "subnet.env", "flannel.1", pod_mtu=1350)
    assert gone.vxlan_links == ["flannel.1"] and "flannel.1" not in node.links()


def test_the_bridge_gets_the_pods_new_mtu(node, tmp_path):
    node.bridge("10.3.7.1/24", mtu=1350).vxlan("flannel.1", 1, mtu=1350)
    env = tmp_path / "subnet.env"
    env.write_text(subnet_env("10.3.0.0/16", "10.3.7.1/24"))
    gone = forget(node, env, "flannel.1", pod_mtu=8950)
    assert gone.bridge_mtu == (1350, 8950) and node.bridge_mtu() == 8950


def test_host_gw_pods_get_the_interface_mtu_and_the_bridge_follows(node, tmp_path):
    config = {"Network": "10.3.0.0/16", "Backend": {"Type": "host-gw"}}
    assert daemon.pod_mtu(config, 1500) == 1500
    assert daemon.pod_mtu({"Backend": {"Type": "vxlan", "MTU": 1400}}, 1500) == 1350
    node.bridge("10.3.7.1/24", mtu=1350)   # left from vxlan
    gone = forget(node, tmp_path / "subnet.env", None, pod_mtu=daemon.pod_mtu(config, 1500))
    assert gone.bridge_mtu == (1350, 1500) and node.bridge_mtu() == 1500


def test_the_device_with_the_wanted_mtu_is_kept(node, tmp_path):
    node.bridge("10.3.7.1/24", mtu=1350).vxlan("flannel.1", 1, mtu=1350)
    env = tmp_path / "subnet.env"
    env.write_text(subnet_env("10.3.0.0/16", "10.3.7.1/24"))
    gone = forget(node, env, "flannel.1", pod_mtu=1350)
    assert not gone and "flannel.1" in node.links()


@pytest.mark.parametrize("config, underlay, device", [
    ({"Backend": {"Type": "vxlan", "MTU": 1400}}, 9000, 1350),   # the option wins
    ({"Backend": {"Type": "vxlan"}}, 9000, 8950),               # flanneld's: the interface's
    ({"Backend": {"Type": "vxlan"}}, None, None),               # not known: not compared
    ({"Backend": {"Type": "host-gw"}}, 1500, None),             # no device
    ({}, 1500, 1450),                                           # vxlan is flanneld's default
])
def test_the_vxlan_device_mtu_flanneld_makes(config, underlay, device):
    assert daemon.vxlan_device_mtu(config, underlay) == device


def test_a_backend_without_vxlan_keeps_no_vxlan_device(node, tmp_path):
    node.vxlan("flannel.1", 1)
    assert forget(node, tmp_path / "subnet.env", None).vxlan_links == ["flannel.1"]
    assert "flannel.1" not in node.links()


def test_delete_vxlan_links_on_stop_deletes_every_vni(node):
    node.vxlan("flannel.1", 1).vxlan("flannel.4097", 4097).vxlan("flannel-v6.1", 11)
    node.vxlan("vx0", 7)
    assert sorted(daemon.delete_vxlan_links(run=node.run)) == \
        ["flannel-v6.1", "flannel.1", "flannel.4097"]
    assert "vx0" in node.links() and not any(n.startswith("flannel") for n in node.links())


def test_same_network_touches_nothing(node, tmp_path):
    node.bridge("10.3.7.1/24").vxlan("flannel.1", 1)
    env = tmp_path / "subnet.env"
    env.write_text(subnet_env("10.3.0.0/16", "10.3.7.1/24"))
    assert not forget(node, env, "flannel.1")
    assert node.addresses() == ["10.3.7.1/24"] and "flannel.1" in node.links()
    assert env.exists()


def test_subnet_len_change_drops_the_lease_of_the_old_length(node, tmp_path):
    node.bridge("10.3.7.1/24")
    env = tmp_path / "subnet.env"
    env.write_text(subnet_env("10.3.0.0/16", "10.3.7.1/24"))
    gone = forget(node, env, "flannel.1", subnet_len=26)
    assert gone.bridge_addresses == ["10.3.7.1/24"] and node.addresses() == []
    assert gone.subnet_env and not env.exists()


def test_no_bridge_and_no_subnet_env_yet(node, tmp_path):
    assert not forget(node, tmp_path / "subnet.env", "flannel.1")


def test_an_incomplete_subnet_env_is_flanneld_s_business(node, tmp_path):
    env = tmp_path / "subnet.env"
    env.write_text("FLANNEL_NETWORK=10.1.0.0/16\n")   # flanneld still writing it
    assert not forget(node, env, "flannel.1")
    assert env.exists()


def test_a_garbled_subnet_env_goes(node, tmp_path):
    env = tmp_path / "subnet.env"
    env.write_text(subnet_env("10.1.0.0/16", "not-an-address"))
    assert forget(node, env, "flannel.1").subnet_env
    assert not env.exists()


IPV6 = (ipaddress.IPv6Network("fd10:1::/56"), 64)
DUAL_ENV = (subnet_env("10.3.0.0/16", "10.3.7.1/24")
            + "FLANNEL_IPV6_NETWORK=fd10:1::/56\nFLANNEL_IPV6_SUBNET=fd10:1:0:5::1/64\n")


@pytest.mark.parametrize("address, ipv6, fits", [
    ("10.3.7.1/24", None, True),
    ("10.1.52.1/24", None, False),       # the old cidr
    ("10.3.7.1/26", None, False),        # another lease length
    ("fd10:1:0:5::1/64", IPV6, True),
    ("fd10:1:0:5::1/64", None, False),   # IPv6 off
    ("fd20::1/64", IPV6, False),
    ("fd10:1:0:6::1/80", IPV6, False),
])
def test_could_be_gateway(address, ipv6, fits):
    assert daemon.could_be_gateway(ipaddress.ip_interface(address), NET, 24, ipv6) is fits


@pytest.mark.parametrize("env_text, ipv6", [
    (subnet_env("10.3.0.0/16", "10.3.7.1/24"), IPV6),   # IPv6 turned on
    (DUAL_ENV, None),                                   # IPv6 turned off
])
def test_turning_ipv6_on_or_off_drops_the_lease_and_both_its_gateways(node, tmp_path,
                                                                      env_text, ipv6):
    """flanneld drops a lease of the other shape and leases every node anew,
    IPv4 subnet included: the old IPv4 gateway, inside the network, would
    make the bridge plugin refuse the new one. Pods on the bridge or not."""
    was_dual = ipv6 is None
    node.bridge(*["10.3.7.1/24"] + (["fd10:1:0:5::1/64"] if was_dual else [])).pod()
    node.vxlan("flannel.1", 1)
    if was_dual:
        node.vxlan("flannel-v6.1", 11, mtu=1430)
    env = tmp_path / "subnet.env"
    env.write_text(env_text)
    gone = forget(node, env, "flannel.1", ipv6=ipv6)
    assert gone.subnet_env and not env.exists() and gone.old_lease is not None
    assert sorted(gone.bridge_addresses) == ["10.3.7.1/24"] + (
        ["fd10:1:0:5::1/64"] if was_dual else [])
    assert node.addresses() == []
    assert "flannel-v6.1" not in node.links() and "flannel.1" in node.links()


def test_a_dual_stack_node_on_its_network_touches_nothing(node, tmp_path):
    """flannel-v6.1 is 20 bytes smaller than the pods' MTU (Linux caps it at
    the interface's less 70): compared with the pods' MTU it was deleted at
    every restart, and IPv6 pod traffic dropped each time."""
    node.bridge("10.3.7.1/24", "fd10:1:0:5::1/64").vxlan("flannel.1", 1, mtu=1450)
    node.vxlan("flannel-v6.1", 11, mtu=1430)
    env = tmp_path / "subnet.env"
    env.write_text(DUAL_ENV)
    assert not forget(node, env, "flannel.1", ipv6=IPV6, pod_mtu=1450, underlay_mtu=1500)
    assert node.addresses() == ["10.3.7.1/24", "fd10:1:0:5::1/64"]
    assert {"flannel.1", "flannel-v6.1"} <= set(node.links()) and env.exists()


@pytest.mark.parametrize("pod_mtu, underlay, v6_device", [
    (1450, 1500, 1430),   # mtu 0: both at the interface's limit
    (1350, 1500, 1350),   # mtu 1400: under the limit, the pods' MTU
    (1450, None, 1430),   # interface unknown: 20 bytes less
    (None, 1500, None),   # pods' MTU unknown: not compared
])
def test_the_ipv6_vxlan_device_mtu_flanneld_gets(pod_mtu, underlay, v6_device):
    assert daemon.vxlan_v6_device_mtu(pod_mtu, underlay) == v6_device


def test_network_shape_reads_what_flanneld_reads():
    from charms.flannel.daemon import network_shape
    assert network_shape({"Network": "10.3.0.0/16", "SubnetLen": 26,
                          "Backend": {"Type": "vxlan", "VNI": 4097}}) == (
        ipaddress.IPv4Network("10.3.0.0/16"), 26, 4097)
    assert network_shape({"Network": "10.1.0.0/16", "Backend": {"Type": "vxlan"}})[1:] == (24, 1)
    assert network_shape({"Network": "10.1.0.0/16", "Backend": {"Type": "host-gw"}})[2] is None


# -- the interface flanneld uses ---------------------------
# On main the charm took the first bind address whatever it was (a fan-*
# bridge included) and had no binding_interface
# (AttributeError), so a missing `iface` stopped flanneld for nothing.

def bound(*names):
    return [{"interface-name": name, "addresses": []} for name in names]


def no_default_route():
    return ""


def test_the_first_non_fan_bind_address_is_used():
    assert daemon.binding_interface(bound("fan-252", "ens3", "ens4"), no_default_route) == "ens3"


def test_only_fan_bind_addresses_fall_back_to_the_default_route():
    assert daemon.binding_interface(bound("fan-252"), lambda: "ens5") == "ens5"


def test_no_binding_falls_back_to_the_default_route():
    assert daemon.binding_interface([], lambda: "ens5") == "ens5"
    assert daemon.binding_interface([], no_default_route) == ""


def test_the_legacy_spelling_of_the_interface_name_is_read():
    assert daemon.binding_interface([{"interfacename": "eth1"}], no_default_route) == "eth1"


def test_default_route_interface_reads_this_machine_s_routes():
    shown = json.loads(subprocess.run(["ip", "-j", "route", "show", "default"],
                                      capture_output=True, text=True).stdout or "[]")
    assert daemon.default_route_interface() == (shown[0]["dev"] if shown else "")


@pytest.mark.parametrize("version, v2_era", [
    ("v0.11.0", True), ("0.14.0", True), ("v0.17.0", True), ("v0.18.0", False),
    ("v0.27.4", False), ("v1.0.0", False), (None, False), ("dev", False)])
def test_flannel_before_v0_18_is_of_etcd_v2s_era(version, v2_era):
    assert daemon.of_the_v2_era(version) is v2_era
