"""The handler tier's in-memory machine (tests/handlers/fake_machine.py)
answers the charm's adapters as a real kernel does: each case sets up the
same node in a network namespace and in the fake, runs the same adapter
calls on both, and compares what the charm reads back."""
from __future__ import annotations

import ipaddress
import json
import shutil
import sys
from pathlib import Path

import pytest

from charms.flannel.adapters import iptables, links, pod_bridge, vxlan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "handlers"))
from fake_machine import FakeMachine, Link  # noqa: E402

RULES = """*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:FLANNEL-POSTRTG - [0:0]
-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG
-A POSTROUTING -s 192.168.9.0/24 -j MASQUERADE
-A FLANNEL-POSTRTG -s 10.1.0.0/16 -d 10.1.0.0/16 -m comment --comment "flanneld masq" -j RETURN
COMMIT
"""


@pytest.fixture
def both(netns_machine):
    """The same node twice: a namespace, and the fake."""
    run = netns_machine.netns
    run(["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"])
    run(["ip", "link", "set", "eth0", "up"])
    run(["ip", "link", "set", "eth0p", "up"])
    run(["ip", "addr", "add", "172.31.254.11/24", "dev", "eth0"])
    run(["ip", "route", "add", "default", "via", "172.31.254.1"])
    run(["ip", "link", "add", "cni0", "type", "bridge"])
    run(["ip", "link", "set", "cni0", "mtu", "1450"])
    for address in ("10.1.29.1/24", "10.1.48.1/24"):
        run(["ip", "addr", "add", address, "dev", "cni0"])
    run(["ip", "link", "add", "veth0", "type", "veth", "peer", "name", "veth0p"])
    run(["ip", "link", "set", "veth0", "master", "cni0"])
    run(["ip", "link", "add", "flannel.1", "mtu", "1450", "type", "vxlan", "id", "1",
         "dstport", "8472"])
    run(["ip", "route", "add", "10.1.7.0/24", "via", "172.31.254.12", "dev", "eth0"])
    fake = FakeMachine("172.31.254.11/24")
    fake.links["eth0p"] = Link("eth0p")
    fake.bridge("10.1.29.1/24", "10.1.48.1/24", ports=1)
    fake.links["veth0p"] = Link("veth0p")
    fake.links["flannel.1"] = Link("flannel.1", kind="vxlan", mtu=1450)
    fake.routes.append({"dst": "10.1.7.0/24", "gateway": "172.31.254.12", "dev": "eth0"})
    return netns_machine, fake


def test_links_read_the_same(both):
    real, fake = both
    seen = [{link.name: (link.addresses, link.mtu, link.loopback)
             for link in links.read_links(machine) if link.name in ("lo", "eth0", "cni0")}
            for machine in (real, fake)]
    assert seen[0] == seen[1]


def test_the_bridge_and_its_ports_read_the_same(both):
    real, fake = both
    assert pod_bridge.read_bridge(real) == pod_bridge.read_bridge(fake)
    assert pod_bridge.ports(real) == pod_bridge.ports(fake) == ["veth0"]
    assert pod_bridge.read_bridge(real, "cni9") is pod_bridge.read_bridge(fake, "cni9") is None
    assert pod_bridge.ports(real, "cni9") is pod_bridge.ports(fake, "cni9") is None


def test_an_address_goes_the_same_and_a_missing_one_is_refused_the_same(both):
    real, fake = both
    gone = ipaddress.ip_interface("10.1.29.1/24")
    for machine in both:
        assert pod_bridge.delete_address(machine, gone) is True
        assert pod_bridge.delete_address(machine, gone) is False
    assert pod_bridge.read_bridge(real) == pod_bridge.read_bridge(fake)
    for machine in both:
        assert pod_bridge.set_mtu(machine, 1400)
    assert pod_bridge.read_bridge(real).mtu == pod_bridge.read_bridge(fake).mtu == 1400


