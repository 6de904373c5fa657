"""Relation data flowing both ways, hook failures, resolve, status."""

from __future__ import annotations

import pytest

from sandbox.juju import ModelError, SettleError


def test_charm_data_reaches_the_principal_and_back(cluster):
    ctl = cluster.ctl
    cluster.script("cni-relation-joined", """
        relation-set cidr=10.1.0.0/16 cni-conf-file=10-flannel.conflist
    """)
    got = cluster.out / "hash"
    cluster.script("cni-relation-changed", f"relation-get kubeconfig_path > {got}\n")
    rid = ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    assert cluster.worker.cni_configured("kubernetes-worker/0")
    assert ctl.relation_data(rid, "flannel/0")["cni-conf-file"] == "10-flannel.conflist"
    assert got.read_text().strip() == cluster.worker.published()["kubeconfig_path"]
    # the worker got one changed for the join and one for the data
    w = [(r.hook, r.remote_unit) for r in ctl.hook_log if r.unit == "kubernetes-worker/0"
         and r.hook.startswith("cni-relation-")]
    assert w == [("cni-relation-created", None), ("cni-relation-joined", "flannel/0"),
                 ("cni-relation-changed", "flannel/0"), ("cni-relation-changed", "flannel/0")]
    assert ctl.status()["applications"]["kubernetes-worker"]["units"]["kubernetes-worker/0"][
        "workload-status"] == {"current": "active", "message": "Kubernetes worker running."}


def test_unchanged_data_fires_nothing(cluster):
    ctl = cluster.ctl
    cluster.script("any", "relation-set -r $(relation-ids cni) same=1 || true\n")
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    n = len(ctl.hooks("kubernetes-worker/0"))
    ctl.update_status()
    ctl.settle()
    assert ctl.hooks("kubernetes-worker/0")[n:] == ["update-status"]


def test_etcd_data_changes_reach_the_charm(cluster):
    ctl = cluster.ctl
    seen = cluster.out / "cs"
    cluster.script("etcd-relation-changed", f"relation-get connection_string >> {seen}\n")
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    cluster.etcd.update(connection_string="https://10.99.0.2:2379,https://10.99.0.3:2379")
    ctl.settle()
    assert seen.read_text().splitlines() == [
        "https://10.99.0.2:2379", "https://10.99.0.2:2379,https://10.99.0.3:2379"]
    cluster.etcd.update(client_cert="NEW CERT PEM")
    ctl.settle()
    data = ctl.relation_data(ctl.relation_id("flannel:etcd", "etcd:db"), "etcd/0")
    assert data["client_cert"] == "NEW CERT PEM" and data["client_key"] == "KEY PEM"


def test_both_charms_talk_and_app_data(world):
    """A charm principal and a charm subordinate exchange unit and app data."""
    ctl = world.ctl
    m0 = world.add_machine()
    ctl.deploy("principal", world.charm("principal", principal=True), to=[m0])
    ctl.deploy("sub", world.charm("sub"))
    log = world.out / "log"
    world.script("cni-relation-joined", """
        if [ "${JUJU_UNIT_NAME%/*}" = principal ]; then
            relation-set kubeconfig-hash=abc
            relation-set --app service-cidr=10.152.183.0/24
        else
            relation-set cidr=10.1.0.0/16
        fi
    """)
    world.script("cni-relation-changed", f"""
        echo "$JUJU_UNIT_NAME remote=${{JUJU_REMOTE_UNIT:-none}} app=$JUJU_REMOTE_APP \\
            $(relation-get --format=json - ${{JUJU_REMOTE_UNIT:-x/0}} 2>/dev/null | tr -d ' ') \\
            $(relation-get --app --format=json - $JUJU_REMOTE_APP | tr -d ' ')" >> {log}
    """)
    rid = ctl.add_relation("sub:cni", "principal:cni")
    ctl.settle()
    lines = log.read_text().splitlines()
    # the subordinate saw the principal's unit and app data
    assert any(line.startswith("sub/0 remote=principal/0") and '"kubeconfig-hash":"abc"' in line
               and '"service-cidr":"10.152.183.0/24"' in line for line in lines), lines
    # the principal saw the subordinate's cidr
    assert any(line.startswith("principal/0 remote=sub/0") and '"cidr":"10.1.0.0/16"' in line
               for line in lines), lines
    assert ctl.relation_data(rid, "principal") == {"service-cidr": "10.152.183.0/24"}


