"""Config validation: what an operator sets, and the blocked status they see."""
import ipaddress
import json
from pathlib import Path

import pytest
import yaml

from charms.flannel.facts.netconfig import NetworkConfig
from charms.flannel.facts.offload import choose
from charms.flannel.facts.options import InvalidOption, NetworkOptions, parse_options

ROOT = Path(__file__).resolve().parents[2]

DEFAULTS = {"cidr": "10.1.0.0/16", "subnet-len": 24, "backend": "vxlan",
            "iface": "", "port": 0, "vni": 1}


def config(**changes):
    values = dict(DEFAULTS)
    values.update({key.replace("_", "-"): value for key, value in changes.items()})
    return values


def network_config(**changes) -> dict:
    """The network config the options ask etcd to hold, as the charm writes it."""
    return parse_options(config(**changes)).network_config().to_json()


def status_for(**changes) -> str:
    with pytest.raises(InvalidOption) as caught:
        parse_options(config(**changes))
    return str(caught.value)


def test_defaults_of_config_yaml_are_valid():
    options = yaml.safe_load((ROOT / "config.yaml").read_text())["options"]
    parsed = parse_options({key: spec["default"] for key, spec in options.items()})
    assert parsed == NetworkOptions(cidr=ipaddress.IPv4Network("10.1.0.0/16"), subnet_len=24,
                                    backend="vxlan", vni=1, port=0, iface="")


def test_missing_keys_fall_back_to_the_defaults():
    assert parse_options({}) == parse_options(DEFAULTS)


def test_a_full_custom_config_is_kept():
    parsed = parse_options(config(cidr="192.168.0.0/20", subnet_len=26, backend="host-gw",
                                  iface="ens3", port=4789, vni=4096))
    assert (str(parsed.cidr), parsed.subnet_len, parsed.backend, parsed.iface, parsed.port,
            parsed.vni) == ("192.168.0.0/20", 26, "host-gw", "ens3", 4789, 4096)


def test_the_default_network_config_is_flanneld_s_vxlan_on_10_1_0_0_16():
    assert network_config() == {"Network": "10.1.0.0/16", "SubnetLen": 24,
                                "Backend": {"Type": "vxlan", "VNI": 1}}


