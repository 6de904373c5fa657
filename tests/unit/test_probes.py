"""check-network's measurements (adapters/probes.py, steps/diagnosis.py
probe_path) against a real kernel: a vxlan device in a namespace of the
test's own with a route, an FDB and a neighbour entry as flanneld writes
them for another node's lease; two namespaces wired as host-gw wires two
nodes, with a network that loses echoes or drops pods' addresses."""
from __future__ import annotations

import pytest
import stepkit
from unitkit import open_netns

from charms.flannel.adapters import probes
from charms.flannel.facts.diagnosis import Echoes, Finding, Peer, Route, Verdict, diagnose
from charms.flannel.steps import diagnosis

MAC = "a6:e9:85:f3:d7:da"


@pytest.fixture
def lease_programmed(netns_machine):
    """flannel.1 (MTU 1450) holding 10.1.66.0/32, and for a node at
    192.0.2.12 with lease 10.1.52.0/24 what flanneld programs."""
    run = netns_machine.run
    run(["ip", "link", "add", "flannel.1", "type", "vxlan", "id", "1", "dstport", "8472",
         "nolearning"])
    run(["ip", "link", "set", "flannel.1", "mtu", "1450", "up"])
    run(["ip", "addr", "add", "10.1.66.0/32", "dev", "flannel.1"])
    run(["ip", "route", "add", "10.1.52.0/24", "via", "10.1.52.0", "dev", "flannel.1", "onlink"])
    run(["ip", "neigh", "add", "10.1.52.0", "lladdr", MAC, "dev", "flannel.1", "nud",
         "permanent"])
    run(["bridge", "fdb", "append", MAC, "dev", "flannel.1", "dst", "192.0.2.12", "self",
         "permanent"])
    return netns_machine


def test_the_route_fdb_and_neighbour_flanneld_writes_are_found(lease_programmed):
    machine = lease_programmed
    assert probes.route_to(machine, "10.1.52.0/24") == Route(via="10.1.52.0", dev="flannel.1")
    assert probes.route_to(machine, "10.1.53.0/24") is None
    assert probes.fdb_sends(machine, "flannel.1", MAC.upper(), "192.0.2.12") is True
    assert probes.fdb_sends(machine, "flannel.1", MAC, "192.0.2.13") is False
    assert probes.neighbour_has(machine, "flannel.1", "10.1.52.0", MAC) is True
    assert probes.neighbour_has(machine, "flannel.1", "10.1.53.0", MAC) is False
    # a device that is not there: the commands fail, the answer is unknown
    assert probes.fdb_sends(machine, "flannel.9", MAC, "192.0.2.12") is None


def test_a_packet_over_the_devices_mtu_is_refused_here_and_one_within_is_lost(lease_programmed):
    machine = lease_programmed
    assert probes.ping(machine, "10.1.52.0", timeout=0.2, size=1451, count=2) == \
        Echoes(2, 0, refused=True)
    assert probes.ping(machine, "10.1.52.0", timeout=0.2, size=1450, count=2) == Echoes(2, 0)
    assert probes.missing_commands(machine) == []


