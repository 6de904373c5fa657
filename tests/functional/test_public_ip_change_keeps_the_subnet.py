"""A node keeps its subnet when its public IP changes.

flanneld keys its lease by its public IP. Left to itself, after `iface`
changes to a machine's second interface (or the `cni` binding moves to it),
flanneld finds no lease of its own and leases a new subnet, while its old
lease stays for 24 h; `cni0` keeps the old subnet's gateway, and the bridge
plugin refuses every new pod on the node until a reboot (the LP #1932551
class). So the charm gives the old lease back while flanneld is stopped, and
flanneld takes the subnet its subnet.env names again: running pods keep
their addresses and their traffic, new pods start at once.
"""
from __future__ import annotations

import ipaddress
import json

import pytest
from functional_kit import deploy_and_wait

from sandbox.waiting import wait_for

pytestmark = pytest.mark.functional

SUBNETS = "/coreos.com/network/subnets/"


def lease_ips(cluster) -> dict[str, str]:
    """subnet -> the PublicIP its lease in etcd names."""
    return {key.rsplit("/", 1)[1].replace("-", "/"): json.loads(value).get("PublicIP")
            for key, value in cluster.etcd_values(SUBNETS).items()}


def moved_to(cluster, subnets: dict, addresses: dict) -> None:
    """Wait for each machine's flanneld to hold its subnet under its new
    address (its lease in etcd), then check that the machine's subnet.env
    says the same subnet, and that no node holds a second lease."""
    def moved():
        held = lease_ips(cluster)
        return all(held.get(subnets[m]) == addresses[m] for m in subnets)
    assert wait_for(moved, timeout=60), f"leases {lease_ips(cluster)}, wanted {addresses}"
    assert sorted(lease_ips(cluster).values()) == sorted(addresses.values()), lease_ips(cluster)
    for m, subnet in subnets.items():
        env = cluster.subnet_env(m).get("FLANNEL_SUBNET")
        assert str(ipaddress.ip_interface(env).network) == subnet, f"{m}: {env}"


def traffic_works(cluster, old: dict) -> None:
    """Running pods keep their traffic both ways; a new pod on each machine
    gets an address of the machine's subnet and reaches the other's pod."""
    assert old["m1"].ping(old["m2"].address), "the running pods lost their traffic"
    assert old["m2"].ping(old["m1"].address), "the running pods lost their traffic"
    for m, other in (("m1", "m2"), ("m2", "m1")):
        new, error = cluster.try_pod(m)
        assert new is not None, f"a new pod on {m} got no address: {error}"
        assert ipaddress.ip_address(new.address) in ipaddress.ip_network(
            cluster.subnet_env(m)["FLANNEL_SUBNET"], strict=False)
        assert new.ping(old[other].address), f"a new pod on {m} cannot reach {other}'s pod"


def test_a_node_keeps_its_subnet_through_an_iface_change_and_a_binding_that_moves(
        open_cluster):
    with open_cluster("public IP change", workers=2) as cluster:
        deploy_and_wait(cluster)
        machines = ("m1", "m2")
        subnets = {m: str(ipaddress.ip_interface(cluster.subnet_env(m)["FLANNEL_SUBNET"]).network)
                   for m in machines}
        first = {m: cluster.machines[m].address for m in machines}
        assert {subnets[m]: first[m] for m in machines} == lease_ips(cluster)
        second = {m: cluster.network.add_interface(m, "eth1") for m in machines}
        old = {m: cluster.start_pod(m) for m in machines}
        assert old["m1"].ping(old["m2"].address)

        with cluster.timings.phase("juju config flannel iface=eth1", cluster.say):
            cluster.configure(iface="eth1")
            cluster.wait_for_flannel(timeout=120)
        moved_to(cluster, subnets, second)
        traffic_works(cluster, old)

        with cluster.timings.phase("juju config flannel iface=''", cluster.say):
            cluster.configure(iface="")
            cluster.wait_for_flannel(timeout=120)
        moved_to(cluster, subnets, first)
        traffic_works(cluster, old)

        with cluster.timings.phase("m1's cni binding moves to eth1", cluster.say):
            cluster.controller.add_bind_address(
                cluster.machine_ids["m1"], "eth1", second["m1"],
                cidr=str(cluster.network.subnet), first=True)
            # Juju runs config-changed when a unit's addresses change
            cluster.controller.fire(cluster.unit_on("m1"), "config-changed")
            cluster.settle()
            cluster.wait_for_flannel(timeout=120)
        unit_file = cluster.machines["m1"].read_file("/lib/systemd/system/flannel.service")
        assert b" -iface=eth1 " in unit_file, unit_file
        moved_to(cluster, subnets, {"m1": second["m1"], "m2": first["m2"]})
        traffic_works(cluster, old)