def test_each_backend_gets_only_the_settings_flanneld_reads_for_it():
    assert network_config(vni=4096, port=4789)["Backend"] == {
        "Type": "vxlan", "VNI": 4096, "Port": 4789}
    assert network_config(backend="host-gw", vni=4096, port=4789) == {
        "Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "host-gw"}}


def test_invalid_option_carries_option_reason_and_message():
    with pytest.raises(InvalidOption) as caught:
        parse_options(config(vni=0))
    error = caught.value
    assert error.option == "vni"
    assert error.message == str(error) == f"Invalid vni: {error.reason}"
    assert isinstance(error, ValueError)


@pytest.mark.parametrize("cidr, message", [
    ("10.1.0.0/33", 'Invalid cidr: "10.1.0.0/33" is not an IPv4 network'),
    ("not-a-network", 'Invalid cidr: "not-a-network" is not an IPv4 network'),
    ("10.1.0.0/16 ", 'Invalid cidr: "10.1.0.0/16 " is not an IPv4 network'),
    ("10.1.0.300/16", 'Invalid cidr: "10.1.0.300/16" is not an IPv4 network'),
    ("10.1.2.0/16", 'Invalid cidr: "10.1.2.0/16" has host bits set; did you mean 10.1.0.0/16?'),
    ("10.1.0.0", 'Invalid cidr: "10.1.0.0" has no prefix length; write it like 10.1.0.0/16'),
    ("fd00:10::/64", 'Invalid cidr: "fd00:10::/64" is an IPv6 network; cidr is the IPv4 '
                     'pod network such as 10.1.0.0/16, and ipv6-cidr the IPv6 one'),
    ("10.1.0.0/16,fd10:1::/56", 'Invalid cidr: "10.1.0.0/16,fd10:1::/56" holds more than '
                                'one network; put the IPv4 pod network in cidr and the IPv6 '
                                'one in ipv6-cidr'),
    ("", "Invalid cidr: it is empty, and flanneld cannot run IPv6-only with etcd (every node "
         "would get the same IPv6 subnet); set an IPv4 network such as 10.1.0.0/16 (with "
         "ipv6-cidr for dual-stack), or subnet-manager=kubernetes for IPv6-only"),
    ("127.0.0.0/16", 'Invalid cidr: "127.0.0.0/16" overlaps 127.0.0.0/8 (loopback); '
                     'use a private range such as 10.1.0.0/16'),
    ("224.0.0.0/8", 'Invalid cidr: "224.0.0.0/8" overlaps 224.0.0.0/4 (multicast); '
                    'use a private range such as 10.1.0.0/16'),
    ("0.0.0.0/0", 'Invalid cidr: "0.0.0.0/0" overlaps 0.0.0.0/8 (this-network); '
                  'use a private range such as 10.1.0.0/16'),
    ("169.254.0.0/16", 'Invalid cidr: "169.254.0.0/16" overlaps 169.254.0.0/16 (link-local); '
                       'use a private range such as 10.1.0.0/16'),
    (16, "Invalid cidr: 16 is not an IPv4 network"),
])
def test_cidr_must_be_a_usable_ipv4_network(cidr, message):
    assert status_for(cidr=cidr) == message


@pytest.mark.parametrize("subnet_len, message", [
    (31, "Invalid subnet-len: 31 is out of range; use a prefix length from 1 to 30"),
    (0, "Invalid subnet-len: 0 is out of range; use a prefix length from 1 to 30"),
    (-24, "Invalid subnet-len: -24 is out of range; use a prefix length from 1 to 30"),
    ("24", 'Invalid subnet-len: "24" is not a whole number'),
    (24.0, "Invalid subnet-len: 24.0 is not a whole number"),
    (True, "Invalid subnet-len: True is not a whole number"),
])
def test_subnet_len_must_be_a_prefix_length_up_to_30(subnet_len, message):
    assert status_for(subnet_len=subnet_len) == message


@pytest.mark.parametrize("cidr, subnet_len", [
    ("10.1.0.0/16", 16), ("10.1.0.0/16", 8),
    # "longer than the prefix" is not enough: flanneld v0.27 refuses these
    # configs, and etcd would hold one every flanneld refuses.
    ("10.1.0.0/16", 17), ("10.1.0.0/23", 24), ("10.1.0.0/28", 29),
])
def test_subnet_len_must_leave_the_cidr_four_subnets(cidr, subnet_len):
    """flanneld's CheckNetworkConfig: SubnetLen >= the Network's prefix + 2."""
    prefix = int(cidr.split("/")[1])
    assert status_for(cidr=cidr, subnet_len=subnet_len) == (
        f"Invalid subnet-len: {subnet_len} leaves cidr {cidr} fewer than four subnets, "
        f"which flanneld refuses; use {prefix + 2} to 30")


def test_the_exact_example_message_for_subnet_len():
    assert status_for(subnet_len=16) == (
        "Invalid subnet-len: 16 leaves cidr 10.1.0.0/16 fewer than four subnets, "
        "which flanneld refuses; use 18 to 30")


@pytest.mark.parametrize("cidr", ["10.1.0.0/29", "10.1.0.0/30", "10.1.0.0/32"])
def test_a_cidr_too_small_for_four_subnets_names_the_cidr(cidr):
    """No subnet-len can fit: the cidr is what to change."""
    assert status_for(cidr=cidr, subnet_len=30) == (
        f"Invalid cidr: {cidr} is too small for flannel; use a prefix of /28 or shorter")


@pytest.mark.parametrize("cidr, subnet_len", [("10.1.0.0/16", 18), ("10.1.0.0/16", 24),
                                              ("10.1.0.0/16", 30), ("10.1.0.0/28", 30),
                                              ("10.0.0.0/8", 10)])
def test_subnet_len_from_prefix_plus_two_to_30_is_accepted(cidr, subnet_len):
    assert parse_options(config(cidr=cidr, subnet_len=subnet_len)).subnet_len == subnet_len


@pytest.mark.parametrize("backend, message", [
    ("udp", 'Invalid backend: "udp" is not supported; use vxlan or host-gw'),
    ("VXLAN", 'Invalid backend: "VXLAN" is not supported; use vxlan or host-gw'),
    ("", 'Invalid backend: "" is not supported; use vxlan or host-gw'),
    (1, "Invalid backend: 1 is not supported; use vxlan or host-gw"),
])
def test_backend_is_vxlan_or_host_gw(backend, message):
    assert status_for(backend=backend) == message


@pytest.mark.parametrize("backend", ["vxlan", "host-gw"])
def test_both_backends_are_accepted(backend):
    assert parse_options(config(backend=backend)).backend == backend


@pytest.mark.parametrize("vni, message", [
    (0, "Invalid vni: 0 is out of range; use 1 to 9999999 "
     "(flanneld's device flannel.<vni> must fit Linux's 15-character names)"),
    (16777216, "Invalid vni: 16777216 is out of range; use 1 to 9999999 "
     "(flanneld's device flannel.<vni> must fit Linux's 15-character names)"),
    (-1, "Invalid vni: -1 is out of range; use 1 to 9999999 "
     "(flanneld's device flannel.<vni> must fit Linux's 15-character names)"),
    ("1", 'Invalid vni: "1" is not a whole number'),
])
def test_vni_is_a_24_bit_identifier(vni, message):
    assert status_for(vni=vni) == message


@pytest.mark.parametrize("vni", [1, 4096, 9999999])
def test_vni_limits_are_accepted(vni):
    assert parse_options(config(vni=vni)).vni == vni


@pytest.mark.parametrize("port, message", [
    (65536, "Invalid port: 65536 is out of range; use 1 to 65535, "
            "or 0 for the kernel default 8472"),
    (-1, "Invalid port: -1 is out of range; use 1 to 65535, or 0 for the kernel default 8472"),
    ("8472", 'Invalid port: "8472" is not a whole number'),
    (None, None),  # None means unset: the default applies
])
def test_port_is_a_udp_port_or_zero(port, message):
    if message is None:
        assert parse_options(config(port=port)).port == 0
    else:
        assert status_for(port=port) == message


@pytest.mark.parametrize("port", [0, 1, 4789, 65535])
def test_port_limits_are_accepted(port):
    assert parse_options(config(port=port)).port == port


@pytest.mark.parametrize("iface", ["", "eth0", "ens3f0np0", "br-ex", "bond0.100", "veth_x1",
                                   "a" * 15, "10.0.0.5", "fe80::1"])
def test_plausible_interfaces_are_accepted(iface):
    assert parse_options(config(iface=iface)).iface == iface


@pytest.mark.parametrize("iface, message", [
    ("a" * 16, f'Invalid iface: "{"a" * 16}" is longer than the 15 characters Linux allows'),
    ("eth 0", 'Invalid iface: "eth 0" is not an interface name or IP address '
              "(names use letters, digits, '.', '-', '_', '@'; no spaces, '/' or ':')"),
    ("eth0/1", 'Invalid iface: "eth0/1" is not an interface name or IP address '
               "(names use letters, digits, '.', '-', '_', '@'; no spaces, '/' or ':')"),
    ("eth0:1", 'Invalid iface: "eth0:1" is not an interface name or IP address '
               "(names use letters, digits, '.', '-', '_', '@'; no spaces, '/' or ':')"),
    ("..", 'Invalid iface: ".." is not an interface name or IP address '
           "(names use letters, digits, '.', '-', '_', '@'; no spaces, '/' or ':')"),
    (" eth0", 'Invalid iface: " eth0" is not an interface name or IP address '
              "(names use letters, digits, '.', '-', '_', '@'; no spaces, '/' or ':')"),
    (0, "Invalid iface: 0 is not an interface name"),
])
def test_implausible_interfaces_are_rejected(iface, message):
    assert status_for(iface=iface) == message


def test_single_options_are_checked_before_combinations():
    # Both subnet-len (vs cidr) and vni are wrong: the single check wins.
    assert status_for(subnet_len=8, vni=0).startswith("Invalid vni:")


def test_the_first_invalid_option_is_reported_in_a_stable_order():
    assert status_for(cidr="x", vni=0).startswith("Invalid cidr:")


# -- mtu --------------------------------------------------------------------------

def test_mtu_zero_leaves_the_mtu_to_flanneld():
    assert parse_options(config(mtu=0)).mtu == 0
    assert "MTU" not in network_config(mtu=0)["Backend"]


def test_an_mtu_reaches_the_vxlan_backend():
    assert network_config(mtu=1400)["Backend"] == {
        "Type": "vxlan", "VNI": 1, "MTU": 1400}


@pytest.mark.parametrize("value, message", [
    (625, "Invalid mtu: 625 is out of range; use 626 to 65535 (pods get the mtu less "
          "vxlan's 50 bytes, at least 576), or 0 for the interface's MTU"),
    (65536, "Invalid mtu: 65536 is out of range; use 626 to 65535 (pods get the mtu less "
            "vxlan's 50 bytes, at least 576), or 0 for the interface's MTU"),
    (-1, "Invalid mtu: -1 is out of range; use 626 to 65535 (pods get the mtu less "
         "vxlan's 50 bytes, at least 576), or 0 for the interface's MTU"),
    ("1400", 'Invalid mtu: "1400" is not a whole number'),
])
def test_an_mtu_out_of_range_is_refused(value, message):
    with pytest.raises(InvalidOption) as error:
        parse_options(config(mtu=value))
    assert str(error.value) == message


def test_host_gw_takes_no_mtu():
    with pytest.raises(InvalidOption) as error:
        parse_options(config(backend="host-gw", mtu=1400))
    assert str(error.value) == (
        "Invalid mtu: 1400 cannot be given to host-gw, which has no MTU of its own (pods get "
        "the interface's); use 0, or the vxlan backend")
    assert parse_options(config(backend="host-gw", mtu=0)).mtu == 0


# -- direct-routing ---------------------------------------------------------------

def test_direct_routing_reaches_the_vxlan_backend():
    assert network_config(direct_routing=True)["Backend"] == {
        "Type": "vxlan", "VNI": 1, "DirectRouting": True}
    assert "DirectRouting" not in network_config()["Backend"]


def test_direct_routing_is_refused_for_host_gw_and_must_be_a_boolean():
    with pytest.raises(InvalidOption) as error:
        parse_options(config(backend="host-gw", **{"direct-routing": True}))
    assert str(error.value) == (
        "Invalid direct-routing: applies to vxlan only (host-gw routes every node directly "
        "already); set it to false, or use the vxlan backend")
    with pytest.raises(InvalidOption) as error:
        parse_options(config(**{"direct-routing": "yes"}))
    assert str(error.value) == 'Invalid direct-routing: "yes" is not true or false'


# --- dual-stack ---------------------------------------------------------------------

def test_ipv6_is_off_by_default_and_absent_from_flannels_config():
    options = parse_options(config(ipv6_subnet_len=200))   # not looked at while off
    assert options.ipv6_cidr is None
    assert not {"EnableIPv6", "IPv6Network", "IPv6SubnetLen"} & set(
        network_config(ipv6_subnet_len=200))


def test_an_ipv6_cidr_turns_dual_stack_on_as_flanneld_reads_it():
    assert network_config(ipv6_cidr="fd10:1::/56", ipv6_subnet_len=64) == {
        "Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan", "VNI": 1},
        "EnableIPv6": True, "IPv6Network": "fd10:1::/56", "IPv6SubnetLen": 64}


