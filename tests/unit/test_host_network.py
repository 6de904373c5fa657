"""What the options must fit on the machine (facts/host_network.py),
checked against a real kernel: a network namespace of the tests' own with
the interfaces an operator might name, read as the charm reads them
(adapters/links.py: the real `ip -j`).

Without these checks, a cidr overlapping the machine's own network would be
written to etcd and the unit say active with a subnet of the machine's
network; an `iface` that is down, loopback or without an IPv4 address would
restart flanneld on it.
"""
from __future__ import annotations

import ipaddress
import subprocess

import pytest
from unitkit import open_netns

from charms.flannel.adapters import links as machine_links
from charms.flannel.adapters.machine import Machine
from charms.flannel.facts import host_network
from charms.flannel.facts.host_network import cidr_conflict, iface_problem, machine_networks

# the interfaces of a machine (veth pairs: this kernel has no dummy links):
# eth0 up on the machines' network, eth1 down
# with an address, eth2 up without IPv4, eth3 with IPv6 only, a route to a
# network behind a router, and flannel's own devices of the running network
MACHINE = """
veth() { ip link add "$1" type veth peer name "$1p"; ip link set "$1p" up; }
veth eth0 && ip addr add 172.31.254.11/24 dev eth0 && ip link set eth0 up
veth eth1 && ip addr add 192.168.50.4/24 dev eth1
veth eth2 && ip link set eth2 up
veth eth3 && ip link set eth3 up && ip addr add fd00:5::4/64 dev eth3 nodad
ip route add default via 172.31.254.1 dev eth0
ip route add 10.200.0.0/16 via 172.31.254.9 dev eth0
ip route add 10.0.0.0/8 via 172.31.254.8 dev eth0
ip link add cni0 type bridge && ip addr add 10.1.52.1/24 dev cni0 && ip link set cni0 up
ip link add flannel.1 type vxlan id 1 dev eth0 dstport 8472
ip addr add 10.1.52.0/32 dev flannel.1
ip link set flannel.1 up && ip route add 10.1.7.0/24 via 10.1.7.0 dev flannel.1 onlink
"""


@pytest.fixture(scope="module")
def machine():
    """The machine's links and IPv4 routes as the charm reads them (one
    namespace for the module: the tests only read it)."""
    with open_netns() as netns:
        netns(["sh", "-ec", MACHINE])

        def runner(argv, *, check, input=None):
            return subprocess.run(["nsenter", f"--net={netns.path}", *argv], check=check,
                                  capture_output=True, text=True, input=input, timeout=60)
        seen = Machine(runner=runner)
        yield machine_links.read_links(seen), machine_links.read_routes(seen, 4)


RUNNING = [ipaddress.ip_network("10.1.0.0/16")]


@pytest.mark.parametrize("cidr, named", [
    ("172.31.0.0/16", "172.31.254.0/24, the network of eth0 (172.31.254.11/24)"),
    ("192.168.50.0/26", "192.168.50.0/24, the network of eth1"),
    ("10.200.0.0/15", "10.200.0.0/16, a route of this machine (10.200.0.0/16 via 172.31.254.9"),
])
def test_a_cidr_over_a_network_the_machine_is_on_or_routes_to_is_refused(machine, cidr, named):
    links, routes = machine
    problem = cidr_conflict(ipaddress.ip_network(cidr), machine_networks(links, routes, RUNNING))
    assert problem is not None and problem.option == "cidr"
    assert str(problem).startswith(f"Invalid cidr: {cidr} overlaps {named}"), str(problem)


@pytest.mark.parametrize("cidr", ["10.1.0.0/16", "10.2.0.0/16", "10.0.0.0/15"])
def test_the_running_pod_network_the_default_route_and_flannels_devices_do_not_count(
        machine, cidr):
    """cni0, flannel.1 and the routes to other nodes' subnets are flannel's
    own, and a change to another cidr (or a wider one) must pass."""
    links, routes = machine
    assert cidr_conflict(ipaddress.ip_network(cidr),
                         machine_networks(links, routes, RUNNING)) is None


