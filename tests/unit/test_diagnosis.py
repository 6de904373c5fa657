"""check-network's conclusions (facts/diagnosis.py): from what was measured
on the way to one node, the first thing wrong, in an operator's words, in
the order a packet meets them; a cause only where the echoes leave chance
no room; a removed node's lease gone, not broken."""
from __future__ import annotations

import pytest

from charms.flannel.facts.diagnosis import (Echoes, Finding, PathProbe, Peer, Route, Verdict,
                                            diagnose, earlier_lease_of_this_node, gateway,
                                            icmp_headers, largest_crossing, summary)
from charms.flannel.facts.options import InvalidOption, parse_options

PEER = Peer(subnet="10.1.52.0/24", public_ip="172.31.254.12", vtep_mac="a6:e9:85:f3:d7:da",
            unit="flannel/1")
GONE_PEER = Peer(subnet="10.1.9.0/24", public_ip="172.31.254.19", vtep_mac="a6:e9:85:f3:d7:db",
                 expires_in=86_000)
OVERLAY = Route(via="10.1.52.0", dev="flannel.1")
DIRECT = Route(via="172.31.254.12", dev="eth0")
ALL = Echoes(4, 4)
NONE = Echoes(16, 0)          # nothing back, after the second round
HEALTHY = PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=ALL, gateway=ALL,
                    full_size=ALL, largest=1450, too_large_refused=True)


def finding(probe: PathProbe, port: int = 0, peer: Peer = PEER) -> Finding:
    return diagnose(peer, probe, pod_mtu=1450, vxlan_link="flannel.1", vxlan_port=port)


def cause(probe: PathProbe, port: int = 0) -> str:
    return finding(probe, port).cause


def black_hole(largest: int, **edge) -> PathProbe:
    return PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=ALL, gateway=ALL,
                     full_size=NONE, largest=largest, edge_confirmed=True, **edge)


# --- echoes: when is "nothing came back" a verdict ------------------------------------------

@pytest.mark.parametrize("echoes, baseline, verdict", [
    (Echoes(4, 1), ALL, Verdict.CROSSED),
    (Echoes(4, 0), ALL, Verdict.UNSURE),            # four lost: chance, until more are sent
    (Echoes(16, 0), ALL, Verdict.LOST),
    (Echoes(16, 0), Echoes(16, 2), Verdict.UNSURE),   # a path losing most of its echoes
    (Echoes(16, 0), Echoes(16, 8), Verdict.LOST),     # half: 16 in a row is no chance
    (Echoes(16, 0), None, Verdict.LOST),            # no baseline: half lost assumed
    (Echoes(8, 0), None, Verdict.UNSURE),
    (Echoes(1, 0, refused=True), ALL, Verdict.REFUSED),
])
def test_nothing_back_is_a_verdict_only_when_chance_cannot_explain_it(
        echoes, baseline, verdict):
    assert echoes.verdict(baseline) is verdict


def test_a_healthy_path_is_ok_through_the_nodes_vxlan_gateway():
    found = finding(HEALTHY)
    assert found.ok and found.gateway == "10.1.52.0" and found.cause == ""
    assert found.as_results() == {"address": "172.31.254.12", "subnet": "10.1.52.0/24",
                                  "gateway": "10.1.52.0", "status": "ok", "unit": "flannel/1",
                                  "largest-packet": "1450",
                                  "echoes": "underlay 4/4, gateway 4/4, full-size 4/4"}


def test_a_direct_route_is_probed_at_the_node_itself():
    """(The one-byte-over check is the vxlan device's: eth0 is larger.)"""
    probe = PathProbe(route=DIRECT, node=ALL, gateway=ALL, pod_path=ALL, pod_source="10.1.66.0",
                      full_size=ALL, largest=1450)
    found = finding(probe)
    assert found.ok and found.gateway == "172.31.254.12" and not found.note


@pytest.mark.parametrize("probe, words", [
    (PathProbe(route=None), "this node has no route to 10.1.52.0/24, flannel/1 "
                            "(172.31.254.12)'s lease"),
    (PathProbe(route=OVERLAY, fdb=False, neighbour=True), "flannel.1 has no FDB entry sending"),
    (PathProbe(route=OVERLAY, fdb=True, neighbour=False), "no neighbour entry for 10.1.52.0"),
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=NONE, gateway=NONE),
     "does not answer on the underlay either"),
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=ALL, gateway=NONE),
     "vxlan traffic to 172.31.254.12 (UDP 8472) is dropped while the node answers"),
    (black_hole(1354, too_large_refused=True),
     "MTU black hole: packets up to 1354 bytes reach flannel/1 (172.31.254.12), larger ones "
     "up to the pods' MTU of 1450 are lost"),
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=ALL, gateway=ALL, full_size=ALL,
               largest=1450, too_large_refused=False),
     "a packet of 1451 bytes (over the pods' MTU of 1450) left for"),
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=ALL, gateway=ALL,
               full_size=Echoes(4, 0, refused=True)),
     "a packet of the pods' MTU (1450 bytes) is refused here: flannel.1's MTU is smaller"),
    # FDB and neighbour entries bridge/ip could not read: unknown, not missing
    (PathProbe(route=OVERLAY, fdb=None, neighbour=None, node=ALL, gateway=NONE),
     "vxlan traffic to 172.31.254.12 (UDP 8472) is dropped"),
])
def test_the_first_broken_thing_is_named(probe, words):
    found = finding(probe)
    assert found.status == "broken" and words in found.cause


