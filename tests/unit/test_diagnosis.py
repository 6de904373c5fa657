"""check-network's conclusions (facts/diagnosis.py): from what was measured
on the way to one node, the first thing wrong, in an operator's words, in
the order a packet meets them."""
from __future__ import annotations

import pytest

from charms.flannel.facts.diagnosis import (Finding, PathProbe, Peer, Route, diagnose, gateway,
                                            icmp_headers, largest_crossing, summary)

PEER = Peer(subnet="10.1.52.0/24", public_ip="172.31.254.12", vtep_mac="a6:e9:85:f3:d7:da",
            unit="flannel/1")
OVERLAY = Route(via="10.1.52.0", dev="flannel.1")
DIRECT = Route(via="172.31.254.12", dev="eth0")
HEALTHY = PathProbe(route=OVERLAY, fdb=True, neighbour=True, node_answers=True,
                    gateway_answers=True, largest=1450, too_large_refused=True)


def cause(probe: PathProbe, port: int = 0) -> str:
    return diagnose(PEER, probe, pod_mtu=1450, vxlan_link="flannel.1", vxlan_port=port).cause


def test_a_healthy_path_is_ok_through_the_nodes_vxlan_gateway():
    found = diagnose(PEER, HEALTHY, pod_mtu=1450, vxlan_link="flannel.1")
    assert found.ok and found.gateway == "10.1.52.0" and found.cause == ""
    assert found.as_results() == {"address": "172.31.254.12", "subnet": "10.1.52.0/24",
                                  "gateway": "10.1.52.0", "status": "ok", "unit": "flannel/1",
                                  "largest-packet": "1450"}


def test_a_direct_route_is_probed_at_the_node_itself():
    """(The one-byte-over check is the vxlan device's: eth0 is larger.)"""
    probe = PathProbe(route=DIRECT, node_answers=True, gateway_answers=True, largest=1450)
    found = diagnose(PEER, probe, pod_mtu=1450, vxlan_link="flannel.1")
    assert found.ok and found.gateway == "172.31.254.12"


@pytest.mark.parametrize("probe, words", [
    (PathProbe(route=None), "this node has no route to 10.1.52.0/24, flannel/1 "
                            "(172.31.254.12)'s lease"),
    (PathProbe(route=OVERLAY, fdb=False, neighbour=True), "flannel.1 has no FDB entry sending"),
    (PathProbe(route=OVERLAY, fdb=True, neighbour=False), "no neighbour entry for 10.1.52.0"),
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True),
     "does not answer on the underlay either"),
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True, node_answers=True),
     "vxlan traffic to 172.31.254.12 (UDP 8472) is dropped while the node answers"),
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True, node_answers=True, gateway_answers=True,
               largest=1354, too_large_refused=True),
     "MTU black hole: packets up to 1354 bytes reach flannel/1 (172.31.254.12), larger ones "
     "up to the pods' MTU of 1450 are lost"),
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True, node_answers=True, gateway_answers=True,
               largest=1450, too_large_refused=False),
     "a packet of 1451 bytes (over the pods' MTU of 1450) left for"),
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True, node_answers=True, gateway_answers=True,
               full_size_refused=True),
     "a packet of the pods' MTU (1450 bytes) is refused here: flannel.1's MTU is smaller"),
    # FDB and neighbour entries bridge/ip could not read: unknown, not missing
    (PathProbe(route=OVERLAY, fdb=None, neighbour=None, node_answers=True),
     "vxlan traffic to 172.31.254.12 (UDP 8472) is dropped"),
])
def test_the_first_broken_thing_is_named(probe, words):
    assert words in cause(probe)


def test_the_black_hole_says_which_mtu_option_fits_and_the_port_blocked_is_the_configured_one():
    probe = PathProbe(route=OVERLAY, fdb=True, neighbour=True, node_answers=True,
                      gateway_answers=True, largest=1354, too_large_refused=True)
    assert "set the mtu option to 1404 or less" in cause(probe)
    blocked = PathProbe(route=OVERLAY, fdb=True, neighbour=True, node_answers=True)
    assert "(UDP 8999)" in cause(blocked, port=8999)


def test_the_search_finds_the_largest_size_that_crosses():
    asked = []

    def crosses(size):
        asked.append(size)
        return size <= 1354
    assert largest_crossing(crosses, 84, 1449) == 1354
    assert len(asked) <= 11
    assert largest_crossing(lambda size: False, 84, 1449) == 84


def test_the_summary_names_each_broken_node_and_this_nodes_own_problems():
    ok = Finding(PEER, "10.1.52.0", True)
    bad = Finding(Peer("10.1.9.0/24", "172.31.254.13"), "10.1.9.0", False, "no route")
    assert summary([ok], []) == "every node reachable: 1 checked"
    assert summary([], []) == "no other node holds a lease: nothing to check"
    assert summary([ok, bad], ["flanneld is not running here"]) == \
        "flanneld is not running here; 172.31.254.13: no route"
    assert Peer("10.1.9.0/24", "172.31.254.13").key == "10-1-9-0-24"


def test_an_ipv6_lease_is_probed_at_its_flannel_v6_gateway_with_ipv6_headers():
    peer = Peer(subnet="fd10:1:0:4f::/64", public_ip="fd00:ac1f:fe::12")
    route = Route(via="fd10:1:0:4f::", dev="flannel-v6.1")
    assert gateway(peer, route, "flannel-v6.1") == "fd10:1:0:4f::"
    assert peer.key == "fd10-1-0-4f-64"
    assert (icmp_headers("fd10:1:0:4f::"), icmp_headers("10.1.52.0")) == (48, 28)


def test_a_lease_without_a_node_address_is_broken():
    found = diagnose(Peer("10.1.9.0/24", ""), PathProbe(route=None), pod_mtu=1450,
                     vxlan_link="flannel.1")
    assert not found.ok and "names no node address (PublicIP)" in found.cause