@pytest.mark.parametrize("changes, message", [
    ({"ipv6_cidr": "10.2.0.0/16"}, 'Invalid ipv6-cidr: "10.2.0.0/16" is an IPv4 network; '
                                   'the IPv4 pod network is cidr: give an IPv6 network such '
                                   'as fd10:1::/56'),
    ({"ipv6_cidr": "fd10:1::"}, 'Invalid ipv6-cidr: "fd10:1::" has no prefix length; write '
                                'it like fd10:1::/56'),
    ({"ipv6_cidr": "fd10:1::1/56"}, 'Invalid ipv6-cidr: "fd10:1::1/56" has host bits set; '
                                    'did you mean fd10:1::/56?'),
    ({"ipv6_cidr": "fe80::/64"}, 'Invalid ipv6-cidr: "fe80::/64" overlaps fe80::/10 '
                                 '(link-local); use a unique local range such as fd10:1::/56'),
    ({"ipv6_cidr": "ff05::/64"}, 'Invalid ipv6-cidr: "ff05::/64" overlaps ff00::/8 '
                                 '(multicast); use a unique local range such as fd10:1::/56'),
    ({"ipv6_cidr": "fd10:1::/125"}, "Invalid ipv6-cidr: fd10:1::/125 is too small for "
                                    "flannel; use a prefix of /124 or shorter"),
    ({"ipv6_cidr": "nonsense"}, 'Invalid ipv6-cidr: "nonsense" is not an IPv6 network'),
    ({"ipv6_cidr": "fd10:1::/56", "ipv6_subnet_len": 57},
     "Invalid ipv6-subnet-len: 57 leaves ipv6-cidr fd10:1::/56 fewer than four subnets, "
     "which flanneld refuses; use 58 to 126"),
    ({"ipv6_cidr": "fd10:1::/56", "ipv6_subnet_len": 127},
     "Invalid ipv6-subnet-len: 127 is out of range; use a prefix length from 1 to 126"),
    ({"ipv6_cidr": "fd10:1::%eth0/56"}, 'Invalid ipv6-cidr: "fd10:1::%eth0/56" is not an IPv6 '
                                        'network'),
    ({"ipv6_cidr": "fd10:1::/56", "vni": 10000},
     'Invalid vni: 10000 is too long for IPv6: flanneld\'s device flannel-v6.10000 would '
     'pass Linux\'s 15 characters; use 1 to 9999, or set ipv6-cidr to ""'),
])
def test_an_ipv6_setting_flanneld_would_refuse_is_named(changes, message):
    assert status_for(**changes) == message


