"""subnet.env, as flanneld writes it (facts/subnet_env.py parses it,
adapters/node_files.py reads the file): the unit's status shows the subnet."""
import ipaddress

import pytest

from charms.flannel.adapters.node_files import read_lease, read_subnet_env
from charms.flannel.facts.subnet_env import SubnetEnv, parse_subnet_env

FLANNELD_WROTE = """FLANNEL_NETWORK=10.1.0.0/16
FLANNEL_SUBNET=10.1.52.1/24
FLANNEL_MTU=1450
FLANNEL_IPMASQ=true
"""

EXPECTED = SubnetEnv(network=ipaddress.IPv4Network("10.1.0.0/16"),
                     subnet=ipaddress.IPv4Interface("10.1.52.1/24"), mtu=1450, ipmasq=True)


def test_what_flanneld_writes_is_parsed():
    env = parse_subnet_env(FLANNELD_WROTE)
    assert env == EXPECTED
    assert str(env.subnet) == "10.1.52.1/24"
    assert env.subnet.network == ipaddress.IPv4Network("10.1.52.0/24")


def test_blank_lines_and_comments_are_tolerated():
    assert parse_subnet_env("# written by flanneld\n\n" + FLANNELD_WROTE + "\n") == EXPECTED


def test_a_dual_stack_lease_gives_both_gateways():
    """flanneld v0.27 with EnableIPv6 (WriteSubnetFile) adds the IPv6 pair;
    the status names both gateways."""
    env = parse_subnet_env(FLANNELD_WROTE + "FLANNEL_IPV6_NETWORK=fd10:1::/56\n"
                                            "FLANNEL_IPV6_SUBNET=fd10:1:0:5::1/64\n")
    assert env.ipv6_network == ipaddress.IPv6Network("fd10:1::/56")
    assert [str(g) for g in env.gateways] == ["10.1.52.1/24", "fd10:1:0:5::1/64"]
    assert parse_subnet_env(FLANNELD_WROTE).gateways == (EXPECTED.subnet,)


def test_an_ipv6_only_lease_has_only_the_ipv6_pair():
    """flanneld with EnableIPv4 false (WriteSubnetFile) writes no
    FLANNEL_NETWORK or FLANNEL_SUBNET: the IPv6 gateway names the lease."""
    env = parse_subnet_env("FLANNEL_IPV6_NETWORK=fd10:1::/56\n"
                           "FLANNEL_IPV6_SUBNET=fd10:1:0:5::1/64\n"
                           "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n")
    assert (env.network, env.subnet) == (None, None)
    assert [str(g) for g in env.gateways] == ["fd10:1:0:5::1/64"]
    assert str(env.primary.network) == "fd10:1:0:5::/64"
    assert env.lease_name == "fd10:1:0:5::/64"
    assert env.networks == ((ipaddress.IPv6Network("fd10:1::/56"), 64),)


def test_ipmasq_false_and_quoted_values():
    text = FLANNELD_WROTE.replace("true", "false").replace("1450", '"1400"')
    env = parse_subnet_env(text)
    assert (env.ipmasq, env.mtu) == (False, 1400)


@pytest.mark.parametrize("text", [
    FLANNELD_WROTE.replace("10.1.52.1/24", "10.1.52.999/24"),
    FLANNELD_WROTE.replace("1450", "big"),
    FLANNELD_WROTE.replace("1450", "0"),
    FLANNELD_WROTE.replace("true", "yes"),
    FLANNELD_WROTE + "garbage line\n",
])
def test_garbage_raises_value_error(text):
    with pytest.raises(ValueError):
        parse_subnet_env(text)


def test_read_returns_none_while_the_file_is_absent(tmp_path):
    assert read_subnet_env(tmp_path / "subnet.env") is None


@pytest.mark.parametrize("text", ["", FLANNELD_WROTE.replace("FLANNEL_SUBNET=10.1.52.1/24\n", ""),
                                  "FLANNEL_NETWORK=10.1.0.0/16\n", "FLANNEL_MTU=\n"])
def test_read_returns_none_while_the_file_is_incomplete(tmp_path, text):
    (tmp_path / "subnet.env").write_text(text)
    assert read_subnet_env(tmp_path / "subnet.env") is None


def test_read_parses_a_complete_file(tmp_path):
    (tmp_path / "subnet.env").write_text(FLANNELD_WROTE)
    assert read_subnet_env(str(tmp_path / "subnet.env")) == EXPECTED


def test_a_garbled_file_is_no_lease_and_no_hook_failure(tmp_path):
    """read_subnet_env raises on bad values; the hooks read the lease with
    read_lease, for which a file flanneld will rewrite is no lease yet."""
    (tmp_path / "subnet.env").write_text(FLANNELD_WROTE.replace("1450", "big"))
    with pytest.raises(ValueError):
        read_subnet_env(tmp_path / "subnet.env")
    assert read_lease(tmp_path / "subnet.env") is None
    (tmp_path / "subnet.env").write_text(FLANNELD_WROTE)
    assert read_lease(tmp_path / "subnet.env") == EXPECTED
