"""Refresh in place from the previous flannel charm, for both revisions
operators run, each on the cluster of its time (docs/how-to/upgrade.md):

- f79f180, the bug report's cluster: flannel **v0.11.0** (the real one,
  sandbox.flanneld_v011) on etcd's **v2** API, its unit file with
  --ip-masq, the reactive kubernetes-worker of 2020 (its cni-plugins
  tarball with a flannel of its own, extracted with owners kept;
  is_master/kubeconfig_path; the 05-default link).
- a69755c, its latest revision: flannel on etcd v3, beside the ops
  kubernetes-worker.

Per revision, one sandbox with two workers plays, in order (module fixture
per revision, tests in file order, each asserting one part): the old charm
deployed and active with a pod on each machine (on m2 the subnet.env gone,
as after a tmpfiles clean or an operator's hand) -> `juju refresh` to the
built charm while a pod on m1 pings a pod on m2, with m2's agent held back
until m1 has moved (a refresh reaches the units one by one) -> the rest of
the refresh -> new pods -> update-status -> remove/add of the cni
relation -> (f79f180) the worker's own upgrade re-extracting its flannel,
then a refresh and a remove. (A refresh between two builds of this charm is
test_two_machines_everyday_operations' upgrade-charm test.)
"""
from __future__ import annotations

import json
import os
import stat

import pytest
from functional_kit import (all_plugin_bytes, allocation_tables, member, plugin_differences,
                            pods_everywhere)

from sandbox.cluster import CNI_RELATION, ETCD_RELATION, FLANNEL, SUBNET_ENV, WORKER
from sandbox.juju.cni_plugins import MEMBER_GID, MEMBER_UID
from sandbox.old_flannel import old_charm_dir, old_resource

# the module's tests share its cluster(s): one pytest-xdist worker runs them all
pytestmark = [pytest.mark.functional, pytest.mark.xdist_group("refresh_from_the_old_charm")]

MACHINES = ("m1", "m2")
NETWORK = "CDK-flannel-network"
PREFIX = "/coreos.com/network"
SUBNETS = f"{PREFIX}/subnets/"
OLD_FLAGS = ("flannel.binaries.installed", "flannel.etcd.credentials.installed",
             "flannel.service.installed", "flannel.service.started",
             "flannel.network.configured", "flannel.cni.configured", "flannel.cni.available",
             "flannel.version.set")
OLD_ONLY_FLAGS = ("flannel.binaries.installed", "flannel.etcd.credentials.installed",
                  "flannel.service.installed", "flannel.service.started",
                  "flannel.cni.available", "flannel.version.set")
# Everything flannel, old or new, may leave on a machine.
FLANNEL_PATHS = ("/usr/local/bin/flanneld", "/usr/local/bin/etcdctl",
                 "/lib/systemd/system/flannel.service", "/etc/cni/net.d/10-flannel.conflist",
                 "/etc/cni/net.d/10-flannel.conf", "/etc/ssl/flannel/client-ca.pem",
                 "/etc/ssl/flannel/client-cert.pem", "/etc/ssl/flannel/client-key.pem",
                 "/etc/ssl/flannel", "/run/flannel/subnet.env")
# flannel v0.11's --ip-masq rule (network/iptables.go), as iptables-save shows it
V011_MASQUERADE = "-A POSTROUTING -s 10.1.0.0/16 ! -d 224.0.0.0/4 -j MASQUERADE"

# an etcdctl the operator installed after the old charm: never the old charm's
OPERATORS_ETCDCTL = b"#!/bin/sh\necho 'etcdctl 3.5.17, installed by the operator'\n"


def mode(cluster, machine, path):
    return stat.S_IMODE(cluster.machines[machine].path_on_host(path).stat().st_mode)


def owner(cluster, machine, path):
    info = cluster.machines[machine].path_on_host(path).stat()
    return info.st_uid, info.st_gid


def exists(cluster, machine, path):
    return os.path.lexists(cluster.machines[machine].path_on_host(path))


def unit_flags(cluster, unit):
    """The reactive flags in the unit's state DB (read as charms.reactive does)."""
    kv = cluster.unit_kv(unit)
    assert kv, f"{unit} has no state DB"
    return {key[len("reactive.states."):] for key in kv if key.startswith("reactive.states.")}


def v3_leases(cluster):
    """subnet ("10.1.52.0-24") -> the PublicIP holding it, in etcd's v3 keyspace."""
    return {k[len(SUBNETS):]: json.loads(v)["PublicIP"]
            for k, v in cluster.etcd_values(SUBNETS).items()}


