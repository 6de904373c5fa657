"""facts/netconfig.py: the network config in etcd as flanneld reads it.

The defaults and MTUs below are what flanneld v0.27.4 (the charm's
resource) did with each config when run against etcd in a network
namespace: the lease length it wrote to subnet.env, the vxlan devices it
made and their MTUs, on an interface of MTU 1500.
"""
from __future__ import annotations

import ipaddress

import pytest

from charms.flannel.facts.netconfig import (Backend, NetworkConfig, NotANetworkConfig,
                                            vxlan_v6_device_mtu)
from charms.flannel.facts.subnet_env import SubnetEnv, parse_subnet_env

VXLAN = {"Type": "vxlan"}


def config(**fields) -> NetworkConfig:
    return NetworkConfig.from_json({"Network": "10.1.0.0/16", "Backend": VXLAN, **fields})


def dual(ipv6_network="fd10:1::/56", **fields) -> NetworkConfig:
    return config(EnableIPv6=True, IPv6Network=ipv6_network, **fields)


def lease(subnet: str, ipv6_subnet: str | None = None, network="10.1.0.0/16",
          ipv6_network="fd10:1::/56"):
    text = (f"FLANNEL_NETWORK={network}\nFLANNEL_SUBNET={subnet}\nFLANNEL_MTU=1450\n"
            "FLANNEL_IPMASQ=true\n")
    if ipv6_subnet:
        text += f"FLANNEL_IPV6_NETWORK={ipv6_network}\nFLANNEL_IPV6_SUBNET={ipv6_subnet}\n"
    return parse_subnet_env(text)


# --- from_json: flanneld's defaults ---------------------------------------------------

@pytest.mark.parametrize("network, subnet_len", [
    ("10.1.0.0/16", 24), ("10.5.0.0/22", 24),    # big enough for a /24 per host
    ("10.5.0.0/23", 25), ("10.5.0.0/28", 30),    # else the network split in four
])
def test_without_subnet_len_flanneld_leases_a_24_or_a_quarter_of_a_smaller_network(
        network, subnet_len):
    assert NetworkConfig.from_json({"Network": network, "Backend": VXLAN}).subnet_len == \
        subnet_len


def test_a_subnet_len_given_is_kept():
    assert config(SubnetLen=26).subnet_len == 26
    assert config(SubnetLen=0).subnet_len == 24     # 0 is flanneld's "not set"


@pytest.mark.parametrize("ipv6_network, ipv6_subnet_len", [
    ("fd10:1::/56", 64), ("fd10:1::/62", 64),    # big enough for a /64 per host
    ("fd10:1::/63", 65), ("fd10:1::/120", 122),  # else the network split in four
])
def test_without_ipv6_subnet_len_flanneld_leases_a_64_or_a_quarter(
        ipv6_network, ipv6_subnet_len):
    parsed = dual(ipv6_network)
    assert parsed.ipv6 == (ipaddress.IPv6Network(ipv6_network), ipv6_subnet_len)
    assert dual(ipv6_network, IPv6SubnetLen=80).ipv6_subnet_len == 80


def test_an_ipv6_network_without_enable_ipv6_is_ignored_as_flanneld_ignores_it():
    parsed = config(IPv6Network="fd10:1::/56")
    assert parsed.ipv6 is None and parsed.ipv6_network is None
    assert parsed.pod_networks == ((ipaddress.IPv4Network("10.1.0.0/16"), 24),)


def test_vxlan_without_settings_is_vni_1_on_the_kernel_s_port_and_the_interface_s_mtu():
    assert config().backend == Backend(type="vxlan", vni=1, port=0, mtu=0,
                                       direct_routing=False)
    given = config(Backend={"Type": "vxlan", "VNI": 4096, "Port": 4789, "MTU": 1400,
                            "DirectRouting": True})
    assert given.backend == Backend("vxlan", 4096, 4789, 1400, True)


def test_the_backend_type_is_read_in_any_case_as_flanneld_lowercases_it():
    assert config(Backend={"Type": "VXLAN"}).backend.type == "vxlan"
    assert config(Backend={"Type": "Host-GW"}).backend.type == "host-gw"


def test_a_config_without_a_backend_is_flanneld_s_udp_backend():
    """flanneld v0.27.4 on {"Network": "10.5.0.0/16"}: "Found network config
    - Backend type: udp", FLANNEL_MTU 1472 and no flannel.1. Read as vxlan,
    etcd holding it looks like the charm's own default config (to_json
    equal): the charm never rewrites it, and a unit shows active while its
    flanneld runs another backend than the one it was asked for."""
    parsed = NetworkConfig.from_json({"Network": "10.1.0.0/16", "SubnetLen": 24})
    assert parsed.backend.type == "udp"
    assert parsed.vxlan_link is None
    assert parsed.to_json() != NetworkConfig.from_json(
        {"Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": VXLAN}).to_json()