def test_app_data_change_fires_changed_without_remote_unit(world):
    ctl = world.ctl
    m0 = world.add_machine()
    ctl.deploy("principal", world.charm("principal", principal=True), to=[m0])
    ctl.deploy("sub", world.charm("sub"))
    ctl.add_relation("sub:cni", "principal:cni")
    ctl.settle()
    n = len(ctl.hook_log)
    cp = ctl.exec("principal/0", ["relation-set", "--app", "-r", "0", "k=v"])
    assert cp.returncode == 0
    ctl.settle()
    new = [(r.unit, r.hook, r.remote_unit, r.remote_app) for r in ctl.hook_log[n:]]
    assert new == [("sub/0", "cni-relation-changed", None, "principal")]


def test_leader_set_fires_leader_settings_changed(world):
    ctl = world.ctl
    m0, m1 = world.add_machine(), world.add_machine()
    ctl.deploy("principal", world.charm("principal", principal=True), to=[m0, m1])
    ctl.settle()
    world.script("update-status", 'if [ "$(is-leader)" = True ]; then leader-set token=42; fi\n')
    ctl.update_status()
    ctl.settle()
    assert ctl.hooks("principal/1")[-1] == "leader-settings-changed"
    assert ctl.hooks("principal/0")[-1] == "update-status"
    assert ctl.model().app("principal")["leader-settings"] == {"token": "42"}


def test_failing_hook_puts_the_unit_in_error(cluster):
    ctl = cluster.ctl
    marker = cluster.out / "fail"
    marker.write_text("yes")
    cluster.script("install", f"""
        relation-set -r $(relation-ids cni) cidr=lost || true
        status-set maintenance "installing"
        echo "about to fail" >&2
        if [ -e {marker} ]; then exit 3; fi
    """)
    rid = ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    assert ctl.hooks("flannel/0") == ["install"]
    run = ctl.hook_log[-1]
    assert (run.unit, run.hook, run.exit_code) == ("flannel/0", "install", 3)
    assert "about to fail" in run.stderr_tail
    unit = ctl.unit("flannel/0")
    assert unit["agent"] == {"status": "error", "message": 'hook failed: "install"',
                             "failed-hook": "install", "since": unit["agent"]["since"]}
    st = ctl.status()["applications"]["kubernetes-worker"]["units"]["kubernetes-worker/0"]
    sub = st["subordinates"]["flannel/0"]
    assert sub["workload-status"] == {"current": "error", "message": 'hook failed: "install"'}
    assert sub["juju-status"] == {"current": "idle"}
    assert 'hook failed: "install"' in ctl.format_status()
    assert ctl.relation_data(rid, "flannel/0").get("cidr") is None  # discarded
    assert ctl.pending() and all(e["unit"] == "flannel/0" for e in ctl.pending())
    # nothing more runs for the unit, however often we settle
    assert ctl.settle() == []
    assert "hook \"install\" (via hook dispatching script: install) failed: exit status 3" in \
        ctl.unit_log("flannel/0")
    # resolve retries the hook; now it passes and the rest follows
    marker.unlink()
    ctl.resolve("flannel/0")
    ctl.settle()
    assert ctl.hooks("flannel/0")[:2] == ["install", "install"]
    assert ctl.hooks("flannel/0")[-1] == "cni-relation-changed"
    assert ctl.unit("flannel/0")["agent"]["status"] == "idle"
    assert ctl.relation_data(rid, "flannel/0").get("cidr") == "lost"  # the retry committed
    with pytest.raises(ModelError):
        ctl.resolve("flannel/0")


def test_resolve_without_retry_skips_the_hook(cluster):
    ctl = cluster.ctl
    cluster.script("config-changed", "exit 1\n")
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    assert ctl.hooks("flannel/0")[-1] == "config-changed"
    ctl.resolve("flannel/0", retry=False)
    ctl.settle()
    hooks = ctl.hooks("flannel/0")
    assert hooks.count("config-changed") == 1
    assert hooks[hooks.index("config-changed") + 1] == "start"
    assert ctl.unit("flannel/0")["started"]


