"""Hook order of the emulated Juju for a subordinate's life cycle and for
principal, config, upgrade and resource operations."""

from __future__ import annotations

import time

import pytest

from sandbox.juju import EmulatedApp, EtcdApp, ModelError

SUB_SETUP = ["install", "etcd-relation-created", "cni-relation-created", "leader-elected",
             "config-changed", "start", "etcd-relation-joined", "etcd-relation-changed",
             "cni-relation-joined", "cni-relation-changed"]
SUB_TEARDOWN = ["cni-relation-departed", "cni-relation-broken", "etcd-relation-departed",
                "etcd-relation-broken", "stop", "remove"]


def test_principals_set_up_before_the_subordinate_exists(cluster):
    ctl = cluster.ctl
    assert ctl.hooks("etcd/0") == ["install", "db-relation-created", "leader-elected",
                                   "config-changed", "start"]
    assert ctl.hooks("kubernetes-worker/0") == ["install", "leader-elected",
                                                "config-changed", "start"]
    assert ctl.units("flannel") == []
    assert ctl.pending() == []


def test_add_relation_creates_subordinate_in_juju_order(cluster):
    ctl = cluster.ctl
    before = len(ctl.hook_log)
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    assert ctl.units("flannel") == ["flannel/0"]
    assert ctl.hooks("flannel/0") == SUB_SETUP
    new = ctl.hook_log[before:]
    worker = [r.hook for r in new if r.unit == "kubernetes-worker/0"]
    assert worker == ["cni-relation-created", "cni-relation-joined", "cni-relation-changed"]
    etcd = [r.hook for r in new if r.unit == "etcd/0"]
    assert etcd == ["db-relation-joined", "db-relation-changed"]
    # the principal ran relation-created before the subordinate even existed
    order = [f"{r.unit}:{r.hook}" for r in new]
    assert order.index("kubernetes-worker/0:cni-relation-created") < \
        order.index("flannel/0:install")
    # joined/changed on the principal come only after the subordinate started
    assert order.index("flannel/0:start") < order.index("kubernetes-worker/0:cni-relation-joined")
    joined = [r for r in new if r.hook.endswith("-relation-joined")]
    assert {(r.unit, r.remote_unit) for r in joined} == {
        ("flannel/0", "etcd/0"), ("flannel/0", "kubernetes-worker/0"),
        ("kubernetes-worker/0", "flannel/0"), ("etcd/0", "flannel/0")}
    rel = [r for r in new if r.unit == "flannel/0" and r.hook == "cni-relation-joined"][0]
    rid = ctl.relation_id("flannel:cni", "kubernetes-worker:cni")
    assert rel.relation_id == f"cni:{rid}"
    assert rel.remote_app == "kubernetes-worker"
    # the unit's files are in its machine
    assert cluster.host("flannel/0", "charm/metadata.yaml").is_file()
    assert cluster.host("flannel/0", "charm").parent.name == "unit-flannel-0"


class NrpeLike(EmulatedApp):
    """A second subordinate of the worker, as nrpe is."""
    subordinate = True
    endpoints = {"general-info": {"interface": "juju-info", "role": "requires",
                                  "scope": "container"},
                 "monitors": {"interface": "kubernetes-cni", "role": "provides",
                              "scope": "container"}}

    def __init__(self):
        super().__init__("nrpe")


def test_a_relation_between_two_subordinates_removes_neither(cluster):
    """Juju destroys a subordinate unit with its relation to its principal,
    not with one to another subordinate (flannel to nrpe): the sandbox once
    destroyed the flannel unit when flannel:nrpe-external-master went."""
    ctl = cluster.ctl
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.deploy(NrpeLike())
    ctl.add_relation("nrpe:general-info", "kubernetes-worker:juju-info")
    ctl.add_relation("flannel:cni", "nrpe:monitors")
    ctl.settle()
    assert ctl.unit("nrpe/0")["principal"] == "kubernetes-worker/0"
    ctl.remove_relation("flannel:cni", "nrpe:monitors")
    ctl.settle()
    assert ctl.unit("flannel/0")["life"] == "alive"
    assert ctl.unit("nrpe/0")["life"] == "alive"
    ctl.remove_relation("nrpe:general-info", "kubernetes-worker:juju-info")
    ctl.settle()
    assert ctl.unit("flannel/0")["life"] == "alive"
    with pytest.raises(ModelError):
        ctl.unit("nrpe/0")