def test_a_large_vni_is_fine_without_ipv6_and_with_host_gw():
    assert parse_options(config(vni=10000)).vni == 10000
    assert parse_options(config(vni=10000, backend="host-gw", ipv6_cidr="fd10:1::/56")).vni \
        == 10000


# -- enable-nftables, disable-vxlan-tx-checksumming -----------------------------------

def test_nftables_is_off_and_checksum_offload_left_to_the_kernel_by_default():
    options = parse_options({})
    assert (options.nftables, options.tx_checksum_off) == (False, None)
    assert "EnableNFTables" not in options.network_config().to_json()


def test_nftables_reaches_the_network_config_flanneld_reads():
    options = parse_options(config(**{"enable-nftables": True}))
    assert options.network_config().to_json()["EnableNFTables"] is True
    assert options.network_config().rules_tool == "nft"


def test_enable_nftables_that_is_not_a_boolean_is_named():
    with pytest.raises(InvalidOption) as error:
        parse_options(config(**{"enable-nftables": "yes"}))
    assert str(error.value) == 'Invalid enable-nftables: "yes" is not true or false'


@pytest.mark.parametrize("value, off", [
    ("auto", None), ("AUTO ", None), ("true", True), ("False", False),
    (True, True), (False, False)])   # a boolean: what the option was before auto
