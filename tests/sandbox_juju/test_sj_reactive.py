"""charms.reactive's own main() runs in the throwaway charm's hooks and is
satisfied by the emulated hook tools: flags persist in .unit-state.db,
Endpoint data goes out with `relation-set --file`, network_get finds jujud.

Hooks run under UnshareExecutor (a private mount namespace with the unit's
/var/lib/juju and an Ubuntu /etc/os-release, since charmhelpers refuses to
import on Debian): needs root and a Python that has charms.reactive."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3

import pytest
from jujukit import REACTIVE_PYTHON as PY
from jujukit import reactive_charm

from sandbox.juju import EtcdApp, KubernetesWorkerApp, UnshareExecutor

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for unshare --mount"),
    pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare"),
    pytest.mark.skipif(PY is None, reason="no Python with charms.reactive"),
]


def flags(db_path):
    con = sqlite3.connect(db_path)
    try:
        rows = con.execute("SELECT key FROM kv WHERE key LIKE 'reactive.states.%'").fetchall()
    finally:
        con.close()
    return {r[0][len("reactive.states."):] for r in rows}


def test_charms_reactive_main_runs_on_the_emulated_tools(world):
    ctl = world.ctl
    m0 = ctl.add_machine(UnshareExecutor(world.tmp / "machine-u"), address="10.99.0.10",
                         cidr="10.99.0.0/24", mac="02:00:0a:63:00:0a")
    (world.tmp / "fake-cni").mkdir()
    worker = KubernetesWorkerApp(plugin_dir=str(world.tmp / "fake-cni"))
    for p in worker.plugins:
        (world.tmp / "fake-cni" / p).write_text("x")
    ctl.deploy(EtcdApp("https://10.99.0.2:2379", version="3.4.22", client_ca="CA",
                       client_cert="CERT", client_key="KEY", address="10.99.0.2"))
    ctl.deploy(worker, to=[m0])
    ctl.deploy("flannel", reactive_charm(world))
    ctl.add_relation("flannel:etcd", "etcd:db")
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    runs = ctl.settle()
    failed = [(r.hook, r.stderr_tail) for r in runs if not r.ok]
    assert not failed, failed
    sub = [r for r in runs if r.unit == "flannel/0"]
    assert [r.hook for r in sub][:6] == ["install", "etcd-relation-created", "cni-relation-created",
                                         "leader-elected", "config-changed", "start"]
    assert not any(r.skipped for r in sub)

    # the worker received the Endpoint's data, published with relation-set --file
    assert worker.cni_configured("kubernetes-worker/0")
    calls = ctl.tool_calls("flannel/0")
    sets = [c["args"] for c in calls if c["tool"] == "relation-set"]
    assert ["--help"] in sets
    assert any(a[:2] == ["-r", "cni:1"] and a[2] == "--file" for a in sets), sets
    tools = {c["tool"] for c in calls}
    assert {"relation-ids", "relation-list", "relation-get", "config-get", "juju-log",
            "status-set", "network-get", "application-version-set"} <= tools
    assert all(c["rc"] == 0 for c in calls if c["tool"] != "relation-set" or
               c["args"] != ["--help"]), [c for c in calls if c["rc"]]
    assert ["--format=json", "-r", "etcd:0", "-", "etcd/0"] in \
        [c["args"] for c in calls if c["tool"] == "relation-get"]

    st = ctl.status()["applications"]["kubernetes-worker"]["units"]["kubernetes-worker/0"]
    assert st["subordinates"]["flannel/0"]["workload-status"] == {
        "current": "active", "message": "ready on 10.99.0.10"}
    assert ctl.status()["applications"]["flannel"]["version"] == "1.2.3"
    assert "Reactive main running for hook cni-relation-changed" in ctl.unit_log("flannel/0")

    db = world.host("flannel/0", "charm/.unit-state.db")
    got = flags(db)
    assert {"test.installed", "test.etcd.available", "test.cni.published",
            "endpoint.cni.joined", "endpoint.etcd.joined"} <= got, got

    # the relation goes: stop's handler clears the flag, the unit is removed
    ctl.remove_relation("flannel:cni", "kubernetes-worker:cni")
    runs = ctl.settle()
    assert not [(r.hook, r.stderr_tail) for r in runs if not r.ok]
    assert [r.hook for r in runs if r.unit == "flannel/0"] == [
        "cni-relation-departed", "cni-relation-broken", "etcd-relation-departed",
        "etcd-relation-broken", "stop", "remove"]
    assert not db.exists()
    assert json.loads(json.dumps(ctl.units("flannel"))) == []