def test_remove_relation_tears_the_subordinate_down(cluster):
    ctl = cluster.ctl
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    agent_dir = cluster.host("flannel/0", "")
    tools_dir = cluster.host("flannel/0", ctl.unit("flannel/0")["tools-dir"])
    assert agent_dir.is_dir() and (tools_dir / "relation-get").exists()
    before = len(ctl.hook_log)
    ctl.remove_relation("kubernetes-worker:cni", "flannel:cni")
    ctl.settle()
    new = ctl.hook_log[before:]
    assert [r.hook for r in new if r.unit == "flannel/0"] == SUB_TEARDOWN
    assert [r.hook for r in new if r.unit == "kubernetes-worker/0"] == [
        "cni-relation-departed", "cni-relation-broken"]
    assert [r.hook for r in new if r.unit == "etcd/0"] == ["db-relation-departed"]
    dep = {(r.unit, r.hook): (r.remote_unit, r.departing_unit) for r in new
           if r.hook.endswith("-departed")}
    assert dep[("etcd/0", "db-relation-departed")] == ("flannel/0", "flannel/0")
    assert dep[("flannel/0", "etcd-relation-departed")] == ("etcd/0", "flannel/0")
    assert dep[("kubernetes-worker/0", "cni-relation-departed")] == ("flannel/0", "flannel/0")
    assert ctl.units("flannel") == []
    assert not agent_dir.exists() and not tools_dir.exists()
    m = ctl.model()
    assert [r["id"] for r in m.relations()] == [ctl.relation_id("flannel:etcd", "etcd:db")]
    etcd_rel = m.relation(ctl.relation_id("flannel:etcd", "etcd:db"))
    assert etcd_rel["scope-units"] == ["etcd/0"]
    assert etcd_rel["members"].get("etcd/0") == []


def test_unit_ids_are_never_reused(cluster):
    ctl = cluster.ctl
    seen = []
    for n in range(3):
        ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
        ctl.settle()
        seen += ctl.units("flannel")
        assert ctl.hooks(f"flannel/{n}") == SUB_SETUP  # each new unit is leader again
        ctl.remove_relation("flannel:cni", "kubernetes-worker:cni")
        ctl.settle()
        assert ctl.hooks(f"flannel/{n}") == SUB_SETUP + SUB_TEARDOWN
    assert seen == ["flannel/0", "flannel/1", "flannel/2"]
    # relation ids are never reused either
    rid = ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    assert rid == 4


def test_container_scope_pairs_units_on_the_same_machine(cluster):
    ctl = cluster.ctl
    m1 = cluster.add_machine()
    ctl.add_unit("kubernetes-worker", m1)
    ctl.settle()
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    assert ctl.units("flannel") == ["flannel/0", "flannel/1"]
    m = ctl.model()
    # which principal gets flannel/0 is the order they entered scope (the
    # seeded hook order), as in Juju: each is paired with the one beside it
    pairs = {m.unit(sub)["principal"]: sub for sub in ctl.units("flannel")}
    assert sorted(pairs) == ["kubernetes-worker/0", "kubernetes-worker/1"]
    for principal, sub in pairs.items():
        assert m.unit(sub)["machine"] == m.unit(principal)["machine"]
    assert m.unit(pairs["kubernetes-worker/1"])["machine"] == m1
    cni = m.relation(ctl.relation_id("flannel:cni", "kubernetes-worker:cni"))
    for principal, sub in pairs.items():
        assert cni["members"][sub] == [principal]
        assert cni["members"][principal] == [sub]
    etcd = m.relation(ctl.relation_id("flannel:etcd", "etcd:db"))
    # what relation-list prints (sorted, as Juju's relation cache does); the
    # members joined in whatever order the two machines' hooks ran
    assert m.members(etcd, "etcd/0") == ["flannel/0", "flannel/1"]
    assert ctl.hooks("flannel/1")[3] == "leader-settings-changed"  # not the leader
    # a new principal unit gets its own subordinate
    m2 = cluster.add_machine()
    ctl.add_unit("kubernetes-worker", m2)
    ctl.settle()
    assert ctl.units("flannel") == ["flannel/0", "flannel/1", "flannel/2"]
    assert ctl.model().unit("flannel/2")["principal"] == "kubernetes-worker/2"
    # removing a principal unit takes its subordinate with it
    ctl.remove_unit("kubernetes-worker/1")
    ctl.settle()
    removed = pairs["kubernetes-worker/1"]
    assert ctl.units("flannel") == sorted({"flannel/0", "flannel/1", "flannel/2"} - {removed})
    gone = ctl.hooks(removed)[-6:]
    assert gone[-2:] == ["stop", "remove"]
    assert sorted(gone[:4]) == sorted(SUB_TEARDOWN[:4])
    for ep in ("etcd", "cni"):
        assert gone.index(f"{ep}-relation-departed") < gone.index(f"{ep}-relation-broken")
    assert ctl.hooks("kubernetes-worker/1")[-4:] == ["cni-relation-departed", "cni-relation-broken",
                                                     "stop", "remove"]


