"""Juju 3.x hook semantics the sandbox plays and hooks of
units on different machines running at once."""

from __future__ import annotations

import json

from sandbox.juju import EmulatedApp, EtcdApp


def test_relation_ids_leaves_the_broken_relation_out(cluster):
    """Before: relation-ids listed the relation in its own -relation-broken."""
    ctl = cluster.ctl
    out = cluster.out
    cluster.script("etcd-relation-broken", f"relation-ids etcd > {out}/broken\n")
    cluster.script("etcd-relation-departed", f"relation-ids etcd > {out}/departed\n")
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    rid = ctl.relation_id("flannel:etcd", "etcd:db")
    ctl.remove_relation("flannel:etcd", "etcd:db")
    ctl.settle()
    assert cluster.read_out("departed").split() == [f"etcd:{rid}"]
    assert cluster.read_out("broken").split() == []


def test_what_a_departing_unit_writes_is_not_published(world):
    """Before: a unit's relation-set in its -relation-departed of a relation
    going away was committed (its own -relation-broken still read it back)."""
    ctl = world.ctl
    m0 = world.add_machine()
    ctl.deploy("principal", world.charm("principal", principal=True), to=[m0])
    ctl.deploy(EtcdApp("https://10.99.0.2:2379", version="3.5", client_ca="CA",
                       client_cert="C", client_key="K"))
    world.script("db-relation-joined", "relation-set hello=yes\n")
    world.script("db-relation-departed", "relation-set farewell=yes\n")
    world.script("db-relation-broken",
                 f"relation-get --format=json - $JUJU_UNIT_NAME > {world.out}/own\n")
    rid = ctl.add_relation("principal:db", "etcd:db")
    ctl.settle()
    assert ctl.relation_data(rid, "principal/0")["hello"] == "yes"
    ctl.remove_relation("principal:db", "etcd:db")
    ctl.settle()
    assert ctl.hooks("principal/0")[-2:] == ["db-relation-departed", "db-relation-broken"]
    own = json.loads(world.read_out("own"))
    assert own.get("hello") == "yes" and "farewell" not in own


def test_etcd_publishes_all_five_keys_once_ready(world):
    """Before: the emulated etcd published empty TLS values, and in joined
    before its certificates were there."""
    ctl = world.ctl
    m0 = world.add_machine()
    ctl.deploy("principal", world.charm("principal", principal=True), to=[m0])
    etcd = EtcdApp("https://10.99.0.2:2379", version="3.5.9", client_ca="CA PEM",
                   client_cert="CERT PEM", client_key="KEY PEM", ready=False)
    ctl.deploy(etcd)
    seen = world.out / "seen"
    world.script("db-relation-changed", f"relation-get --format=json - etcd/0 >> {seen}\n"
                                        f"echo >> {seen}\n")
    rid = ctl.add_relation("principal:db", "etcd:db")
    ctl.settle()
    assert ctl.relation_data(rid, "etcd/0").keys() <= {"private-address", "ingress-address",
                                                       "egress-subnets"}
    assert ctl.status()["applications"]["etcd"]["application-status"]["current"] == "waiting"
    etcd.update(ready=True)
    ctl.settle()
    keys = ("connection_string", "version", "client_ca", "client_cert", "client_key")
    snapshots = [json.loads(line) for line in seen.read_text().splitlines() if line.strip()]
    with_keys = [s for s in snapshots if any(k in s for k in keys)]
    assert with_keys, snapshots
    # the first time the principal sees any of them, it sees all five, none empty
    assert all(with_keys[0].get(k) for k in keys), with_keys[0]


def test_network_get_lists_a_fan_bridge_the_model_has(world):
    ctl = world.ctl
    m0 = world.add_machine()
    ctl.deploy("principal", world.charm("principal", principal=True), to=[m0])
    ctl.settle()
    one = json.loads(ctl.exec("principal/0", ["network-get", "--format=json", "db"]).stdout)
    assert [b["interface-name"] for b in one["bind-addresses"]] == ["eth0"]
    ctl.add_bind_address(m0, "fan-252", "252.10.0.1", cidr="252.0.0.0/8", first=True)
    info = json.loads(ctl.exec("principal/0", ["network-get", "--format=json", "db"]).stdout)
    assert [b["interface-name"] for b in info["bind-addresses"]] == ["fan-252", "eth0"]
    assert info["ingress-addresses"] == ["10.99.0.10"]
    bind = ctl.exec("principal/0", ["network-get", "--bind-address", "db"]).stdout.decode()
    assert bind.strip() == "252.10.0.1"