def v2_leases(cluster):
    """The same in etcd's v2 keyspace (flannel v0.11's)."""
    return {k[len(SUBNETS):]: json.loads(value)["PublicIP"]
            for k, (value, _) in cluster.etcd_v2_values(SUBNETS).items()}


def old_leases(cluster):
    """The leases the old charm's flanneld holds, where its flannel keeps them."""
    return v2_leases(cluster) if cluster.revision == "f79f180" else v3_leases(cluster)


def v011_rules(cluster, machine):
    """flannel v0.11's --ip-masq and forward rules on `machine`."""
    saved = cluster.machines[machine].run(["iptables-save"]).stdout
    return [line for line in saved.splitlines() if line.startswith("-A ") and (
        "10.1.0.0/16" in line and "FLANNEL" not in line and "CNI-" not in line)]


def flanneld_command(cluster, machine):
    return (cluster.machines[machine].command_lines("flanneld") or [[]])[0]


def flannel_leftovers(cluster, machine):
    """Every trace of flannel, old or new, on `machine`."""
    left = [p for p in FLANNEL_PATHS if exists(cluster, machine, p)]
    left += [f"device {name}" for name in cluster.vxlan_links(machine)]
    left += [f"flanneld pid {pid}" for pid in cluster.flanneld_pids(machine)]
    return left


@pytest.fixture(scope="module", params=["f79f180", "a69755c"])
def refresh(request, open_cluster, built_charm, resource, tmp_path_factory):
    """The old charm at `revision` on the cluster of its time, active with
    pods, then refreshed to the built charm while pinging, m1 first; what
    was seen is kept on the cluster."""
    revision = request.param
    work = tmp_path_factory.mktemp(f"old-{revision}")
    era = ({"etcd_v2": True, "worker_generation": "reactive"} if revision == "f79f180"
           else {"worker_generation": "ops"})
    with open_cluster(f"refresh from {revision}", workers=2, **era) as cluster:
        cluster.revision = revision
        cluster.resource = resource
        cluster.worker_plugins_before = all_plugin_bytes(cluster)
        cluster.flannel_plugin_before = {
            m: cluster.machines[m].read_file("/opt/cni/bin/flannel") for m in MACHINES}
        old = old_resource(resource, work / "resource", revision)
        with cluster.timings.phase(f"deploy charm-flannel {revision}", cluster.say):
            cluster.controller.deploy(FLANNEL, old_charm_dir(work / "charm", revision),
                                      resources={cluster.resource_name: old})
            cluster.controller.add_relation(*ETCD_RELATION)
            cluster.controller.add_relation(*CNI_RELATION)
            cluster.settle()
            cluster.wait_for_flannel(timeout=120)
        cluster.say(cluster.status_table())
        cluster.old_pods = {m: cluster.start_pod(m) for m in MACHINES}
        cluster.old_flags = {m: unit_flags(cluster, cluster.unit_on(m)) for m in MACHINES}
        cluster.old_modes = {m: {p: mode(cluster, m, p) for p in
                                 ("/etc/ssl/flannel/client-key.pem", "/etc/ssl/flannel",
                                  "/lib/systemd/system/flannel.service")} for m in MACHINES}
        cluster.old_commands = {m: flanneld_command(cluster, m) for m in MACHINES}
        cluster.old_v011_rules = {m: v011_rules(cluster, m) for m in MACHINES}
        cluster.v3_leases_before = v3_leases(cluster)
        # on m2 the operator has since installed an etcdctl of their own
        cluster.machines["m2"].write_file("/usr/local/bin/etcdctl", OPERATORS_ETCDCTL, 0o755)
        cluster.leases_before = old_leases(cluster)
        cluster.subnets_before = {m: cluster.subnet_env(m)["FLANNEL_SUBNET"] for m in MACHINES}
        # m2's subnet.env goes (a tmpfiles clean, an operator): flanneld
        # v0.27.4 then has only etcd to find its subnet in
        cluster.machines["m2"].run(["rm", SUBNET_ENV])
        cluster.pids_before = {m: cluster.flanneld_pids(m) for m in MACHINES}
        cluster.hooks_before = len(cluster.controller.hook_log)
        cluster.tools_before = {u: len(cluster.controller.tool_calls(u))
                                for u in cluster.flannel_units()}
        a, b = cluster.old_pods["m1"], cluster.old_pods["m2"]
        assert a.ping(b.address), "the old charm's pods cannot reach each other"
        m2_unit = cluster.unit_on("m2")
        with cluster.timings.phase(f"refresh {revision} -> this charm", cluster.say), \
                cluster.pinging(a, b.address, interval=0.2) as during:
            cluster.controller.upgrade_charm(FLANNEL, built_charm,
                                             resources={cluster.resource_name: resource})
            cluster.controller.settle(hold=lambda unit: unit == m2_unit)
            # m1's update-status, m2 still on the old flanneld: nothing it
            # routes by may go
            cluster.controller.fire(cluster.unit_on("m1"), "update-status")
            cluster.controller.settle(hold=lambda unit: unit == m2_unit)
            cluster.halfway = {
                "commands": {m: flanneld_command(cluster, m) for m in MACHINES},
                "m1 -> m2": a.ping(b.address), "m2 -> m1": b.ping(a.address),
                "v2 keys": cluster.etcd_v2_values(PREFIX) if revision == "f79f180" else {},
                "v3 leases": v3_leases(cluster),
                "m1 routes": {r.get("dst") for r in cluster.machines["m1"].ip_json(
                    "-4", "route", "show")}}
            new_m1, error = cluster.try_pod("m1")
            assert new_m1 is not None, f"a new pod on m1 got no address: {error}"
            cluster.halfway["new m1 pod -> m2"] = new_m1.ping(b.address)
            cluster.settle()   # m2's agent: one settle, no update-status helps
        cluster.say(f"   ping m1 -> m2 during the refresh: {during}, lost {during.lost} "
                    f"({during.lost * 0.2:.1f}s of echoes at 0.2 s intervals)")
        cluster.during = during
        cluster.say(cluster.status_table())
        yield cluster