@pytest.fixture
def two_nodes(netns_machine):
    """The test's namespace (node A, 192.0.2.1, pods 10.1.1.0/24) wired to a
    second one (node B, 192.0.2.2, pods 10.1.2.0/24) as host-gw wires them:
    each routes the other's pod subnet via the other's address. A holds its
    pods' gateway; B forwards, with no address of its pods yet."""
    with open_netns() as other:
        holder = other.path.split("/")[2]
        run = netns_machine.run
        run(["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns",
             holder])
        run(["ip", "addr", "add", "192.0.2.1/24", "dev", "eth0"])
        run(["ip", "link", "set", "eth0", "up"])
        run(["ip", "link", "add", "cni0", "type", "bridge"])
        run(["ip", "addr", "add", "10.1.1.1/24", "dev", "cni0"])
        run(["ip", "link", "set", "cni0", "up"])
        run(["ip", "route", "add", "10.1.2.0/24", "via", "192.0.2.2"])
        other(["ip", "addr", "add", "192.0.2.2/24", "dev", "eth0"])
        other(["ip", "link", "set", "eth0", "up"])
        other(["ip", "route", "add", "10.1.1.0/24", "via", "192.0.2.1"])
        other(["ip", "route", "add", "default", "via", "192.0.2.99"])
        other(["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        netns_machine.other = other
        yield netns_machine


def test_echoes_are_counted_and_a_share_dropped_is_a_share_lost(two_nodes):
    assert probes.ping(two_nodes, "192.0.2.2", timeout=0.5, count=4) == Echoes(4, 4)
    # every other echo B receives dropped
    two_nodes.other(["iptables", "-I", "INPUT", "-p", "icmp", "-m", "statistic", "--mode", "nth",
                     "--every", "2", "--packet", "0", "-j", "DROP"])
    assert probes.ping(two_nodes, "192.0.2.2", timeout=0.5, count=4) == Echoes(4, 2)


def test_from_a_pod_address_the_peer_answers_with_or_without_its_pods_bridge(two_nodes):
    """TTL 1: B answers for its pods' gateway when it holds it, else with a
    TTL exceeded from its own address; both come back to A's pod address."""
    how = dict(timeout=0.5, count=4, source="10.1.1.1", ttl=1,
               answering=("10.1.2.1", "192.0.2.2"))
    assert probes.ping(two_nodes, "10.1.2.1", **how) == Echoes(4, 4)
    # (without `answering`, errors are no answers)
    assert probes.ping(two_nodes, "10.1.2.1", timeout=0.5, count=2, source="10.1.1.1",
                       ttl=1) == Echoes(2, 0)
    two_nodes.other(["ip", "addr", "add", "10.1.2.1/24", "dev", "lo"])
    assert probes.ping(two_nodes, "10.1.2.1", **how) == Echoes(4, 4)
    # a network that drops packets of pod addresses: nothing back, while the nodes answer
    two_nodes.other(["iptables", "-t", "raw", "-I", "PREROUTING", "-s", "10.1.0.0/16", "-j",
                     "DROP"])
    assert probes.ping(two_nodes, "10.1.2.1", **how) == Echoes(4, 0)
    assert probes.ping(two_nodes, "192.0.2.2", timeout=0.5, count=4) == Echoes(4, 4)


def test_a_firewall_s_refusal_is_no_answer_and_a_ping_that_never_ran_is_no_evidence(two_nodes):
    """An ICMP error counts only when it says the packet arrived (TTL
    exceeded, no route on): a REJECT's "Packet filtered" is the very drop
    the pods' path is probed for. A ping that could not send sent nothing."""
    two_nodes.other(["ip", "addr", "add", "10.1.2.1/24", "dev", "lo"])
    two_nodes.other(["iptables", "-I", "INPUT", "-s", "10.1.0.0/16", "-j", "REJECT",
                     "--reject-with", "icmp-admin-prohibited"])
    assert probes.ping(two_nodes, "10.1.2.1", timeout=0.5, count=4, source="10.1.1.1", ttl=1,
                       answering=("10.1.2.1", "192.0.2.2")) == Echoes(4, 0)
    unsent = probes.ping(two_nodes, "10.1.2.1", timeout=0.5, count=4, source="10.9.9.9")
    assert unsent == Echoes() and unsent.verdict(Echoes(4, 4)) is Verdict.UNSURE


# --- one peer's path, measured and judged (steps/diagnosis.py probe_path) ----------------------

HOST_GW_PEER = Peer(subnet="10.1.2.0/24", public_ip="192.0.2.2", backend="host-gw",
                    unit="flannel/1")


def judged(ctx) -> Finding:
    probe = diagnosis.probe_path(ctx, HOST_GW_PEER, None, 1500, 0.3, pod_source="10.1.1.1")
    return diagnose(HOST_GW_PEER, probe, pod_mtu=1500, vxlan_link=None)


def test_a_path_losing_every_other_echo_is_ok_not_a_black_hole(two_nodes, tmp_path):
    ctx = stepkit.context(tmp_path, machine=two_nodes)
    assert judged(ctx).ok
    two_nodes.other(["iptables", "-I", "INPUT", "-p", "icmp", "-m", "statistic", "--mode", "nth",
                     "--every", "2", "--packet", "0", "-j", "DROP"])
    found = judged(ctx)
    assert found.ok and found.lossy, found
    assert found.largest == 1500


def test_a_host_gw_path_dropping_pod_addressed_packets_is_caught(two_nodes, tmp_path):
    ctx = stepkit.context(tmp_path, machine=two_nodes)
    two_nodes.other(["iptables", "-t", "raw", "-I", "PREROUTING", "-s", "10.1.0.0/16", "-j",
                     "DROP"])
    found = judged(ctx)
    assert found.status == "broken", found
    assert found.cause.startswith("packets between pod addresses (10.1.1.1 to 10.1.2.1) are "
                                  "dropped on the way to flannel/1 (192.0.2.2)")
    assert "pod-path 0/16" in found.evidence