def test_leader_removed_elects_another(cluster):
    ctl = cluster.ctl
    m1 = cluster.add_machine()
    ctl.add_unit("kubernetes-worker", m1)
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    m = ctl.model()
    leader = m.app("flannel")["leader"]
    other = [u for u in m.units_of("flannel") if u != leader][0]
    assert ctl.hooks(leader)[3] == "leader-elected"
    assert ctl.hooks(other)[3] == "leader-settings-changed"
    ctl.remove_unit(m.unit(leader)["principal"])
    ctl.settle()
    assert ctl.model().app("flannel")["leader"] == other
    assert ctl.hooks(other)[-1] == "leader-elected"
    # the departure hooks ran once each
    assert ctl.hooks("kubernetes-worker/0").count("cni-relation-departed") <= 1


def test_principal_charm_deploy_order(world):
    ctl = world.ctl
    charm = world.charm("principal", principal=True)
    m0, m1 = world.add_machine(), world.add_machine()
    ctl.deploy("principal", charm, to=[m0, m1])
    ctl.settle()
    assert ctl.hooks("principal/0") == ["install", "leader-elected", "config-changed", "start"]
    assert ctl.hooks("principal/1") == ["install", "leader-settings-changed", "config-changed",
                                        "start"]


def test_subordinate_with_charm_principal(world):
    """Both sides real (throwaway) charms, relation added before anything ran."""
    ctl = world.ctl
    m0 = world.add_machine()
    ctl.deploy("principal", world.charm("principal", principal=True), to=[m0])
    ctl.deploy("sub", world.charm("sub"))
    ctl.add_relation("sub:cni", "principal:cni")
    ctl.settle()
    assert ctl.hooks("principal/0") == ["install", "cni-relation-created", "leader-elected",
                                        "config-changed", "start", "cni-relation-joined",
                                        "cni-relation-changed"]
    assert ctl.hooks("sub/0") == ["install", "cni-relation-created", "leader-elected",
                                  "config-changed", "start", "cni-relation-joined",
                                  "cni-relation-changed"]


def test_config_upgrade_and_resource_hooks(cluster):
    ctl = cluster.ctl
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    n = len(ctl.hooks("flannel/0"))
    ctl.config("flannel", cidr="10.2.0.0/16", subnet_len=26)
    ctl.settle()
    assert ctl.hooks("flannel/0")[n:] == ["config-changed"]
    assert ctl.config_of("flannel")["subnet-len"] == 26
    ctl.config("flannel", cidr="10.2.0.0/16")  # unchanged: no hook
    ctl.settle()
    assert ctl.hooks("flannel/0")[n:] == ["config-changed"]
    with pytest.raises(ModelError):
        ctl.config("flannel", nope=1)
    with pytest.raises(ModelError):
        ctl.config("flannel", subnet_len="big")
    ctl.config("flannel", cidr=None)  # back to the default
    ctl.settle()
    assert ctl.config_of("flannel")["cidr"] == "10.1.0.0/16"

    new_charm = cluster.charm("flannel-v2", extra_files={"NEW": "2\n"})
    ctl.upgrade_charm("flannel", new_charm)
    ctl.settle()
    assert ctl.hooks("flannel/0")[-2:] == ["upgrade-charm", "config-changed"]
    assert cluster.host("flannel/0", "charm/NEW").read_text() == "2\n"
    assert ctl.model().app("flannel")["charm-revision"] == 1

    res = cluster.tmp / "r.tar.gz"
    res.write_bytes(b"tarball")
    before = len(ctl.hooks("flannel/0"))
    ctl.attach_resource("flannel", "flannel-amd64", res)
    ctl.settle()
    assert ctl.hooks("flannel/0")[before:] == ["upgrade-charm", "config-changed"]
    ctl.update_status()
    ctl.settle()
    assert ctl.hooks("flannel/0")[-1] == "update-status"
    assert ctl.hooks("etcd/0")[-1] == "update-status"


