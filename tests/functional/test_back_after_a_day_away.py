"""Flannel added back after a day away, or after the network changed
meanwhile: new pods start on every node, and no status said `active` while
they could not.

`juju remove-relation kubernetes-worker flannel` leaves cni0 with the
gateway of the node's lease while pods use it. When flannel comes back with
another lease (the old one expired: a lease lives 24 h, played here by the
lease keys leaving etcd; the network or IPv6 changed; etcd was rebuilt;
subnet.env was lost with the lease), the bridge plugin refused every new
pod: '"cni0" already has an IP address different from 10.1.48.1/24', while
every unit said `active` (LP #1866869's symptom by another road). Each road
is played on both worker generations, one cluster each, in sequence; after
every batch of hooks a unit that says `active` must start a pod. At the end
removal still leaves each node as flannel found it."""
from __future__ import annotations

import ipaddress
import time

import pytest

from sandbox.cluster import (CNI_RELATION, ETCD_RELATION, FLANNEL, SUBNET_ENV,
                             WORKER_GENERATIONS)
from sandbox.old_flannel import old_charm_dir, old_resource

pytestmark = pytest.mark.functional

MACHINES = ("m1", "m2")
BRIDGE_REFUSAL = "already has an IP address different from"


class StatusWatch:
    """After each batch of hooks, every flannel unit that says `active`
    starts a pod on its machine (released at once): the status told the
    truth, or `lies` says when it did not."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.lies: list[str] = []
        self.actives = 0

    def __call__(self, runs) -> None:
        for unit in self.cluster.flannel_units():
            state, message = self.cluster.workload(unit)
            if state != "active":
                continue
            self.actives += 1
            machine = self.cluster.machine_of(unit)
            pod, error = self.cluster.try_pod(machine)
            if pod is None:
                hooks = ", ".join(f"{r.unit} {r.hook}" for r in runs)
                self.lies.append(f"{unit} said active ({message}) after {hooks}, and a new pod "
                                 f"on {machine} failed: {error}")
            else:
                pod.delete()
                self.cluster.pods.remove(pod)

    def settle(self) -> None:
        self.cluster.settle_watching(self)

    def until_active(self, timeout: float = 180) -> dict[str, str]:
        """Juju's update-status timer (sped up), watched, until every unit is
        active (a status is what the last hook saw: one runs first)."""
        deadline = time.monotonic() + timeout
        while True:
            self.cluster.controller.update_status(FLANNEL)
            self.settle()
            seen = {u: self.cluster.workload(u) for u in self.cluster.flannel_units()}
            if seen and all(state == "active" for state, _ in seen.values()):
                return {u: message for u, (_, message) in seen.items()}
            assert time.monotonic() < deadline, \
                f"not every unit active after {timeout:.0f}s: {seen}\n" \
                + self.cluster.controller.format_status()
            time.sleep(1.0)


def gateways(cluster, machine: str) -> set[str]:
    env = cluster.subnet_env(machine)
    return {env[k] for k in ("FLANNEL_SUBNET", "FLANNEL_IPV6_SUBNET") if k in env}


def delete_pods(cluster) -> None:
    """A drain: every pod deleted (the runtime's CNI DEL)."""
    for pod in list(cluster.pods):
        pod.delete()
        cluster.pods.remove(pod)


def new_pods_reach_each_other(cluster, where: str, *, ipv6: bool = False) -> None:
    pods = {}
    for m in MACHINES:
        pod, error = cluster.try_pod(m)
        assert pod is not None, f"{where}: a new pod on {m} failed: {error}"
        subnet = ipaddress.ip_interface(cluster.subnet_env(m)["FLANNEL_SUBNET"]).network
        assert ipaddress.ip_address(pod.address) in subnet, (where, pod, subnet)
        assert (pod.address6 is not None) is ipv6, (where, pod.result)
        pods[m] = pod
    a, b = pods["m1"], pods["m2"]
    assert a.ping(b.address, count=5) and b.ping(a.address, count=5), \
        f"{where}: new pods {a.address} and {b.address} do not reach each other"
    if ipv6:
        assert a.ping(b.address6, count=5), f"{where}: no ping6 {a.address6} -> {b.address6}"
    cluster.say(f"   {where}: new pods {a.address} <-> {b.address} answer")


def play_away(cluster, where: str, meanwhile, *, drain: bool, ipv6: bool = False) -> None:
    """remove-relation; `meanwhile()` (the time and changes while flannel
    is away); the pods drained or kept; add-relation, watched hook by hook;
    then new pods start and reach the other node."""
    before = {m: gateways(cluster, m) for m in MACHINES}
    for m in MACHINES:
        cluster.start_pod(m)
    with cluster.timings.phase(f"{where}: remove-relation", cluster.say):
        cluster.remove_cni_relation()
    assert cluster.flannel_units() == []
    meanwhile()
    if drain:
        delete_pods(cluster)
    watch = StatusWatch(cluster)
    with cluster.timings.phase(f"{where}: add-relation until active", cluster.say):
        cluster.controller.add_relation(*CNI_RELATION)
        watch.settle()
        watch.until_active()
    check_new_leases(cluster, where, watch, before, ipv6=ipv6)
    delete_pods(cluster)


# The old charm of each worker generation's time (test_refresh_from_the_old_charm):
# f79f180 ran flannel v0.11 on etcd's v2 API beside the 2020 worker.
OLD_CHARM = {"reactive": ("f79f180", {"etcd_v2": True}), "ops": ("a69755c", {})}


def refresh_that_leases_anew(cluster, revision: str, built_charm, resource, work) -> None:
    """The old charm active with a pod on each machine; its leases expire
    and subnet.env goes (a reboot's tmpfs, a tmpfiles clean); `juju
    refresh` to this charm, watched: its flanneld leases anew, and the old
    pods' gateway leaves cni0."""
    with cluster.timings.phase(f"deploy charm-flannel {revision}", cluster.say):
        cluster.controller.deploy(FLANNEL, old_charm_dir(work / "charm", revision),
                                  resources={cluster.resource_name: old_resource(
                                      resource, work / "resource", revision)})
        cluster.controller.add_relation(*ETCD_RELATION)
        cluster.controller.add_relation(*CNI_RELATION)
        cluster.settle()
        cluster.wait_for_flannel(timeout=120)
    before = {m: gateways(cluster, m) for m in MACHINES}
    for m in MACHINES:
        cluster.start_pod(m)
        cluster.machines[m].run(["rm", "-f", SUBNET_ENV])
    cluster.expire_leases()
    watch = StatusWatch(cluster)
    with cluster.timings.phase(f"refresh {revision} -> this charm", cluster.say):
        cluster.controller.upgrade_charm(FLANNEL, built_charm,
                                         resources={cluster.resource_name: resource})
        watch.settle()
        watch.until_active()
    check_new_leases(cluster, "refresh from the old charm", watch, before)
    delete_pods(cluster)


def check_new_leases(cluster, where: str, watch, before, *, ipv6: bool = False) -> None:
    assert watch.lies == [], f"{where}: " + "\n".join(watch.lies)
    assert watch.actives, f"{where}: the watch saw no active unit"
    after = {m: gateways(cluster, m) for m in MACHINES}
    assert all(after[m] != before[m] for m in MACHINES), \
        f"{where}: every node should hold a new lease (the road proves nothing): {after}"
    cluster.say(f"   {where}: leases {before} -> {after}")
    new_pods_reach_each_other(cluster, where, ipv6=ipv6)


@pytest.mark.parametrize("generation", WORKER_GENERATIONS)
def test_new_pods_start_after_a_day_away_whatever_changed(open_cluster, generation,
                                                          built_charm, resource, tmp_path):
    revision, era = OLD_CHARM[generation]
    with open_cluster(f"a day away, {generation} worker", workers=2,
                      worker_generation=generation, **era) as cluster:
        refresh_that_leases_anew(cluster, revision, built_charm, resource, tmp_path)

        play_away(cluster, "the leases expired, pods drained", cluster.expire_leases,
                  drain=True)

        # the network changes while no unit is there: a new lease on every node
        def ipv6_on():
            cluster.controller.config(FLANNEL, **{"ipv6-cidr": "fd10:1::/56"})
            cluster.settle()
        play_away(cluster, "ipv6-cidr set, pods kept", ipv6_on, drain=False, ipv6=True)

        # the old gateways are in no network etcd holds now: host-local's
        # table of flannel's network shows they were flannel's
        def rebuilt_and_moved():
            cluster.rebuild_etcd_empty()
            cluster.controller.config(FLANNEL, cidr="10.7.0.0/16", **{"ipv6-cidr": ""})
            cluster.settle()
        play_away(cluster, "etcd rebuilt, cidr and IPv6 changed, pods drained",
                  rebuilt_and_moved, drain=True)

        # in place: subnet.env lost and the leases gone while flannel runs
        # (flanneld v0.27.4 exits when its lease is deleted; systemd starts
        # it again, and it leases anew)
        before = {m: gateways(cluster, m) for m in MACHINES}
        for m in MACHINES:
            cluster.start_pod(m)
            cluster.machines[m].run(["rm", "-f", SUBNET_ENV])
        cluster.expire_leases()
        watch = StatusWatch(cluster)
        with cluster.timings.phase("in place: subnet.env and leases lost", cluster.say):
            watch.until_active()
        check_new_leases(cluster, "in place", watch, before)
        delete_pods(cluster)

        cluster.remove_cni_relation()
        for m in MACHINES:
            assert cluster.flannel_leftovers(m, pods_stay=False) == [], m