def test_the_stand_in_leaves_the_old_charms_end_state(refresh):
    """The sandbox's charm-flannel (checked before the refresh): its flags in
    the unit's state DB, its flanneld under its unit file with --ip-masq and
    a lease per machine where that flannel keeps them (etcd v2 for v0.11),
    the key world-readable as interface-etcd wrote it."""
    for m in MACHINES:
        assert set(OLD_FLAGS) <= refresh.old_flags[m], refresh.old_flags[m]
        assert refresh.old_modes[m] == {"/etc/ssl/flannel/client-key.pem": 0o644,
                                        "/etc/ssl/flannel": 0o755,
                                        "/lib/systemd/system/flannel.service": 0o444}
        assert refresh.pids_before[m], f"no old flanneld on {m}"
        assert "--ip-masq" in refresh.old_commands[m]
    assert sorted(refresh.leases_before.values()) == sorted(
        refresh.machines[m].address for m in MACHINES)
    if refresh.revision == "f79f180":
        assert refresh.v3_leases_before == {}, "flannel v0.11 wrote to etcd v3"
        for m in MACHINES:
            assert V011_MASQUERADE + " --random-fully" in refresh.old_v011_rules[m], \
                refresh.old_v011_rules[m]


def test_a_node_refreshed_first_keeps_reaching_the_nodes_not_yet_refreshed(refresh):
    """Halfway through the refresh, m1 runs flanneld v0.27.4 (etcd v3) and m2
    still the old one: pods reach each other both ways, and a new pod on m1
    reaches m2's. The routes alone would pass even without m2's lease in v3
    (flanneld v0.27 keeps the ones v0.11 made through the flannel.1 it
    reuses); for f79f180 the lease is what matters, in v3, where flanneld
    >= 0.18 (m1's, and any node added later) looks for it. The charm carries
    flannel v0.11's leases into v3 (v2_network.carry_leases); a charm that
    did not failed this test with m2's lease missing from "v3 leases"."""
    half = refresh.halfway
    refresh.say(f"   halfway: {half}")
    assert half["v3 leases"] == refresh.leases_before, "etcd v3 lacks a node's lease"
    assert "-ip-masq" in half["commands"]["m1"] and half["commands"]["m1"] != \
        refresh.old_commands["m1"], "m1 still runs the old flanneld"
    assert half["commands"]["m2"] == refresh.old_commands["m2"], "m2 was refreshed too soon"
    m2_subnet = refresh.subnets_before["m2"].rsplit(".", 1)[0] + ".0/24"
    assert m2_subnet in half["m1 routes"], f"m1 has no route to m2's {m2_subnet}"
    assert half["m1 -> m2"] and half["m2 -> m1"], half
    assert half["new m1 pod -> m2"], half