def test_flannels_own_devices_never_count(machine):
    links, routes = machine
    found = machine_networks(links, routes, pod_networks=[])
    assert not any("cni0" in where or "flannel.1" in where for _, where, _ in found), found
    assert cidr_conflict(ipaddress.ip_network("10.1.0.0/16"), found) is None


def test_a_route_wider_than_the_cidr_loses_to_flannels_and_is_no_conflict(machine):
    """10.0.0.0/8 via a VPN gateway: pods' /24s are longer prefixes. (A
    network the machine is on conflicts whichever is wider.)"""
    links, routes = machine
    found = machine_networks(links, routes, RUNNING)
    assert (ipaddress.ip_network("10.0.0.0/8"), "a route of this machine (10.0.0.0/8 via "
            "172.31.254.8 dev eth0)", False) in found
    assert cidr_conflict(ipaddress.ip_network("10.3.0.0/16"), found) is None
    assert cidr_conflict(ipaddress.ip_network("172.31.254.128/25"), found) is not None


def test_the_service_cidr_the_control_plane_publishes_is_refused():
    problem = cidr_conflict(ipaddress.ip_network("10.152.0.0/16"), [], "10.152.183.0/24")
    assert str(problem) == ("Invalid cidr: 10.152.0.0/16 overlaps the Kubernetes service-cidr "
                            "10.152.183.0/24 the control plane publishes; use a range outside it")
    dual = "10.152.183.0/24,fd00:152::/112"
    assert cidr_conflict(ipaddress.ip_network("10.1.0.0/16"), [], dual) is None
    assert cidr_conflict(ipaddress.ip_network("10.152.183.128/25"), [], dual) is not None


@pytest.mark.parametrize("iface, reason", [
    ("eth0", None),
    ("172.31.254.11", None),
    ("eth1", '"eth1" is down'),
    ("192.168.50.4", '"192.168.50.4" is down'),
    ("eth2", '"eth2" has no IPv4 address'),
    ("eth3", '"eth3" has no IPv4 address'),
    ("lo", '"lo" is the loopback interface'),
    ("127.0.0.1", '"127.0.0.1" is the loopback interface'),
    ("fd00:5::4", '"fd00:5::4" is an IPv6 address'),
    ("eth9", '"eth9" is not an interface of this machine'),
    ("192.0.2.254", '"192.0.2.254" is not an address of this machine'),
])
def test_an_iface_that_cannot_carry_the_overlay_is_refused(machine, iface, reason):
    links, _ = machine
    problem = iface_problem(iface, links)
    if reason is None:
        assert problem is None, str(problem)
    else:
        assert problem is not None and problem.option == "iface"
        assert str(problem).startswith(f"Invalid iface: {reason}"), str(problem)


def test_this_machines_links_are_read():
    links = machine_links.read_links(Machine())
    assert any(link.loopback and link.name == "lo" for link in links)


# -- mtu against flanneld's interface ---------------------------------------------------

def test_an_mtu_the_interface_carries_is_fine():
    link = host_network.Link("eth0", True, False, (ipaddress.ip_interface("10.0.0.2/24"),),
                             mtu=9000)
    assert host_network.mtu_problem(9000, link) is None
    assert host_network.mtu_problem(1400, link) is None


def test_an_mtu_bigger_than_the_interface_is_refused():
    link = host_network.Link("eth0", True, False, (ipaddress.ip_interface("10.0.0.2/24"),),
                             mtu=1500)
    assert str(host_network.mtu_problem(9000, link)) == (
        "Invalid mtu: 9000 is more than the MTU of eth0 (1500), which flanneld sends vxlan "
        "packets on; use at most 1500, or 0 for the interface's")


def test_the_link_of_an_address_or_name_and_its_mtu_from_ip_json():
    links = host_network.links_from([{
        "ifname": "ens3", "flags": ["UP", "LOWER_UP"], "operstate": "UP", "mtu": 1400,
        "addr_info": [{"family": "inet", "local": "10.0.0.2", "prefixlen": 24,
                       "scope": "global"}]}])
    assert host_network.find_link("10.0.0.2", links).mtu == 1400
    assert host_network.find_link("ens3", links).name == "ens3"
    assert host_network.find_link("eth9", links) is None


