"""charms.flannel.daemon: what a change of network leaves behind (LP #1932551)."""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import uuid
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


# --- stale_bridge_addresses ------------------------------------------------------

def test_an_address_of_the_old_cidr_is_stale():
    assert daemon.stale_bridge_addresses([inet("10.1.52.1", 24)], NET, 24) == ["10.1.52.1/24"]


def test_the_gateway_of_a_lease_in_the_new_cidr_is_kept():
    assert daemon.stale_bridge_addresses([inet("10.3.7.1", 24)], NET, 24) == []


def test_another_lease_length_is_stale_even_inside_the_cidr():
    assert daemon.stale_bridge_addresses([inet("10.3.7.1", 24)], NET, 26) == ["10.3.7.1/24"]


def test_ipv6_and_odd_entries_are_left_alone():
    entries = [{"family": "inet6", "local": "fe80::1", "prefixlen": 64},
               {"family": "inet"},                       # no address at all
               inet("10.1.52.1", 24), inet("10.3.9.1", 24)]
    assert daemon.stale_bridge_addresses(entries, NET, 24) == ["10.1.52.1/24"]


def test_a_wider_cidr_than_the_old_one_keeps_its_leases():
    wide = ipaddress.IPv4Network("10.0.0.0/8")
    assert daemon.stale_bridge_addresses([inet("10.1.52.1", 24)], wide, 24) == []


# --- forget_old_network, with `ip` answered by a fake ----------------------------------

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


class FakeIp:
    """Answers `ip -j addr show dev BRIDGE` and `ip -j -d link show`, and
    records `ip addr del` and `ip link delete`."""

    def __init__(self, addresses=None, links=(), bridge_mtu=1450):
        self.addresses = addresses   # None: the bridge does not exist
        self.bridge_mtu = bridge_mtu
        self.links = list(links)
        self.deleted = []
        self.links_deleted = []
        self.mtu_set = []

    def __call__(self, argv, **kwargs):
        if argv == ["ip", "-j", "-d", "link", "show"]:
            return subprocess.CompletedProcess(argv, 0, json.dumps(self.links), "")
        if argv[:3] == ["ip", "link", "delete"]:
            self.links_deleted.append(argv[3])
            return subprocess.CompletedProcess(argv, 0, "", "")
        if argv[:4] == ["ip", "-j", "addr", "show"]:
            if self.addresses is None:
                return subprocess.CompletedProcess(argv, 1, "", 'Device "cni0" does not exist.')
            link = {"ifname": argv[-1], "mtu": self.bridge_mtu, "addr_info": self.addresses}
            return subprocess.CompletedProcess(argv, 0, json.dumps([link]), "")
        if argv[:3] == ["ip", "link", "set"] and argv[-2] == "mtu":
            self.bridge_mtu = int(argv[-1])
            self.mtu_set.append((argv[4], int(argv[-1])))
            return subprocess.CompletedProcess(argv, 0, "", "")
        if argv[:3] == ["ip", "addr", "del"]:
            self.deleted.append((argv[3], argv[-1]))
            return subprocess.CompletedProcess(argv, 0, "", "")
        raise AssertionError(f"unexpected command {argv}")


@pytest.fixture
def fake_ip(monkeypatch):
    def install(addresses=None, links=(), bridge_mtu=1450):
        fake = FakeIp(addresses, links, bridge_mtu)
        monkeypatch.setattr(daemon.subprocess, "run", fake)
        return fake
    return install


def test_cidr_change_drops_the_old_gateway_and_the_old_subnet_env(fake_ip, tmp_path):
    fake = fake_ip([inet("10.1.52.1", 24)])
    env = tmp_path / "subnet.env"
    env.write_text(subnet_env("10.1.0.0/16", "10.1.52.1/24"))
    gone = daemon.forget_old_network(NET, 24, env, "flannel.1")
    assert gone.bridge_addresses == ["10.1.52.1/24"] and gone.subnet_env and gone
    assert fake.deleted == [("10.1.52.1/24", "cni0")]
    assert not env.exists()