def test_a_refresh_goes_ahead_of_pending_hooks_and_ends_with_config_changed(cluster):
    """Juju's uniter carries out a refresh before the events it has queued
    and always follows upgrade-charm with config-changed. A sandbox that ran
    the queued config-changed and update-status first (with the new charm's
    files already in place) and merged away the refresh's config-changed
    failed this test: ["config-changed", "update-status", "upgrade-charm"]."""
    ctl = cluster.ctl
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    n = len(ctl.hooks("flannel/0"))
    ctl.config("flannel", cidr="10.2.0.0/16")
    ctl.update_status()
    ctl.upgrade_charm("flannel", cluster.charm("flannel-v3"))
    ctl.settle()
    assert ctl.hooks("flannel/0")[n:] == ["upgrade-charm", "config-changed", "update-status"]
    res = cluster.tmp / "r.tar.gz"
    res.write_bytes(b"tarball")
    n = len(ctl.hooks("flannel/0"))
    ctl.update_status()
    ctl.attach_resource("flannel", "flannel-amd64", res)
    ctl.settle()
    assert ctl.hooks("flannel/0")[n:] == ["upgrade-charm", "config-changed", "update-status"]


def test_upgrade_replaces_charm_files_but_keeps_unit_files(cluster):
    ctl = cluster.ctl
    cluster.script("install", 'echo state > "$CHARM_DIR/.unit-state.db"\n')
    v1 = cluster.charm("v1", extra_files={"OLD": "1"})
    ctl.upgrade_charm("flannel", v1)
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    assert cluster.host("flannel/0", "charm/OLD").exists()
    ctl.upgrade_charm("flannel", cluster.charm("v2"))
    ctl.settle()
    assert not cluster.host("flannel/0", "charm/OLD").exists()
    assert cluster.host("flannel/0", "charm/.unit-state.db").read_text() == "state\n"


def test_missing_hooks_are_skipped(world):
    ctl = world.ctl
    m0 = world.add_machine()
    charm = world.charm("principal", principal=True)
    (charm / "hooks" / "install").unlink()
    ctl.deploy("principal", charm, to=[m0])
    ctl.settle()
    runs = [r for r in ctl.hook_log if r.unit == "principal/0"]
    assert runs[0].hook == "install" and runs[0].skipped and runs[0].exit_code is None
    assert ctl.hooks("principal/0", include_skipped=False) == ["leader-elected",
                                                               "config-changed", "start"]
    assert ctl.unit("principal/0")["agent"]["status"] == "idle"
    assert 'skipped "install" hook (missing)' in ctl.unit_log("principal/0")


def test_dispatch_script_is_preferred(world):
    ctl = world.ctl
    m0 = world.add_machine()
    charm = world.charm("principal", principal=True)
    out = world.out / "dispatch"
    (charm / "dispatch").write_text(f'#!/bin/sh\necho "$JUJU_DISPATCH_PATH $0" >> {out}\n')
    (charm / "dispatch").chmod(0o755)
    ctl.deploy("principal", charm, to=[m0])
    ctl.settle()
    lines = out.read_text().splitlines()
    assert lines[0].startswith("hooks/install ") and lines[0].endswith("/charm/dispatch")
    assert [x.split()[0] for x in lines] == ["hooks/install", "hooks/leader-elected",
                                             "hooks/config-changed", "hooks/start"]