# --- lost echoes that chance explains: never a cause ------------------------------------

@pytest.mark.parametrize("probe", [
    # one lost echo of four to the gateway, or at full size: the path answers
    PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=Echoes(4, 3), gateway=Echoes(4, 3),
              full_size=Echoes(4, 3), largest=1450, too_large_refused=True),
    PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=ALL, gateway=ALL,
              full_size=Echoes(4, 1), largest=1450, too_large_refused=True),
])
def test_a_path_that_loses_some_echoes_is_ok_and_says_so(probe):
    found = finding(probe)
    assert found.ok and found.lossy
    assert "lost on the way to flannel/1" in summary([found], [])


@pytest.mark.parametrize("probe, question", [
    # four echoes to the gateway lost, the node's own answered: not yet a verdict
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=ALL, gateway=Echoes(4, 0)),
     "whether 10.1.52.0 answers"),
    # a path that loses most echoes: sixteen lost to the gateway say nothing
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=Echoes(16, 2), gateway=NONE),
     "whether 10.1.52.0 answers"),
    # the node silent in four: maybe down, maybe lossy
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=Echoes(4, 0),
               gateway=Echoes(4, 0)), "whether 10.1.52.0 answers"),
    # full-size echoes lost but the edge not seen twice (a loss in the search)
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=ALL, gateway=ALL, full_size=NONE,
               largest=1354, edge_confirmed=None), "whether packets of the pods' MTU"),
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=ALL, gateway=Echoes(16, 8),
               full_size=NONE), "whether packets of the pods' MTU"),
])
def test_echoes_chance_could_have_lost_name_no_cause(probe, question):
    found = finding(probe)
    assert found.status == "unsure"
    assert found.cause.startswith(f"cannot tell: {question}")
    for named in ("MTU black hole", "dropped", "does not answer on the underlay", "set the"):
        assert named not in found.cause
    assert found.as_results()["echoes"] in found.cause


def test_an_unsure_node_does_not_fail_the_action_but_says_it_cannot_tell():
    unsure = finding(PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=ALL,
                               gateway=Echoes(4, 0)))
    assert summary([unsure], []).startswith("cannot tell for flannel/1 (underlay 4/4, "
                                            "gateway 0/4)")


# --- a removed node's lease --------------------------------------------------------------

@pytest.mark.parametrize("probe", [
    PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=ALL, gateway=NONE),   # VM kept
    PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=NONE, gateway=NONE),  # VM gone
])
def test_a_lease_no_unit_holds_whose_node_does_not_answer_is_gone_not_broken(probe):
    found = finding(probe, peer=GONE_PEER)
    assert found.status == "gone" and not found.ok
    assert "a node removed, whose lease lives on; etcd drops it in 23 h 53 min" in found.cause
    assert found.as_results()["expires-in"] == "86000"
    ok = finding(HEALTHY)
    line = summary([ok, found], [])
    assert line == ("every node reachable: 1 checked; a lease of nodes gone, held by no unit: "
                    "10.1.9.0/24 (etcd drops it in 23 h 53 min)")


@pytest.mark.parametrize("probe, status", [
    (PathProbe(route=None), "broken"),                                  # read from the kernel
    (PathProbe(route=OVERLAY, fdb=False, neighbour=True), "broken"),
    # the gateway answers: not a node gone, whatever else is unsure
    (PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=ALL, gateway=ALL,
               full_size=Echoes(4, 0)), "unsure"),
    (black_hole(1354), "broken"),
])
def test_a_lease_no_unit_holds_is_gone_only_when_its_gateway_never_answers(probe, status):
    assert finding(probe, peer=GONE_PEER).status == status


def test_an_earlier_lease_of_this_node_s_address_is_gone_and_named_so():
    found = earlier_lease_of_this_node(GONE_PEER)
    assert found.status == "gone" and not found.ok
    assert found.cause == ("an earlier lease of this node's own address 172.31.254.19, not "
                           "the one flanneld holds now: etcd drops it in 23 h 53 min")


def test_a_path_that_fell_silent_meanwhile_the_underlay_too_is_unsure():
    """An outage of a second or two across the rounds of a question: the
    baseline asked between them went silent too, so it says nothing of
    vxlan's port."""
    probe = PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=Echoes(16, 8),
                      gateway=NONE, steady=False)
    found = finding(probe)
    assert found.status == "unsure" and "fell silent" in found.cause


def test_a_lease_no_unit_holds_whose_node_answers_is_checked_like_any_other():
    found = finding(HEALTHY, peer=GONE_PEER)
    assert found.ok
    broken = finding(PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=ALL,
                               gateway=NONE), peer=PEER)
    assert broken.status == "broken"