def test_vni_change_deletes_the_old_vxlan_device_only(fake_ip, tmp_path):
    fake = fake_ip([inet("10.3.7.1", 24)], links=[vxlan("flannel.1", 1), vxlan("vx0", 1)])
    gone = daemon.forget_old_network(NET, 24, tmp_path / "subnet.env", "flannel.4097")
    assert gone.vxlan_links == ["flannel.1"] and gone
    assert fake.links_deleted == ["flannel.1"]
    assert fake.deleted == []


def test_an_mtu_change_recreates_the_device_flanneld_would_reuse(fake_ip, tmp_path):
    fake = fake_ip([inet("10.3.7.1", 24)], links=[vxlan("flannel.1", 1, mtu=1450)])
    gone = daemon.forget_old_network(NET, 24, tmp_path / "subnet.env", "flannel.1",
                                     pod_mtu=1350)
    assert gone.vxlan_links == ["flannel.1"] and fake.links_deleted == ["flannel.1"]


def test_the_bridge_gets_the_pods_new_mtu(fake_ip, tmp_path):
    fake = fake_ip([inet("10.3.7.1", 24)], links=[vxlan("flannel.1", 1, mtu=1350)],
                   bridge_mtu=1350)
    gone = daemon.forget_old_network(NET, 24, tmp_path / "subnet.env", "flannel.1",
                                     pod_mtu=8950)
    assert gone.bridge_mtu == (1350, 8950) and fake.mtu_set == [("cni0", 8950)]


def test_host_gw_pods_get_the_interface_mtu_and_the_bridge_follows(fake_ip, tmp_path):
    config = {"Network": "10.3.0.0/16", "Backend": {"Type": "host-gw"}}
    assert daemon.pod_mtu(config, 1500) == 1500
    assert daemon.pod_mtu({"Backend": {"Type": "vxlan", "MTU": 1400}}, 1500) == 1350
    fake = fake_ip([inet("10.3.7.1", 24)], bridge_mtu=1350)   # left from vxlan
    gone = daemon.forget_old_network(NET, 24, tmp_path / "subnet.env", None,
                                     pod_mtu=daemon.pod_mtu(config, 1500))
    assert gone.bridge_mtu == (1350, 1500) and fake.mtu_set == [("cni0", 1500)]


def test_the_device_with_the_wanted_mtu_is_kept(fake_ip, tmp_path):
    fake = fake_ip([inet("10.3.7.1", 24)], links=[vxlan("flannel.1", 1, mtu=1350)],
                   bridge_mtu=1350)
    gone = daemon.forget_old_network(NET, 24, tmp_path / "subnet.env", "flannel.1",
                                     pod_mtu=1350)
    assert gone.vxlan_links == [] and fake.links_deleted == [] and fake.mtu_set == []
    assert not gone


@pytest.mark.parametrize("config, underlay, device", [
    ({"Backend": {"Type": "vxlan", "MTU": 1400}}, 9000, 1350),   # the option wins
    ({"Backend": {"Type": "vxlan"}}, 9000, 8950),               # flanneld's: the interface's
    ({"Backend": {"Type": "vxlan"}}, None, None),               # not known: not compared
    ({"Backend": {"Type": "host-gw"}}, 1500, None),             # no device
    ({}, 1500, 1450),                                           # vxlan is flanneld's default
])
def test_the_vxlan_device_mtu_flanneld_makes(config, underlay, device):
    assert daemon.vxlan_device_mtu(config, underlay) == device


def test_a_backend_without_vxlan_keeps_no_vxlan_device(fake_ip, tmp_path):
    fake = fake_ip(None, links=[vxlan("flannel.1", 1)])
    assert daemon.forget_old_network(NET, 24, tmp_path / "subnet.env", None).vxlan_links \
        == ["flannel.1"]
    assert fake.links_deleted == ["flannel.1"]


def test_delete_vxlan_links_on_stop_deletes_every_vni(fake_ip):
    fake = fake_ip(None, links=LINKS)
    assert daemon.delete_vxlan_links() == ["flannel.1", "flannel.4097", "flannel-v6.1"]
    assert fake.links_deleted == ["flannel.1", "flannel.4097", "flannel-v6.1"]