def _setup_order(tmp_path, seed) -> list[str]:
    """The hook order of two principal units set up on one machine."""
    from jujukit import World
    tmp_path.mkdir(parents=True)
    world = World(tmp_path)
    world.ctl.close()
    from sandbox.juju import Controller
    world.ctl = Controller(tmp_path / "state", parallel=1, seed=seed)
    try:
        m0 = world.add_machine()
        world.ctl.deploy("principal", world.charm("principal", principal=True), to=[m0, m0])
        world.ctl.settle()
        return [f"{r.unit}:{r.hook}" for r in world.ctl.hook_log]
    finally:
        world.ctl.close()


def test_the_machine_lock_goes_in_a_seeded_order(tmp_path):
    """Juju's unit agents race for the machine lock: with a seed, which of
    the units waiting gets it next is a seeded pick (each unit's own hooks
    stay in order); the same seed plays the same order, and without one the
    first unit queued always goes first."""
    unseeded = _setup_order(tmp_path / "none", None)
    assert unseeded == [f"principal/{u}:{h}" for u in (0, 1) for h in (
        "install", "leader-elected" if u == 0 else "leader-settings-changed",
        "config-changed", "start")]
    orders = {seed: _setup_order(tmp_path / f"s{seed}", seed) for seed in range(4)}
    assert _setup_order(tmp_path / "again", 2) == orders[2]
    assert any(order != unseeded for order in orders.values()), orders
    for order in orders.values():   # each unit's own hooks keep Juju's order
        for unit in ("principal/0", "principal/1"):
            own = [entry.split(":")[1] for entry in order if entry.startswith(unit)]
            assert own[0] == "install" and own[-1] == "start", order


def test_a_subordinate_is_created_once_its_principal_installed_not_started(cluster):
    """Juju's uniter enters a unit's relation scopes right after its
    install: a new principal unit's subordinate exists before the
    principal's start (a sandbox that made it only after that start failed
    this test)."""
    ctl = cluster.ctl
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    m1 = cluster.add_machine()
    worker = ctl.add_unit("kubernetes-worker", to=m1)
    ctl.settle(stop_before=lambda e: e["unit"] == worker and e.get("hook") == "start")
    assert "install" in ctl.hooks(worker) and "start" not in ctl.hooks(worker)
    assert len(ctl.units("flannel")) == 2, ctl.units("flannel")
    ctl.settle()
    new = [u for u in ctl.units("flannel") if u != "flannel/0"]
    assert ctl.hooks(new[0])[:3] == ["install", "etcd-relation-created", "cni-relation-created"]


def _subordinate_relation_order(tmp_path, seed, fail_once=None) -> list[str]:
    """The relation hooks a new subordinate runs, related to etcd and the
    worker (`fail_once`: that hook fails the first time, and is resolved)."""
    from jujukit import World
    from sandbox.juju import Controller
    tmp_path.mkdir(parents=True)
    world = World(tmp_path)
    world.ctl.close()
    world.ctl = Controller(tmp_path / "state", parallel=1, seed=seed)
    if fail_once:
        flag = world.out / "failed"
        world.script(fail_once, f"[ -e {flag} ] || {{ touch {flag}; exit 1; }}\n")
    try:
        m0 = world.add_machine()
        world.ctl.deploy(EtcdApp("https://10.99.0.2:2379", version="3.4.22", client_ca="CA",
                                 client_cert="CERT", client_key="KEY", address="10.99.0.2"))
        world.ctl.deploy("principal", world.charm("principal", principal=True), to=[m0])
        world.ctl.deploy("flannel", world.charm())
        world.ctl.add_relation("flannel:etcd", "etcd:db")
        world.ctl.settle()
        world.ctl.add_relation("flannel:cni", "principal:cni")
        world.ctl.settle()
        if fail_once:
            world.ctl.resolve("flannel/0")
            world.ctl.settle()
        return [h for h in world.ctl.hooks("flannel/0") if "-relation-" in h]
    finally:
        world.ctl.close()