def test_failing_teardown_blocks_removal_until_resolved(cluster):
    ctl = cluster.ctl
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    cluster.script("cni-relation-broken", "exit 1\n")
    ctl.remove_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    assert ctl.units("flannel") == ["flannel/0"]
    assert ctl.unit("flannel/0")["life"] == "dying"
    assert ctl.hooks("kubernetes-worker/0")[-1] == "cni-relation-broken"
    # the relation is gone for the worker, still dying for the stuck unit,
    # and Juju refuses the same relation until it is removed
    cni = ctl.model().relations()[-1]
    assert cni["life"] == "dying" and cni["pending-broken"] == ["flannel/0"]
    with pytest.raises(ModelError, match="already exists"):
        ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    (cluster.scripts / "cni-relation-broken").unlink()
    ctl.resolve("flannel/0")
    ctl.settle()
    assert ctl.units("flannel") == []
    assert ctl.hooks("flannel/0")[-2:] == ["stop", "remove"]
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    assert ctl.units("flannel") == ["flannel/1"]


def test_settle_is_bounded(world):
    ctl = world.ctl
    m0 = world.add_machine()
    ctl.deploy("principal", world.charm("principal", principal=True), to=[m0])
    ctl.deploy("sub", world.charm("sub"))
    # each side answers every change with a new value: a hook loop
    world.script("cni-relation-changed", "relation-set n=$RANDOM$RANDOM\n")
    ctl.add_relation("sub:cni", "principal:cni")
    with pytest.raises(SettleError):
        ctl.settle(max_hooks=40)


def test_errors_of_model_operations(cluster):
    ctl = cluster.ctl
    with pytest.raises(ModelError):
        ctl.add_relation("flannel:etcd", "etcd:db")  # exists
    with pytest.raises(ModelError):
        ctl.add_relation("flannel:cni", "etcd:db")  # interface mismatch
    with pytest.raises(ModelError):
        ctl.remove_relation("flannel:cni", "kubernetes-worker:cni")  # not there
    with pytest.raises(ModelError):
        ctl.deploy("flannel", cluster.charm("again"))
    with pytest.raises(ModelError):
        ctl.attach_resource("flannel", "nope", cluster.tmp)
    with pytest.raises(ModelError):
        ctl.add_unit("flannel", cluster.m0)  # subordinate


def test_status_table(cluster):
    ctl = cluster.ctl
    cluster.script("start", 'status-set active "Flannel subnet 10.1.52.1/24"\n'
                            'application-version-set 0.28.9\n')
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    st = ctl.status()
    fl = st["applications"]["flannel"]
    assert fl["subordinate"] and fl["subordinate-to"] == ["kubernetes-worker"]
    assert fl["version"] == "0.28.9"
    assert fl["application-status"] == {"current": "active",
                                        "message": "Flannel subnet 10.1.52.1/24"}
    kw = st["applications"]["kubernetes-worker"]["units"]["kubernetes-worker/0"]
    assert kw["machine"] == cluster.m0 and kw["public-address"] == "10.99.0.10"
    sub = kw["subordinates"]["flannel/0"]
    assert sub["leader"] and sub["juju-status"] == {"current": "idle"}
    assert st["applications"]["etcd"]["relations"]["db"][0]["related-application"] == "flannel"
    table = ctl.format_status()
    lines = table.splitlines()
    assert lines[0].split() == ["Model", "Controller", "Cloud/Region", "Version"]
    app_line = next(x for x in lines if x.startswith("flannel "))
    assert app_line.split()[:5] == ["flannel", "0.28.9", "active", "1", "testsub"]
    unit_line = next(x for x in lines if x.strip().startswith("flannel/0"))
    assert unit_line.startswith("  flannel/0*")
    assert unit_line.split()[1:4] == ["active", "idle", "10.99.0.10"]
    assert unit_line.endswith("Flannel subnet 10.1.52.1/24")
    assert any(x.startswith("kubernetes-worker/0*") for x in lines)
    assert any(x.split()[:3] == ["0", "started", "10.99.0.10"] for x in lines)