def test_a_backend_that_names_no_type_is_refused_as_flanneld_refuses_it():
    """flanneld v0.27.4 on "Backend": {}: "Error fetching backend: unknown
    backend type: " and no lease, retried for ever."""
    assert NetworkConfig.parse({"Network": "10.1.0.0/16", "Backend": {}}) is None
    assert NetworkConfig.parse({"Network": "10.1.0.0/16", "Backend": {"VNI": 1}}) is None


# --- garbage -----------------------------------------------------------------------------

@pytest.mark.parametrize("garbage", [
    "", "not json", b"\xff\xfe", "[]", "null", "{}", {"SubnetLen": 24},
    {"Network": "10.1.0.0/33"}, {"Network": "fd10:1::/56"}, {"Network": 16},
    {"Network": "10.1.0.0/16", "SubnetLen": "x"},
    {"Network": "10.1.0.0/16", "Backend": "vxlan"},
    {"Network": "10.1.0.0/16", "Backend": {"Type": "vxlan", "VNI": "one"}},
    {"Network": "10.1.0.0/16", "EnableIPv6": True, "IPv6Network": "nonsense"},
    {"Network": "10.1.0.0/16", "EnableIPv6": True, "IPv6Network": "10.2.0.0/16"},
])
def test_what_is_no_network_config_parses_to_none(garbage):
    assert NetworkConfig.parse(garbage) is None
    with pytest.raises(NotANetworkConfig):
        NetworkConfig.from_json(garbage)


def test_nothing_parses_to_none():
    assert NetworkConfig.parse(None) is None


def test_the_json_may_come_as_text_bytes_or_a_dict():
    text = '{"Network": "10.1.0.0/16", "Backend": {"Type": "host-gw"}}'
    assert NetworkConfig.parse(text) == NetworkConfig.parse(text.encode()) == \
        NetworkConfig.parse({"Network": "10.1.0.0/16", "Backend": {"Type": "host-gw"}})


# --- to_json: what the charm writes and remembers ---------------------------------------

@pytest.mark.parametrize("written", [
    {"Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan", "VNI": 1}},
    {"Network": "192.168.0.0/20", "SubnetLen": 26, "Backend": {"Type": "host-gw"}},
    {"Network": "10.1.0.0/16", "SubnetLen": 24,
     "Backend": {"Type": "vxlan", "VNI": 4096, "Port": 4789, "MTU": 1400,
                 "DirectRouting": True}},
    {"Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan", "VNI": 1},
     "EnableIPv6": True, "IPv6Network": "fd10:1::/56", "IPv6SubnetLen": 64},
])
def test_what_the_charm_writes_reads_back_the_same(written):
    parsed = NetworkConfig.from_json(written)
    assert parsed.to_json() == written
    assert NetworkConfig.from_json(parsed.to_json()) == parsed


def test_flanneld_s_defaults_are_written_out():
    """What the charm remembers is what flanneld runs: the lease length it
    picks and the VNI it uses."""
    assert NetworkConfig.from_json({"Network": "10.5.0.0/23", "Backend": VXLAN}).to_json() == {
        "Network": "10.5.0.0/23", "SubnetLen": 25, "Backend": {"Type": "vxlan", "VNI": 1}}
    assert dual("fd10:1::/63").to_json()["IPv6SubnetLen"] == 65


def test_host_gw_is_written_without_the_vxlan_settings():
    """Settings flanneld's host-gw never reads would only make two configs
    of the same network differ."""
    parsed = config(Backend={"Type": "host-gw", "VNI": 4096, "Port": 4789})
    assert parsed.to_json()["Backend"] == {"Type": "host-gw"}


# --- the pod networks ----------------------------------------------------------------------

def test_the_cni_relation_carries_the_pod_network_ipv4_first():
    assert config().published_cidr == "10.1.0.0/16"
    assert dual().published_cidr == "10.1.0.0/16,fd10:1::/56"


def test_pod_networks_are_each_family_s_network_and_lease_length():
    assert dual().pod_networks == ((ipaddress.IPv4Network("10.1.0.0/16"), 24),
                                   (ipaddress.IPv6Network("fd10:1::/56"), 64))


def test_the_first_subnet_is_the_one_flanneld_never_leases():
    assert config(SubnetLen=26).first_subnet == ipaddress.IPv4Network("10.1.0.0/26")