def test_a_units_relation_hooks_go_in_a_seeded_order(tmp_path):
    """Juju takes a unit's pending relation hooks from a Go map: with a
    seed, which relation's goes next is a seeded pick; one relation's
    hooks keep their order, and the same seed plays the same order."""
    unseeded = _subordinate_relation_order(tmp_path / "none", None)
    orders = {seed: _subordinate_relation_order(tmp_path / f"s{seed}", seed)
              for seed in range(6)}
    assert _subordinate_relation_order(tmp_path / "again", 3) == orders[3]
    assert any(order != unseeded for order in orders.values()), (unseeded, orders)
    for order in [unseeded, *orders.values()]:
        assert sorted(order) == sorted(unseeded)
        for endpoint in ("etcd", "cni"):
            own = [h.rsplit("-relation-", 1)[1] for h in order if h.startswith(endpoint + "-")]
            assert own == ["created", "joined", "changed"], order


def test_the_hook_that_failed_is_the_one_run_again_whatever_the_order(tmp_path):
    """A relation hook picked out of queue order that fails is the one the
    agent runs again, not the unit's first queued hook."""
    for seed in range(4):
        order = _subordinate_relation_order(tmp_path / f"s{seed}", seed,
                                            fail_once="etcd-relation-created")
        failed_at = order.index("etcd-relation-created")
        assert order[failed_at + 1] == "etcd-relation-created", order
        assert order.count("etcd-relation-created") == 2, order


def test_a_failed_hook_is_retried_by_the_agent_after_a_back_off(cluster, tmp_path):
    """Juju's agent retries a failed hook by itself, 5 s then doubling (here
    scaled down): the unit leaves its error state with no resolve."""
    ctl = cluster.ctl
    ctl.auto_retry, ctl.retry_delays = True, (0.3, 0.6)
    tries = cluster.out / "tries"
    cluster.script("config-changed", f"""
        echo x >> {tries}
        [ $(wc -l < {tries}) -ge 3 ]
    """)
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    assert ctl.unit("flannel/0")["agent"]["status"] == "error"
    assert 0 < ctl.retry_pending()["flannel/0"] <= 0.3
    time.sleep(0.35)
    ctl.settle()   # the first retry fails too: the next waits twice as long
    assert ctl.hooks("flannel/0").count("config-changed") == 2
    assert 0.3 < ctl.retry_pending()["flannel/0"] <= 0.6
    time.sleep(0.65)
    ctl.settle()
    hooks = ctl.hooks("flannel/0")
    assert hooks.count("config-changed") == 3 and hooks[-1] == "cni-relation-changed"
    assert ctl.unit("flannel/0")["agent"]["status"] == "idle"
    assert ctl.retry_pending() == {}


def test_without_auto_retry_a_failed_hook_waits_for_resolve(cluster):
    ctl = cluster.ctl
    ctl.retry_delays = (0.1,)
    cluster.script("config-changed", "exit 1\n")
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    time.sleep(0.2)
    assert ctl.settle() == [] and ctl.retry_pending() == {}
    assert ctl.unit("flannel/0")["agent"]["status"] == "error"


# seeds whose hook order destroyed the principal first before the fix
@pytest.mark.parametrize("seed", (3, 4))
def test_a_principal_outlives_its_subordinates_teardown(world, seed):
    """Before: with some hook orders the principal unit was destroyed while
    its subordinate's teardown hooks were still queued, whose relation-ids
    then failed ('unit "kubernetes-worker/1" not found')."""
    from sandbox.juju import Controller, KubernetesWorkerApp
    world.ctl.close()
    world.ctl = ctl = Controller(world.tmp / f"state-{seed}", seed=seed)
    m0, m1 = world.add_machine(), world.add_machine()
    ctl.deploy(KubernetesWorkerApp(), to=[m0, m1])
    ctl.deploy(EtcdApp("https://10.99.0.2:2379", version="3.4.22", client_ca="CA",
                       client_cert="C", client_key="K", address="10.99.0.2"))
    ctl.deploy("testsub", world.charm())
    world.script("any", "relation-ids cni\nrelation-ids etcd\n")
    ctl.add_relation("testsub:etcd", "etcd:db")
    ctl.add_relation("testsub:cni", "kubernetes-worker:cni")
    ctl.settle()
    [sub] = [u for u in ctl.units("testsub")
             if ctl.unit(u)["principal"] == "kubernetes-worker/1"]
    ctl.remove_unit("kubernetes-worker/1")
    ctl.settle()
    assert [(r.unit, r.hook) for r in ctl.hook_log if not r.ok] == []
    assert sub not in ctl.units("testsub")
