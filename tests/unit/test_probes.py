"""check-network's measurements (adapters/probes.py) against a real kernel:
a vxlan device in a namespace of the test's own with a route, an FDB and a
neighbour entry as flanneld writes them for another node's lease."""
from __future__ import annotations

import pytest

from charms.flannel.adapters import probes
from charms.flannel.facts.diagnosis import Route

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
    assert probes.ping(machine, "10.1.52.0", timeout=0.2, size=1451) is probes.Echo.REFUSED
    assert probes.ping(machine, "10.1.52.0", timeout=0.2, size=1450) is probes.Echo.LOST
    assert probes.missing_commands(machine) == []