@pytest.mark.parametrize("address, ipv6, fits", [
    ("10.1.7.1/24", False, True),
    ("10.3.52.1/24", False, False),      # another cidr's
    ("10.1.7.1/26", False, False),       # another lease length
    ("fd10:1:0:5::1/64", True, True),
    ("fd10:1:0:5::1/64", False, False),  # IPv6 off
    ("fd20::1/64", True, False),         # another ipv6-cidr's
    ("fd10:1:0:6::1/80", True, False),   # another IPv6 lease length
])
def test_a_bridge_address_could_be_the_gateway_of_a_lease_of_the_config(address, ipv6, fits):
    parsed = dual() if ipv6 else config()
    assert parsed.could_be_gateway(ipaddress.ip_interface(address)) is fits


@pytest.mark.parametrize("held, ipv6, holds", [
    (lease("10.1.52.1/24"), False, True),
    (lease("10.9.52.1/24", network="10.9.0.0/16"), False, False),   # cidr changed
    (lease("10.1.52.1/26"), False, False),                           # subnet-len changed
    (lease("10.1.52.1/24"), True, False),             # IPv6 turned on: no IPv6 lease yet
    (lease("10.1.52.1/24", "fd10:1:0:5::1/64"), False, False),   # turned off: a dual lease
    (lease("10.1.52.1/24", "fd10:1:0:5::1/64"), True, True),
    (lease("10.1.52.1/24", "fd20:0:0:5::1/64", ipv6_network="fd20::/56"), True, False),
])
def test_a_lease_is_the_config_s_only_if_flanneld_would_keep_it(held, ipv6, holds):
    """flanneld drops a lease of another shape and leases anew (both
    families): until then, the node's subnet.env is stale."""
    assert (dual() if ipv6 else config()).holds(held) is holds


def test_an_ipv6_only_config_holds_only_ipv6_only_leases():
    """EnableIPv4 false: flanneld leases only an IPv6 subnet, and a lease
    with an IPv4 one is of the config before."""
    v6_only = NetworkConfig.from_json({"EnableIPv4": False, "EnableIPv6": True,
                                       "IPv6Network": "fd10:1::/56", "IPv6SubnetLen": 64,
                                       "Backend": {"Type": "vxlan"}})
    assert v6_only.network is None and v6_only.pod_networks == (
        (ipaddress.IPv6Network("fd10:1::/56"), 64),)
    only_v6 = SubnetEnv(network=None, subnet=None, mtu=1450, ipmasq=True,
                        ipv6_network=ipaddress.IPv6Network("fd10:1::/56"),
                        ipv6_subnet=ipaddress.IPv6Interface("fd10:1:0:5::1/64"))
    assert v6_only.holds(only_v6)
    assert not v6_only.holds(lease("10.1.52.1/24", "fd10:1:0:5::1/64"))
    assert not dual().holds(only_v6)
    assert v6_only.vxlan_mtus(1500) == {"flannel-v6.1": 1430}
    with pytest.raises(NotANetworkConfig):
        NetworkConfig.from_json({"EnableIPv4": False, "Backend": {"Type": "vxlan"}})


# --- the backend's devices and MTUs -------------------------------------------------------

def test_flanneld_names_its_vxlan_devices_after_the_vni():
    assert config(Backend={"Type": "vxlan", "VNI": 4096}).vxlan_link == "flannel.4096"
    assert config().vxlan_v6_link is None
    assert dual(Backend={"Type": "vxlan", "VNI": 7}).vxlan_v6_link == "flannel-v6.7"
    assert config(Backend={"Type": "host-gw"}).vxlan_link is None
    assert dual(Backend={"Type": "host-gw"}).vxlan_v6_link is None


@pytest.mark.parametrize("backend, underlay, pods", [
    (VXLAN, 1500, 1450),                             # the interface's less vxlan's 50
    (VXLAN, 9000, 8950),
    ({"Type": "vxlan", "MTU": 1400}, 9000, 1350),    # the option wins
    (VXLAN, None, None),                             # not known
    ({"Type": "vxlan", "MTU": 1400}, None, 1350),
    ({"Type": "host-gw"}, 1500, 1500),               # host-gw: the interface's
    ({"Type": "host-gw"}, None, None),
])
def test_the_mtu_flanneld_gives_pods(backend, underlay, pods):
    assert config(Backend=backend).pod_mtu(underlay) == pods