def test_checksum_offload_is_auto_true_or_false(value, off):
    assert parse_options(config(**{"disable-vxlan-tx-checksumming": value})).tx_checksum_off \
        is off


@pytest.mark.parametrize("value", ["yes", "", 1])
def test_checksum_offload_that_is_not_auto_true_or_false_is_named(value):
    with pytest.raises(InvalidOption) as error:
        parse_options(config(**{"disable-vxlan-tx-checksumming": value}))
    assert str(error.value).startswith("Invalid disable-vxlan-tx-checksumming: ")
    assert str(error.value).endswith(" is not auto, true or false")


@pytest.mark.parametrize("release, off", [
    ("5.4.0-216-generic", True),     # Ubuntu 20.04: before the fix
    ("5.6.19", True),
    ("5.7.0", False),                # ea64d8d6c675 is in 5.7
    ("5.15.0-91-generic", False),    # 22.04
    ("6.8.0-45-generic", False),     # 24.04
    ("6.18.44-fc-v1272", False),
    ("", True), (None, True)])       # not known to be fixed: off, as before auto
def test_auto_turns_offload_off_on_kernels_before_5_7_only(release, off):
    assert choose(None, release).off is off
    assert choose(True, release).off is True and choose(False, release).off is False


# -- subnet-manager ---------------------------------------------------------------------