# --- host-gw and direct routing: the pods' addresses on the wire -----------------------------

HOST_GW_PEER = Peer(subnet="10.1.52.0/24", public_ip="172.31.254.12", backend="host-gw",
                    unit="flannel/1")


def test_a_network_dropping_pod_addressed_packets_is_named_with_the_option_that_avoids_it():
    probe = PathProbe(route=DIRECT, node=ALL, gateway=ALL, pod_path=NONE,
                      pod_source="10.1.66.1")
    found = diagnose(HOST_GW_PEER, probe, pod_mtu=1500, vxlan_link=None)
    assert found.status == "broken"
    assert found.cause.startswith("packets between pod addresses (10.1.66.1 to 10.1.52.1) are "
                                  "dropped on the way to flannel/1 (172.31.254.12) while the "
                                  "nodes answer each other")
    assert "set backend=vxlan" in found.cause
    direct = diagnose(PEER, probe, pod_mtu=1450, vxlan_link="flannel.1")
    assert "set direct-routing=false" in direct.cause
    assert parse_options({"backend": "vxlan", "direct-routing": False})


def test_without_a_pod_network_address_here_the_pod_path_is_said_to_be_unchecked():
    probe = PathProbe(route=DIRECT, node=ALL, gateway=ALL, full_size=ALL, largest=1500)
    found = diagnose(HOST_GW_PEER, probe, pod_mtu=1500, vxlan_link=None)
    assert found.ok and "no pod has started here" in found.note


# --- the advice is what the charm accepts ---------------------------------------------------

def test_the_black_hole_says_which_mtu_option_fits_and_the_port_blocked_is_the_configured_one():
    assert "set the mtu option to 1404 or less" in cause(black_hole(1354))
    blocked = PathProbe(route=OVERLAY, fdb=True, neighbour=True, node=ALL, gateway=NONE)
    assert "(UDP 8999)" in cause(blocked, port=8999)
    assert parse_options({"mtu": 1404}).mtu == 1404


@pytest.mark.parametrize("largest", [450, 84, 575])
def test_a_path_too_narrow_for_any_mtu_the_charm_accepts_says_so(largest):
    text = cause(black_hole(largest))
    assert "set the mtu option" not in text
    assert "the path is too narrow for vxlan: the smallest mtu the charm accepts, 626, gives " \
           "pods 576 bytes" in text
    with pytest.raises(InvalidOption):
        parse_options({"mtu": largest + 50})


def test_an_ipv6_path_under_1280_bytes_is_too_narrow_for_ipv6_pods():
    peer = Peer(subnet="fd10:1:0:4f::/64", public_ip="fd00:ac1f:fe::12", unit="flannel/1")
    probe = PathProbe(route=Route(via="fd10:1:0:4f::", dev="flannel-v6.1"), fdb=True,
                      neighbour=True, node=ALL, gateway=ALL, full_size=NONE, largest=1200,
                      edge_confirmed=True)
    found = diagnose(peer, probe, pod_mtu=1430, vxlan_link="flannel-v6.1")
    assert "too narrow for IPv6 pods, which need 1280 bytes" in found.cause


# --- the search and the summary ------------------------------------------------------------

def test_the_search_finds_the_largest_size_that_crosses_and_gives_up_when_unsure():
    asked = []

    def crosses(size):
        asked.append(size)
        return size <= 1354
    assert largest_crossing(crosses, 84, 1449) == 1354
    assert len(asked) <= 11
    assert largest_crossing(lambda size: False, 84, 1449) == 84
    assert largest_crossing(lambda size: None, 84, 1449) is None


def test_the_summary_names_each_broken_node_and_this_nodes_own_problems():
    ok = finding(HEALTHY)
    bad = Finding(Peer("10.1.9.0/24", "172.31.254.13"), "10.1.9.0", "broken", "no route")
    assert summary([ok], []) == "every node reachable: 1 checked"
    assert summary([], []) == "no other node holds a lease: nothing to check"
    assert summary([ok, bad], ["flanneld is not running here"]) == \
        "flanneld is not running here; 172.31.254.13: no route"
    assert Peer("10.1.9.0/24", "172.31.254.13").key == "10-1-9-0-24"


def test_an_ipv6_lease_is_probed_at_its_flannel_v6_gateway_with_ipv6_headers():
    peer = Peer(subnet="fd10:1:0:4f::/64", public_ip="fd00:ac1f:fe::12")
    route = Route(via="fd10:1:0:4f::", dev="flannel-v6.1")
    assert gateway(peer, route, "flannel-v6.1") == "fd10:1:0:4f::"
    assert peer.key == "fd10-1-0-4f-64" and peer.pod_gateway == "fd10:1:0:4f::1"
    assert (icmp_headers("fd10:1:0:4f::"), icmp_headers("10.1.52.0")) == (48, 28)


def test_a_lease_without_a_node_address_is_broken():
    found = diagnose(Peer("10.1.9.0/24", "", unit="flannel/3"), PathProbe(route=None),
                     pod_mtu=1450, vxlan_link="flannel.1")
    assert found.status == "broken" and "names no node address (PublicIP)" in found.cause