def test_refresh_keeps_pods_leases_and_traffic_and_settles_active(refresh):
    """Every node keeps its subnet, m2 without its subnet.env too; a pod on
    m1 pinging one on m2 every 0.2 s through the whole refresh loses no
    echo; running pods keep their addresses and routes; new pods use the
    running pods' allocation table. A charm that did not carry the v2 leases
    into v3 failed this test for f79f180 with "a machine's subnet lease changed"
    (`{'10.1.29.0-24': ...} != {'10.1.63.0-24': ...}`): m2, with no
    subnet.env and no lease of its own in etcd v3, leased a new subnet under
    its running pod (whose echoes still came back through the routes flannel
    v0.11 had left); a charm whose refresh renamed the CNI network failed it
    with `assert 'cbr0' == 'CDK-flannel-network'`."""
    assert refresh.failed_hooks() == [], refresh.failed_hooks()
    for unit in refresh.flannel_units():
        state, message = refresh.workload(unit)
        assert state == "active", f"{unit} is {state} ({message}) after one settle"
    for m in MACHINES:   # the one thing that moves: flanneld, onto the new binary
        now = refresh.flanneld_pids(m)
        refresh.say(f"   {m}: flanneld {refresh.pids_before[m]} -> {now}")
        assert now and now != refresh.pids_before[m], f"{m}: flanneld was not restarted"
        assert refresh.machines[m].read_file("/usr/local/bin/flanneld") == \
            member(refresh.resource, "flanneld")
    assert refresh.during.lost == 0, refresh.during
    a, b = refresh.old_pods["m1"], refresh.old_pods["m2"]
    assert a.ping(b.address) and b.ping(a.address), "running pods lost each other"
    assert v3_leases(refresh) == refresh.leases_before, "a machine's subnet lease changed"
    assert {m: refresh.subnet_env(m)["FLANNEL_SUBNET"] for m in MACHINES} == \
        refresh.subnets_before
    for m in MACHINES:
        name = json.loads(refresh.machines[m].read_file("/etc/cni/net.d/10-flannel.conflist"))
        assert name["name"] == NETWORK
    new = pods_everywhere(refresh)
    running = {p.address for p in refresh.pods if p.address}
    assert len(running) == len([p for p in refresh.pods if p.address]), \
        f"two running pods share an address: {[(p.name, p.address) for p in refresh.pods]}"
    for m in MACHINES:
        tables = allocation_tables(refresh, m)
        assert list(tables) == [NETWORK], f"{m} has host-local tables {sorted(tables)}"
        on_m = {p.address for p in refresh.pods if p.machine is refresh.machines[m]}
        assert on_m <= tables[NETWORK], f"{m}: pods {on_m} not all in {tables}"
    assert new["m1"].ping(new["m2"].address)
    assert new["m1"].ping(refresh.old_pods["m2"].address)


def test_the_status_is_honest_on_every_hook_of_the_refresh(refresh):
    """Every status the new charm set during the refresh: never blocked or
    in error, and an active one names the subnet the node held before and
    holds after."""
    for unit in refresh.flannel_units():
        m = refresh.machine_of(unit)
        calls = refresh.controller.tool_calls(unit)[refresh.tools_before.get(unit, 0):]
        statuses = [(c["hook"], c["args"]) for c in calls if c["tool"] == "status-set"]
        refresh.say(f"   {unit} statuses: {statuses}")
        assert statuses, f"{unit} set no status during the refresh"
        for hook, args in statuses:
            state, message = args[0], " ".join(args[1:])
            assert state in ("maintenance", "waiting", "active"), (hook, args)
            if state == "active":
                assert message == f"Flannel subnet {refresh.subnets_before[m]}", (hook, args)


def test_the_pods_reach_outside_through_the_new_flanneld_and_v011s_rules_are_gone(refresh):
    """flannel v0.11's --ip-masq rules sat straight in POSTROUTING and
    FORWARD, and flanneld v0.27 never removes them: the charm drops them
    while it restarts flanneld. Pods still reach an address outside the pod
    network (etcd's, which has no route back to pods) through flanneld
    v0.27.4's FLANNEL-POSTRTG. A charm that did not drop them failed this
    test with the six v0.11 rules left on each node."""
    for m in MACHINES:
        assert v011_rules(refresh, m) == [], f"{m}: {v011_rules(refresh, m)}"
        saved = refresh.machines[m].run(["iptables-save", "-t", "nat"]).stdout
        assert "-j FLANNEL-POSTRTG" in saved, f"{m}: flanneld v0.27.4 wrote no masquerade"
        pod = next(p for p in refresh.pods if p.machine is refresh.machines[m])
        assert pod.ping(refresh.etcd.host), f"a pod on {m} cannot reach etcd's address"