# -- dual-stack: ipv6-cidr against the machine, and flanneld's interface ------------------

def test_an_ipv6_cidr_over_an_ipv6_network_the_machine_is_on_is_refused(machine):
    links, _ = machine
    found = machine_networks(links, [], RUNNING, version=6)
    problem = cidr_conflict(ipaddress.ip_network("fd00:5::/56"), found, option="ipv6-cidr")
    assert str(problem).startswith("Invalid ipv6-cidr: fd00:5::/56 overlaps fd00:5::/64, the "
                                   "network of eth3 (fd00:5::4/64)"), str(problem)
    assert cidr_conflict(ipaddress.ip_network("fd10:1::/56"), found, option="ipv6-cidr") is None


def test_an_ipv6_cidr_over_the_ipv6_service_network_is_refused():
    problem = cidr_conflict(ipaddress.ip_network("fd00:152::/56"), [],
                            "10.152.183.0/24,fd00:152::/112", option="ipv6-cidr")
    assert str(problem) == ("Invalid ipv6-cidr: fd00:152::/56 overlaps the Kubernetes "
                            "service-cidr fd00:152::/112 the control plane publishes; use a "
                            "range outside it")


def test_ipv6_needs_a_global_ipv6_address_on_flanneld_s_interface(machine):
    """flanneld falls back to the link-local address (or exits without one):
    no other node's subnet reaches it."""
    links, _ = machine
    by_name = {link.name: link for link in links}
    assert host_network.ipv6_problem(by_name["eth3"]) is None
    assert str(host_network.ipv6_problem(by_name["eth0"])) == (
        "Invalid ipv6-cidr: IPv6 needs a global IPv6 address on eth0, which flanneld sends "
        'on, and it has none; give it one, set iface to one that has, or set ipv6-cidr to ""')


def test_on_link_is_within_a_network_of_the_link_s_addresses():
    link = host_network.Link("eth0", True, False, (ipaddress.ip_interface("172.31.254.11/24"),))
    assert host_network.on_link("172.31.254.12", link)
    assert not host_network.on_link("192.168.7.3", link)
    assert not host_network.on_link("not an address", link)


def test_ipv6_only_flanneld_is_not_given_an_ipv4_address_for_its_interface(machine):
    """IPv6-only (cidr ""), flanneld looks an -iface address up among IPv6
    addresses only, and exits ("no interface with given IPv6 found")."""
    links, _ = machine
    problem = iface_problem("172.31.254.11", links, ipv4=False, ipv6=True)
    assert str(problem) == (
        'Invalid iface: "172.31.254.11" is an IPv4 address; IPv6-only (cidr "") flanneld sends '
        "from an IPv6 address: give one of this machine's IPv6 addresses or an interface name")
    assert iface_problem("eth3", links, ipv4=False, ipv6=True) is None
    assert iface_problem("fd00:5::4", links, ipv4=False, ipv6=True) is None


@pytest.mark.parametrize("mtu, options, reason", [
    (1500, {"ipv6-cidr": "fd10:1::/56"}, None),
    (1350, {"ipv6-cidr": "fd10:1::/56"}, None),   # flannel-v6.1 carries 1280
    # pods get what flannel-v6.<VNI> carries: the interface's MTU less 70
    (1349, {"ipv6-cidr": "fd10:1::/56"}, "Invalid ipv6-cidr: IPv6 pods would get 1279 bytes over "
                                         "eth3 (MTU 1349), less than IPv6's 1280: give eth3 an "
                                         "MTU of at least 1350"),
    (1349, {"ipv6-cidr": "fd10:1::/56", "backend": "host-gw"}, None),   # no encapsulation
])
def test_ipv6_pods_must_get_ipv6_s_minimum_mtu_over_flanneld_s_interface(
        machine, mtu, options, reason):
    from charms.flannel.facts.options import parse_options
    links, _ = machine
    link = {link.name: link for link in links}["eth3"]._replace(mtu=mtu)
    problem = host_network.ipv6_mtu_problem(parse_options(options).network_config(), link)
    if reason is None:
        assert problem is None, str(problem)
    else:
        assert str(problem).startswith(reason), str(problem)