def test_hook_environment_is_juju_3s(cluster):
    """The variables Juju 3.x's HookVars() sets (worker/uniter/runner/context)."""
    ctl = cluster.ctl
    cluster.script("any", f'env > "{cluster.out}/env-$(basename "$0")-$JUJU_HOOK_NAME"\n')
    cluster.script("cni-relation-joined", f'env > "{cluster.out}/env-joined"\n')
    cluster.script("etcd-relation-departed", f'env > "{cluster.out}/env-departed"\n')
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()

    def env(name):
        return dict(line.split("=", 1) for line in cluster.read_out(name).splitlines()
                    if "=" in line)

    joined = env("env-joined")
    for key in ("JUJU_UNIT_NAME", "JUJU_MODEL_NAME", "JUJU_MODEL_UUID", "JUJU_VERSION",
                "JUJU_CHARM_DIR", "CHARM_DIR", "JUJU_CONTEXT_ID", "JUJU_HOOK_NAME",
                "JUJU_DISPATCH_PATH", "JUJU_AGENT_SOCKET_ADDRESS", "JUJU_AGENT_SOCKET_NETWORK",
                "JUJU_API_ADDRESSES", "JUJU_MACHINE_ID", "JUJU_AVAILABILITY_ZONE",
                "JUJU_PRINCIPAL_UNIT", "JUJU_METER_STATUS", "JUJU_SLA",
                "JUJU_RELATION", "JUJU_RELATION_ID", "JUJU_REMOTE_UNIT", "JUJU_REMOTE_APP",
                "APT_LISTCHANGES_FRONTEND", "DEBIAN_FRONTEND", "TERM"):
        assert key in joined, key
    assert joined["JUJU_UNIT_NAME"] == "flannel/0"
    assert joined["JUJU_PRINCIPAL_UNIT"] == "kubernetes-worker/0"
    assert joined["JUJU_HOOK_NAME"] == "cni-relation-joined"
    assert joined["JUJU_DISPATCH_PATH"] == "hooks/cni-relation-joined"
    assert joined["JUJU_MACHINE_ID"] == cluster.m0
    assert joined["JUJU_REMOTE_UNIT"] == "kubernetes-worker/0"
    assert joined["JUJU_REMOTE_APP"] == "kubernetes-worker"
    assert "JUJU_DEPARTING_UNIT" not in joined
    ctl.remove_relation("flannel:etcd", "etcd:db")
    ctl.settle()
    departed = env("env-departed")
    assert departed["JUJU_DEPARTING_UNIT"] == "etcd/0"
    assert departed["JUJU_REMOTE_UNIT"] == "etcd/0"


class Sleeper(EmulatedApp):
    """Each hook takes a while, and records when it ran."""

    endpoints = {}

    def __init__(self, name, seconds):
        super().__init__(name)
        self.seconds = seconds
        self.spans = []

    def dispatch(self, ctx):
        import time
        t0 = time.monotonic()
        time.sleep(self.seconds)
        self.spans.append((ctx.unit, ctx.hook, t0, time.monotonic()))


def overlap(a, b):
    return a[2] < b[3] and b[2] < a[3]


def test_units_on_different_machines_run_hooks_at_once_one_machine_one_at_a_time(world):
    """Before: every hook of every unit ran one after another."""
    ctl = world.ctl
    m0, m1 = world.add_machine(), world.add_machine()
    app = Sleeper("sleeper", 0.3)
    ctl.deploy(app, to=[m0, m1, m0])   # sleeper/0 and /2 share m0
    ctl.settle()
    spans = app.spans
    by_unit = {u: [s for s in spans if s[0] == u] for u in ("sleeper/0", "sleeper/1", "sleeper/2")}
    # each unit: Juju's order, one hook at a time
    for u, mine in by_unit.items():
        assert [s[1] for s in mine] == ["install", "leader-elected" if u == "sleeper/0"
                                        else "leader-settings-changed", "config-changed",
                                        "start"], u
        assert all(a[3] <= b[2] for a, b in zip(mine, mine[1:]))
    # m0's two units never overlap (the machine lock); m1's overlaps m0's
    assert not any(overlap(a, b) for a in by_unit["sleeper/0"] for b in by_unit["sleeper/2"])
    assert any(overlap(a, b) for a in by_unit["sleeper/1"]
               for b in by_unit["sleeper/0"] + by_unit["sleeper/2"])
    # the same model with parallel=1 serialises everything
    ctl.parallel = 1
    app.spans.clear()
    ctl.update_status()
    ctl.settle()
    assert not any(overlap(a, b) for a in app.spans for b in app.spans if a is not b)


def test_a_reboot_fires_start_on_the_started_units_of_that_machine_only(cluster):
    """Juju 2.8+ (juju/juju#11261): after a reboot the unit agent fires
    `start` on each unit of the machine that had started; nothing else."""
    ctl = cluster.ctl
    m1 = cluster.add_machine()
    ctl.add_unit("kubernetes-worker", m1)
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    on_m0 = {u for u in ctl.units("flannel") + ctl.units("kubernetes-worker")
             if ctl.unit(u)["machine"] == cluster.m0}
    assert len(on_m0) == 2
    before = len(ctl.hook_log)
    assert set(ctl.reboot(cluster.m0)) == on_m0
    ctl.settle()
    fired = sorted((r.unit, r.hook) for r in ctl.hook_log[before:])
    assert fired == sorted((u, "start") for u in on_m0)
    assert ctl.reboot("99") == []