def test_same_network_touches_nothing(fake_ip, tmp_path):
    fake = fake_ip([inet("10.3.7.1", 24)], links=[vxlan("flannel.1", 1)])
    env = tmp_path / "subnet.env"
    env.write_text(subnet_env("10.3.0.0/16", "10.3.7.1/24"))
    gone = daemon.forget_old_network(NET, 24, env, "flannel.1")
    assert not gone
    assert fake.deleted == [] and fake.links_deleted == []
    assert env.exists()


def test_subnet_len_change_drops_the_lease_of_the_old_length(fake_ip, tmp_path):
    fake = fake_ip([inet("10.3.7.1", 24)])
    env = tmp_path / "subnet.env"
    env.write_text(subnet_env("10.3.0.0/16", "10.3.7.1/24"))
    gone = daemon.forget_old_network(NET, 26, env, "flannel.1")
    assert fake.deleted == [("10.3.7.1/24", "cni0")]
    assert gone.subnet_env and not env.exists()


def test_no_bridge_and_no_subnet_env_yet(fake_ip, tmp_path):
    fake = fake_ip(None)
    gone = daemon.forget_old_network(NET, 24, tmp_path / "subnet.env", "flannel.1")
    assert not gone and fake.deleted == []


def test_an_incomplete_subnet_env_is_flanneld_s_business(fake_ip, tmp_path):
    fake_ip(None)
    env = tmp_path / "subnet.env"
    env.write_text("FLANNEL_NETWORK=10.1.0.0/16\n")   # flanneld still writing it
    assert not daemon.forget_old_network(NET, 24, env, "flannel.1")
    assert env.exists()


def test_a_garbled_subnet_env_goes(fake_ip, tmp_path):
    fake_ip(None)
    env = tmp_path / "subnet.env"
    env.write_text(subnet_env("10.1.0.0/16", "not-an-address"))
    assert daemon.forget_old_network(NET, 24, env, "flannel.1").subnet_env
    assert not env.exists()


IPV6 = (ipaddress.IPv6Network("fd10:1::/56"), 64)
DUAL_ENV = (subnet_env("10.3.0.0/16", "10.3.7.1/24")
            + "FLANNEL_IPV6_NETWORK=fd10:1::/56\nFLANNEL_IPV6_SUBNET=fd10:1:0:5::1/64\n")


def inet6(address: str, prefixlen: int) -> dict:
    return {"family": "inet6", "local": address, "prefixlen": prefixlen, "scope": "global"}


def test_ipv6_gateways_outside_the_ipv6_network_or_with_ipv6_off_are_stale():
    entries = [inet6("fd10:1:0:5::1", 64), inet6("fd20::1", 64), inet6("fd10:1:0:6::1", 80),
               {"family": "inet6", "local": "fe80::1", "prefixlen": 64, "scope": "link"}]
    assert daemon.stale_bridge_addresses(entries, NET, 24, IPV6) == \
        ["fd20::1/64", "fd10:1:0:6::1/80"]
    assert daemon.stale_bridge_addresses(entries, NET, 24, None) == \
        ["fd10:1:0:5::1/64", "fd20::1/64", "fd10:1:0:6::1/80"]


@pytest.mark.parametrize("env_text, ipv6", [
    (subnet_env("10.3.0.0/16", "10.3.7.1/24"), IPV6),   # IPv6 turned on
    (DUAL_ENV, None),                                   # IPv6 turned off
])
def test_turning_ipv6_on_or_off_drops_the_lease_and_both_its_gateways(fake_ip, tmp_path,
                                                                      env_text, ipv6):
    """flanneld drops a lease of the other shape and leases every node anew,
    IPv4 subnet included: the old IPv4 gateway, inside the network, would
    make the bridge plugin refuse the new one."""
    was_dual = ipv6 is None
    fake = fake_ip([inet("10.3.7.1", 24)] + ([inet6("fd10:1:0:5::1", 64)] if was_dual else []),
                   links=[vxlan("flannel.1", 1)] + ([vxlan("flannel-v6.1", 1)] if was_dual
                                                    else []))
    env = tmp_path / "subnet.env"
    env.write_text(env_text)
    gone = daemon.forget_old_network(NET, 24, env, "flannel.1", ipv6=ipv6)
    assert gone.subnet_env and not env.exists() and gone.old_lease is not None
    assert sorted(fake.deleted) == [("10.3.7.1/24", "cni0")] + (
        [("fd10:1:0:5::1/64", "cni0")] if was_dual else [])
    assert fake.links_deleted == (["flannel-v6.1"] if was_dual else [])