def test_v2_keys_stay_while_a_node_runs_v011_and_go_once_every_node_moved(refresh):
    """flannel v0.11's keys in etcd v2: halfway, after an update-status of
    m1's, they are all there (m2 routes by them); once both nodes run
    flanneld v0.27.4, the next update-status deletes them (etcd 3.5+
    deprecates v2, and nothing reads them). A charm that did not delete them
    failed this test: they stayed."""
    if refresh.revision != "f79f180":
        pytest.skip("a69755c's flannel kept its network in etcd v3")
    half = refresh.halfway["v2 keys"]
    assert f"{PREFIX}/config" in half
    assert {k[len(SUBNETS):] for k in half if k.startswith(SUBNETS)} == \
        set(refresh.leases_before)
    refresh.controller.update_status(FLANNEL)
    refresh.settle()
    assert refresh.etcd_v2_values(PREFIX) == {}
    assert set(v3_leases(refresh)) == set(refresh.leases_before)
    for unit in refresh.flannel_units():
        assert refresh.workload(unit)[0] == "active"


def test_refresh_adopts_the_old_charms_files_and_forgets_its_flags(refresh):
    """The old charm's files become this charm's, its flags go. A charm that
    did not adopt them failed this test with `assert 493 == 448`:
    /etc/ssl/flannel stayed 0755 (and the old flags stayed in the state DB,
    the old charm's files were kept as "originals" to put back)."""
    for m in MACHINES:
        unit = refresh.unit_on(m)
        assert mode(refresh, m, "/etc/ssl/flannel/client-key.pem") == 0o600
        assert mode(refresh, m, "/etc/ssl/flannel") == 0o700
        flags = unit_flags(refresh, unit)
        assert not flags & set(OLD_ONLY_FLAGS), flags & set(OLD_ONLY_FLAGS)
        record_dir = os.path.dirname(refresh.controller.unit(unit)["charm-dir"])
        record = json.loads(refresh.machines[m].read_file(
            f"{record_dir}/flannel-install-record/record.json"))["files"]
        for path in ("/usr/local/bin/flanneld", "/usr/local/bin/etcdctl",
                     "/lib/systemd/system/flannel.service",
                     "/etc/cni/net.d/10-flannel.conflist", "/etc/ssl/flannel/client-key.pem"):
            if m == "m2" and path == "/usr/local/bin/etcdctl":
                # adoption by content: by the old charm's flags alone, the
                # operator's etcdctl would be flannel's, and stop would delete it
                assert path not in record, "the operator's etcdctl was claimed"
                continue
            assert path in record, f"{m}: {path} not recorded"
            assert record[path]["original"] is None, f"{m}: an original kept for {path}"
        plugin = record["/opt/cni/bin/flannel"]["original"]
        if refresh.revision == "f79f180":
            assert plugin is not None, "the worker's flannel was not kept to be put back"
        else:
            assert plugin is None, "the old charm's flannel was kept as an 'original'"
        for name in refresh.principal_plugins(m):
            if name != "flannel":
                assert f"/opt/cni/bin/{name}" not in record


def test_the_ops_worker_re_extracting_its_plugins_leaves_flannels_plugin_alone(refresh):
    """The ops worker untars its cni-plugins resource over /opt/cni/bin in
    every hook but update-status: flannel's /opt/cni/bin/flannel (not in that
    tarball) survives untouched, the worker's own files stay the worker's,
    flannel stays active and new pods work."""
    if refresh.revision == "f79f180":
        pytest.skip("the reactive worker of 2020 extracts at its own upgrade: the last test")
    worker = refresh.worker_app
    flannel_plugin = member(refresh.resource, "cni-plugin/flannel")
    stat_of = {m: refresh.machines[m].path_on_host("/opt/cni/bin/flannel").stat()
               for m in MACHINES}
    for m in MACHINES:
        assert refresh.machines[m].read_file("/opt/cni/bin/flannel") == flannel_plugin, m
    before = len(worker.extractions)
    with refresh.timings.phase("the ops worker reconciles (hooks on every worker unit)",
                               refresh.say):
        for hook in ("config-changed", "leader-settings-changed", "upgrade-charm"):
            worker.fire(hook)
            refresh.settle()
        refresh.wait_for_flannel(timeout=60)
    extracted = [hook for _unit, hook in worker.extractions[before:]]
    assert extracted.count("config-changed") == len(MACHINES), extracted
    assert extracted.count("upgrade-charm") == len(MACHINES), extracted
    for m in MACHINES:
        path = refresh.machines[m].path_on_host("/opt/cni/bin/flannel")
        assert refresh.machines[m].read_file("/opt/cni/bin/flannel") == flannel_plugin, m
        now = path.stat()
        assert (now.st_ino, now.st_mtime_ns, now.st_mode) == \
            (stat_of[m].st_ino, stat_of[m].st_mtime_ns, stat_of[m].st_mode), \
            f"{m}: the worker's extraction touched /opt/cni/bin/flannel"
    assert plugin_differences(refresh.worker_plugins_before, all_plugin_bytes(refresh)) == []
    pods = pods_everywhere(refresh)
    assert pods["m1"].ping(pods["m2"].address) and pods["m2"].ping(pods["m1"].address)