@pytest.mark.parametrize("parsed, underlay, devices", [
    (config(), 1500, {"flannel.1": 1450}),
    (config(Backend={"Type": "vxlan", "VNI": 4096, "MTU": 1400}), 1500,
     {"flannel.4096": 1350}),
    (config(), None, {"flannel.1": None}),
    (config(Backend={"Type": "host-gw"}), 1500, {}),
    (dual(Backend={"Type": "host-gw"}), 1500, {}),
    # Linux caps flannel-v6.<VNI> at the interface's MTU less 70
    (dual(), 1500, {"flannel.1": 1450, "flannel-v6.1": 1430}),
    (dual(Backend={"Type": "vxlan", "MTU": 1400}), 1500,
     {"flannel.1": 1350, "flannel-v6.1": 1350}),   # under the cap: the pods' MTU
    (dual(), None, {"flannel.1": None, "flannel-v6.1": None}),
])
def test_the_vxlan_devices_flanneld_makes_and_their_mtus(parsed, underlay, devices):
    assert parsed.vxlan_mtus(underlay) == devices


@pytest.mark.parametrize("pod_mtu, underlay, v6_device", [
    (1450, 1500, 1430),   # mtu 0: at the interface's limit
    (1350, 1500, 1350),   # mtu 1400: under the limit, the pods' MTU
    (1450, None, 1430),   # interface unknown: 20 bytes less
    (None, 1500, None),   # pods' MTU unknown: not compared
])
def test_the_ipv6_vxlan_device_mtu_flanneld_gets(pod_mtu, underlay, v6_device):
    assert vxlan_v6_device_mtu(pod_mtu, underlay) == v6_device


@pytest.mark.parametrize("parsed, underlay, pods", [
    (config(), 1500, 1450),                          # IPv4 only: flanneld's FLANNEL_MTU
    (dual(), 1500, 1430),                            # what flannel-v6.1 carries, both families
    (dual(), 9000, 8930),
    (dual(Backend={"Type": "vxlan", "MTU": 1400}), 1500, 1350),   # the option under the cap
    (dual(Backend={"Type": "host-gw"}), 1500, 1500),   # no encapsulation
    (NetworkConfig.from_json({"EnableIPv4": False, "EnableIPv6": True,
                              "IPv6Network": "fd10:1::/56", "Backend": {"Type": "vxlan"}}),
     1500, 1430),                                    # IPv6-only: vxlan over IPv6 costs 70
])
def test_the_mtu_pods_get_fits_what_the_ipv6_vxlan_device_carries(parsed, underlay, pods):
    """flanneld gives pods its interface's MTU less 50 in every family, but
    Linux caps flannel-v6.<VNI> 20 bytes lower: a full-size IPv6 packet of
    a pod crossed only by "packet too big" (and not where that is filtered)."""
    assert parsed.pods_mtu(underlay) == pods


# -- EnableNFTables ----------------------------------------------------------------------

def test_nftables_is_read_as_flanneld_reads_it():
    base = {"Network": "10.1.0.0/16", "Backend": {"Type": "vxlan"}}
    assert NetworkConfig.from_json(base).nftables is False
    assert NetworkConfig.from_json({**base, "EnableNFTables": True}).nftables is True
    # Go's encoding/json matches field names case-insensitively
    assert NetworkConfig.from_json({**base, "enablenftables": True}).nftables is True
    with pytest.raises(NotANetworkConfig):
        NetworkConfig.from_json({**base, "EnableNFTables": "true"})


def test_nftables_round_trips_and_is_left_out_when_off():
    on = NetworkConfig.from_json({"Network": "10.1.0.0/16", "Backend": {"Type": "vxlan"},
                                  "EnableNFTables": True})
    assert NetworkConfig.from_json(on.to_json()) == on
    assert "EnableNFTables" not in NetworkConfig.from_json(
        {"Network": "10.1.0.0/16", "Backend": {"Type": "vxlan"}}).to_json()


@pytest.mark.parametrize("config, leasable", [
    ({"Network": "10.1.0.0/16", "SubnetLen": 24}, 255),     # 10.1.1.0 ... 10.1.255.0
    ({"Network": "10.1.0.0/22", "SubnetLen": 24}, 3),
    ({"Network": "10.1.0.0/16", "SubnetLen": 24, "EnableIPv6": True,
      "IPv6Network": "fd10:1::/62", "IPv6SubnetLen": 64}, 3),   # the smaller family's
])
def test_how_many_nodes_can_hold_a_lease_is_flanneld_s_subnet_min_to_max(config, leasable):
    network = NetworkConfig.from_json({**config, "Backend": {"Type": "vxlan"}})
    assert network.leasable == leasable
    assert network.subnets_held(["10.1.1.0/24", "10.2.1.0/24", "what"]) == 1