@pytest.mark.parametrize("value, subnet_manager", [
    ("etcd", "etcd"), ("kubernetes", "kubernetes"), (" Kubernetes", "kubernetes")])
def test_the_subnet_manager_is_etcd_or_kubernetes(value, subnet_manager):
    options = parse_options(config(**{"subnet-manager": value}))
    assert options.subnet_manager == subnet_manager
    # where flanneld keeps its leases is no part of the network it runs
    assert options.network_config() == parse_options({}).network_config()


def test_the_subnet_manager_is_etcd_by_default():
    assert parse_options({}).subnet_manager == "etcd"


@pytest.mark.parametrize("value", ["kube", "", True])
def test_another_subnet_manager_is_named(value):
    with pytest.raises(InvalidOption) as error:
        parse_options(config(**{"subnet-manager": value}))
    assert str(error.value).startswith("Invalid subnet-manager: ")
    assert str(error.value).endswith(" is not etcd or kubernetes")


def test_an_empty_cidr_on_the_kubernetes_api_is_ipv6_only():
    """flanneld on the Kubernetes API leases IPv6-only Nodes (EnableIPv4
    false); its net-conf.json has no Network, and the principal hears only
    the IPv6 network."""
    options = parse_options(config(**{"subnet-manager": "kubernetes", "cidr": "",
                                      "ipv6-cidr": "fd10:1::/56"}))
    network = options.network_config()
    assert options.cidr is None
    assert network.to_json() == {"EnableIPv4": False, "Backend": {"Type": "vxlan", "VNI": 1},
                                 "EnableIPv6": True, "IPv6Network": "fd10:1::/56",
                                 "IPv6SubnetLen": 64}
    assert network.published_cidr == "fd10:1::/56"
    assert (network.vxlan_link, network.vxlan_v6_link) == (None, "flannel-v6.1")
    assert NetworkConfig.from_json(network.to_json()) == network


def test_no_network_at_all_is_refused_naming_both_options():
    with pytest.raises(InvalidOption) as error:
        parse_options(config(**{"subnet-manager": "kubernetes", "cidr": ""}))
    assert str(error.value) == (
        "Invalid cidr: it is empty, and so is ipv6-cidr: set cidr (an IPv4 network such as "
        "10.1.0.0/16), ipv6-cidr for IPv6-only, or both for dual-stack")


# -- IPv6's own limits -------------------------------------------------------------

def test_an_mtu_that_leaves_ipv6_pods_under_1280_bytes_is_refused():
    """Linux takes IPv6 off a device under 1280 bytes: pods would have none."""
    assert status_for(ipv6_cidr="fd10:1::/56", mtu=1300) == (
        "Invalid mtu: 1300 leaves pods 1250 bytes, less than IPv6's 1280 (Linux takes IPv6 off "
        "a smaller device); use at least 1330 with ipv6-cidr, or 0 for the interface's")
    assert parse_options(config(ipv6_cidr="fd10:1::/56", mtu=1330)).mtu == 1330
    assert parse_options(config(mtu=1300)).mtu == 1300   # IPv4 only: fine


def test_an_ipv6_only_network_reads_back_as_written_whatever_subnet_len_says():
    """IPv6-only has no IPv4 subnets: a subnet-len other than 24 made the
    config written differ from the one read back, and every network run
    wrote it again and told the principal again."""
    options = parse_options(config(cidr="", ipv6_cidr="fd10:1::/56", subnet_len=26,
                                   subnet_manager="kubernetes"))
    written = options.network_config()
    assert NetworkConfig.from_json(json.dumps(written.to_json())) == written
    assert written.to_json() == {"EnableIPv4": False, "Backend": {"Type": "vxlan", "VNI": 1},
                                 "EnableIPv6": True, "IPv6Network": "fd10:1::/56",
                                 "IPv6SubnetLen": 64}