def test_remove_and_readd_after_refresh_leaves_nothing_and_works(refresh):
    """Removing flannel after a refresh removes the old charm's files too,
    and puts the flannel of the reactive kubernetes-worker of 2020 back as it
    extracted it (owner included). A charm that kept the old charm's files as
    "originals" failed this test with the
    leftovers ['/usr/local/bin/flanneld', '/usr/local/bin/etcdctl',
    '/lib/systemd/system/flannel.service', '/etc/cni/net.d/10-flannel.conflist',
    '/etc/ssl/flannel/client-{ca,cert,key}.pem', '/etc/ssl/flannel']: the
    remove put those files back and left etcdctl; and (f79f180) with flannel
    v0.11's iptables rules left, and the worker's flannel owned by root."""
    refresh.remove_cni_relation()
    assert refresh.machines["m2"].read_file("/usr/local/bin/etcdctl") == OPERATORS_ETCDCTL
    for m in MACHINES:
        theirs = ["/usr/local/bin/etcdctl"] if m == "m2" else []
        assert flannel_leftovers(refresh, m) == theirs, f"{m}: {flannel_leftovers(refresh, m)}"
        assert refresh.flannel_leftovers(m) == [], f"{m}: {refresh.flannel_leftovers(m)}"
        refresh.say(f"   {m} after remove: checked {', '.join(FLANNEL_PATHS)}, "
                    f"vxlan devices, flanneld, iptables, routes")
    assert plugin_differences(refresh.worker_plugins_before, all_plugin_bytes(refresh)) == []
    for m in MACHINES:
        after = refresh.machines[m].read_file("/opt/cni/bin/flannel")
        assert after == refresh.flannel_plugin_before[m], \
            f"{m}: /opt/cni/bin/flannel is not as before the old charm"
        if refresh.revision == "f79f180":
            assert owner(refresh, m, "/opt/cni/bin/flannel") == (MEMBER_UID, MEMBER_GID)
    refresh.add_cni_relation()
    refresh.wait_for_flannel(timeout=240)
    new = pods_everywhere(refresh)
    assert new["m1"].ping(new["m2"].address)
    for m in MACHINES:
        assert list(allocation_tables(refresh, m)) == [NETWORK]


def test_the_workers_own_upgrade_reextracting_its_flannel_is_put_back_on_remove(refresh):
    """The reactive kubernetes-worker of 2020 extracts its cni-plugins again
    after its own upgrade-charm, its flannel over this charm's; the next
    install keeps it and stop puts it back. tests/unit/test_install_record.py
    proves the rule itself (a charm without it deleted the worker's file)."""
    if refresh.revision != "f79f180":
        pytest.skip("the ops worker ships no flannel")
    refresh.controller.upgrade_charm(WORKER)
    refresh.settle()
    upgraded = [u for u, hook in refresh.worker_app.extractions if hook == "upgrade-charm"]
    assert len(upgraded) == len(MACHINES), refresh.worker_app.extractions
    theirs = refresh.flannel_plugin_before
    for m in MACHINES:
        assert refresh.machines[m].read_file("/opt/cni/bin/flannel") == theirs[m]
    refresh.upgrade_flannel(refresh.resource)
    for m in MACHINES:
        assert refresh.machines[m].read_file("/opt/cni/bin/flannel") == \
            member(refresh.resource, "cni-plugin/flannel"), f"{m}: the charm's plugin is missing"
    refresh.remove_cni_relation()
    for m in MACHINES:
        assert refresh.machines[m].read_file("/opt/cni/bin/flannel") == theirs[m], \
            f"{m}: the worker's re-extracted flannel was not put back"