def test_a_dual_stack_node_on_its_network_touches_nothing(fake_ip, tmp_path):
    """flannel-v6.1 is 20 bytes smaller than the pods' MTU (Linux caps it at
    the interface's less 70): compared with the pods' MTU it was deleted at
    every restart, and IPv6 pod traffic dropped each time."""
    fake = fake_ip([inet("10.3.7.1", 24), inet6("fd10:1:0:5::1", 64)],
                   links=[vxlan("flannel.1", 1, mtu=1450), vxlan("flannel-v6.1", 1, mtu=1430)])
    env = tmp_path / "subnet.env"
    env.write_text(DUAL_ENV)
    assert not daemon.forget_old_network(NET, 24, env, "flannel.1", ipv6=IPV6, pod_mtu=1450,
                                         underlay_mtu=1500)
    assert fake.deleted == [] and fake.links_deleted == [] and env.exists()


@pytest.mark.parametrize("pod_mtu, underlay, v6_device", [
    (1450, 1500, 1430),   # mtu 0: both at the interface's limit
    (1350, 1500, 1350),   # mtu 1400: under the limit, the pods' MTU
    (1450, None, 1430),   # interface unknown: 20 bytes less
    (None, 1500, None),   # pods' MTU unknown: not compared
])
def test_the_ipv6_vxlan_device_mtu_flanneld_gets(pod_mtu, underlay, v6_device):
    assert daemon.vxlan_v6_device_mtu(pod_mtu, underlay) == v6_device


# --- on a real bridge, in a network namespace of the test's own ----------------------

_IN_NETNS = """
import ipaddress, sys
sys.path[:0] = [sys.argv[1]]
from charms.flannel import daemon
gone = daemon.forget_old_network(ipaddress.IPv4Network(sys.argv[2]), int(sys.argv[3]),
                                 sys.argv[4], sys.argv[5])
print(",".join(gone.bridge_addresses), ",".join(gone.vxlan_links))
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                    reason="needs root and iproute2 for a network namespace")
def test_real_bridge_in_a_namespace(tmp_path):
    netns = f"fltest-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        ip = ["ip", "-n", netns]
        subprocess.run(ip + ["link", "add", "cni0", "type", "bridge"], check=True)
        subprocess.run(ip + ["addr", "add", "10.1.52.1/24", "dev", "cni0"], check=True)
        subprocess.run(ip + ["addr", "add", "10.3.7.1/24", "dev", "cni0"], check=True)
        for name, vni, port in (("flannel.1", 1, 8472), ("flannel.4097", 4097, 8999),
                                ("vx0", 7, 4789)):
            subprocess.run(ip + ["link", "add", name, "type", "vxlan", "id", str(vni),
                                 "dstport", str(port)], check=True)
        done = subprocess.run(
            ["ip", "netns", "exec", netns, sys.executable, "-c", _IN_NETNS, str(ROOT / "lib"),
             str(NET), "24", str(tmp_path / "subnet.env"), "flannel.4097"],
            capture_output=True, text=True, check=True)
        assert done.stdout.split() == ["10.1.52.1/24", "flannel.1"]
        links = json.loads(subprocess.run(ip + ["-j", "link", "show"], capture_output=True,
                                          text=True, check=True).stdout)
        assert {"flannel.4097", "vx0"} <= {link["ifname"] for link in links}
        assert "flannel.1" not in {link["ifname"] for link in links}
        left = json.loads(subprocess.run(ip + ["-j", "addr", "show", "dev", "cni0"],
                                         capture_output=True, text=True, check=True).stdout)
        assert [a["local"] for a in left[0]["addr_info"] if a["family"] == "inet"] == \
            ["10.3.7.1"]
    finally:
        subprocess.run(["ip", "netns", "delete", netns], check=False)


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