def test_vxlan_devices_are_found_and_deleted_the_same(both):
    for machine in both:
        assert vxlan.delete_vxlan_links(machine, keep={"flannel.1": 1450}) == []
        assert vxlan.delete_vxlan_links(machine, keep={"flannel.1": 1400}) == ["flannel.1"]
        assert vxlan.delete_vxlan_links(machine) == []


def test_routes_read_and_go_the_same(both):
    real, fake = both
    wanted = {(r.get("dst"), r.get("gateway"), r.get("dev")) for r in links.read_routes(real)
              if r.get("dst") in ("default", "10.1.7.0/24")}
    got = {(r.get("dst"), r.get("gateway"), r.get("dev")) for r in links.read_routes(fake)
           if r.get("dst") in ("default", "10.1.7.0/24")}
    assert wanted == got
    assert links.default_route_interface(real) == links.default_route_interface(fake) == "eth0"
    network = [(ipaddress.ip_network("10.1.0.0/16"), 24)]
    for machine in both:
        assert links.remove_pod_network_routes(machine, network) == \
            ["10.1.7.0/24 via 172.31.254.12 dev eth0"]


HERE = """
import json, sys
sys.path.insert(0, {lib!r})
from charms.flannel.adapters import links, vxlan
from charms.flannel.adapters.machine import Machine
machine = Machine()
assert machine.is_here
print(json.dumps([sorted(links.route_destinations(machine)),
                  vxlan.tx_checksum_offload(machine, "flannel.1"),
                  vxlan.tx_checksum_offload(machine, "flannel.9")]))
"""


@pytest.mark.skipif(not shutil.which("ethtool"), reason="needs ethtool")
def test_what_a_hook_asks_the_kernel_itself_reads_as_ip_and_ethtool_say(both):
    """A hook reads its routes from /proc/net/route and checksum offload
    with ethtool's ioctl (no command at every idle hook): the same answers
    as `ip -4 route show` and `ethtool -k`, offload on and off."""
    real, _ = both
    real.netns(["ip", "link", "set", "flannel.1", "up"])
    real.netns(["ip", "route", "add", "10.1.9.0/24", "via", "10.1.9.0", "dev", "flannel.1",
                "onlink"])   # as flanneld routes a vxlan lease
    real.netns(["ip", "route", "add", "10.1.10.7", "via", "172.31.254.13"])

    def asked_here():
        code = HERE.format(lib=str(Path(__file__).resolve().parents[2] / "lib"))
        return json.loads(real.netns([sys.executable, "-c", code]))
    for on in (True, False):
        real.netns(["ethtool", "-K", "flannel.1", vxlan.TX_CHECKSUM_FEATURE, "on" if on else "off"])
        routes, offload, gone = asked_here()
        assert routes == sorted(links.route_destinations(real)) == [
            "10.1.10.7", "10.1.7.0/24", "10.1.9.0/24", "172.31.254.0/24", "default"]
        assert offload is vxlan.tx_checksum_offload(real, "flannel.1") is on
        assert gone is vxlan.tx_checksum_offload(real, "flannel.9") is None


@pytest.mark.skipif(not shutil.which("iptables-restore"), reason="needs iptables")
def test_flanneld_s_rules_go_the_same_and_others_stay(both):
    real, fake = both
    real.run(["iptables-restore"], input=RULES)
    fake.iptables["iptables"] = RULES
    for machine in both:
        assert iptables.remove_iptables_rules(machine, ["iptables"]) == [
            "iptables -t nat -D POSTROUTING -m comment --comment 'flanneld masq' "
            "-j FLANNEL-POSTRTG", "iptables -t nat chain FLANNEL-POSTRTG"]
    rules = [[line for line in machine.output(["iptables-save"]).splitlines()
              if line.startswith("-A")] for machine in both]
    assert rules[0] == rules[1] == ["-A POSTROUTING -s 192.168.9.0/24 -j MASQUERADE"]
