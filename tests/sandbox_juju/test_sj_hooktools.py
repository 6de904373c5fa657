"""The emulated hook tools: flags, formats and errors as Juju's."""

from __future__ import annotations

import json

import pytest
import yaml


@pytest.fixture
def related(cluster):
    ctl = cluster.ctl
    cluster.cni = ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    cluster.etcd_rid = ctl.relation_id("flannel:etcd", "etcd:db")
    ctl.settle()
    return cluster


def run(world, *argv, unit="flannel/0", relation=None, remote=None, input=None):
    cp = world.ctl.exec(unit, list(argv), relation=relation, remote_unit=remote, input=input)
    return cp.returncode, cp.stdout.decode(), cp.stderr.decode()


def ok(world, *argv, **kw):
    rc, out, err = run(world, *argv, **kw)
    assert rc == 0, (argv, rc, err)
    return out


def test_relation_ids_formats(related):
    cni = f"cni:{related.cni}"
    assert ok(related, "relation-ids", "cni") == cni + "\n"
    assert json.loads(ok(related, "relation-ids", "--format=json", "cni")) == [cni]
    assert yaml.safe_load(ok(related, "relation-ids", "--format", "yaml", "cni")) == [cni]
    assert json.loads(ok(related, "relation-ids", "--format=json", "nope")) == []
    # defaults to the current relation's endpoint
    assert ok(related, "relation-ids", relation=related.etcd_rid) == f"etcd:{related.etcd_rid}\n"
    rc, _, err = run(related, "relation-ids")
    assert rc == 2 and err.startswith("ERROR no endpoint name specified")


def test_relation_list(related):
    cni = f"cni:{related.cni}"
    assert json.loads(ok(related, "relation-list", "--format=json", "-r", cni)) == \
        ["kubernetes-worker/0"]
    assert ok(related, "relation-list", "-r", str(related.cni)) == "kubernetes-worker/0\n"
    assert ok(related, "relation-list", "--relation", cni, "--app") == "kubernetes-worker\n"
    assert json.loads(ok(related, "relation-list", "--format=json", relation=related.etcd_rid)) \
        == ["etcd/0"]
    rc, _, err = run(related, "relation-list")
    assert rc == 2 and "no relation id specified" in err
    rc, _, err = run(related, "relation-list", "-r", "cni:99")
    assert rc == 2 and 'invalid value "cni:99" for option -r: relation not found' in err


def test_relation_get_formats_and_defaults(related):
    etcd = f"etcd:{related.etcd_rid}"
    data = json.loads(ok(related, "relation-get", "--format=json", "-r", etcd, "-", "etcd/0"))
    assert data["connection_string"] == "https://10.99.0.2:2379"
    assert data["client_key"] == "KEY PEM" and data["version"] == "3.4.22"
    assert data["private-address"] == "10.99.0.2"
    # smart format: a string prints as is, a map as YAML
    assert ok(related, "relation-get", "-r", etcd, "version", "etcd/0") == "3.4.22\n"
    assert yaml.safe_load(ok(related, "relation-get", "-r", etcd, "-", "etcd/0")) == data
    # unit defaults to JUJU_REMOTE_UNIT
    assert ok(related, "relation-get", "version", relation=related.etcd_rid,
              remote="etcd/0") == "3.4.22\n"
    # a missing key: nothing (smart), null (json)
    assert ok(related, "relation-get", "-r", etcd, "nope", "etcd/0") == ""
    assert ok(related, "relation-get", "--format=json", "-r", etcd, "nope", "etcd/0") == "null\n"
    rc, _, err = run(related, "relation-get", "-r", etcd, "-")
    assert rc == 2 and "no unit id specified" in err
    rc, _, err = run(related, "relation-get", "-r", etcd, "-", "kubernetes-worker/0")
    assert rc == 1 and "settings not found" in err
    # the remote application's databag (empty) and our own (leader only)
    assert json.loads(ok(related, "relation-get", "--format=json", "--app", "-r", etcd,
                         "-", "etcd")) == {}
    assert json.loads(ok(related, "relation-get", "--format=json", "--app", "-r", etcd,
                         "-", "flannel")) == {}


def test_relation_set_then_get_and_file(related):
    cni = f"cni:{related.cni}"
    ok(related, "relation-set", "-r", cni, "cidr=10.1.0.0/16", "cni-conf-file=10-flannel.conflist")
    got = json.loads(ok(related, "relation-get", "--format=json", "-r", cni, "-", "flannel/0"))
    assert got["cidr"] == "10.1.0.0/16" and got["cni-conf-file"] == "10-flannel.conflist"
    # --file: YAML, as charmhelpers writes it; "-" reads stdin; empty value deletes
    f = related.tmp / "settings.yaml"
    f.write_text(yaml.safe_dump({"cidr": "10.2.0.0/16", "n": 3, "gone": None}))
    ok(related, "relation-set", "-r", cni, "--file", str(f))
    ok(related, "relation-set", "-r", cni, "--file", "-", input=b"cni-conf-file: ''\nx: y\n")
    got = related.ctl.relation_data(related.cni, "flannel/0")
    assert got["cidr"] == "10.2.0.0/16" and got["n"] == "3" and got["x"] == "y"
    assert "cni-conf-file" not in got and "gone" not in got
    rc, _, err = run(related, "relation-set", "-r", cni, "novalue")
    assert rc == 2 and 'expected "key=value", got "novalue"' in err
    rc, _, err = run(related, "relation-set", "cidr=x")
    assert rc == 2 and "no relation id specified" in err


def test_relation_set_help_mentions_file(related):
    out = ok(related, "relation-set", "--help")
    assert "--file" in out and out.startswith("Usage: relation-set")
    for tool in ("relation-get", "config-get", "network-get", "status-set", "juju-log"):
        assert ok(related, tool, "--help").startswith(f"Usage: {tool}")


def test_unknown_flags_are_usage_errors(related):
    for argv in (["relation-ids", "--bogus", "cni"], ["config-get", "-x"],
                 ["status-set", "--now", "active"], ["relation-get", "--format=xml", "-"]):
        rc, out, err = run(related, *argv)
        assert rc == 2 and out == "" and err.startswith("ERROR "), argv
    rc, _, err = run(related, "config-get", "--bogus")
    assert err == "ERROR option provided but not defined: --bogus\n"


def test_app_databag_needs_leadership(related):
    ctl = related.ctl
    cni = f"cni:{related.cni}"
    ok(related, "relation-set", "--app", "-r", cni, "app-key=1")
    assert ctl.relation_data(related.cni, "flannel") == {"app-key": "1"}
    # make flannel/0 a non-leader: pretend another unit holds the lease
    with ctl.state.transaction() as data:
        data["applications"]["flannel"]["leader"] = "flannel/99"
    rc, _, err = run(related, "relation-set", "--app", "-r", cni, "app-key=2")
    assert rc == 1 and "permission denied" in err
    rc, _, err = run(related, "relation-get", "--app", "-r", cni, "-", "flannel")
    assert rc == 1 and "permission denied" in err
    assert ok(related, "is-leader") == "False\n"
    assert ok(related, "is-leader", "--format=json") == "false\n"
    rc, _, err = run(related, "leader-set", "a=b")
    assert rc == 1 and "not the leader" in err


def test_config_get(related):
    ctl = related.ctl
    ctl.config("flannel", subnet_len=26, debug=True)
    ctl.settle()
    allj = json.loads(ok(related, "config-get", "--all", "--format=json"))
    assert allj == {"cidr": "10.1.0.0/16", "subnet-len": 26, "debug": True, "iface": "",
                    "unset": None}
    assert "unset" not in json.loads(ok(related, "config-get", "--format=json"))
    assert ok(related, "config-get", "subnet-len") == "26\n"
    assert ok(related, "config-get", "debug") == "True\n"
    assert ok(related, "config-get", "--format=json", "debug") == "true\n"
    assert ok(related, "config-get", "iface") == ""
    assert ok(related, "config-get", "--format=json", "iface") == '""\n'
    assert ok(related, "config-get", "-a", "--format=yaml").startswith("cidr: 10.1.0.0/16\n")


def test_status_set_and_get(related):
    ctl = related.ctl
    ok(related, "status-set", "blocked", "Waiting for etcd relation.")
    assert ctl.unit("flannel/0")["workload"]["status"] == "blocked"
    assert ok(related, "status-get") == "blocked\n"
    assert json.loads(ok(related, "status-get", "--format=json", "--include-data")) == {
        "message": "Waiting for etcd relation.", "status": "blocked", "status-data": {}}
    ok(related, "status-set", "active")
    assert ctl.unit("flannel/0")["workload"]["message"] == ""
    for bad in ("error", "unknown", "terminated", "ACTIVE"):
        rc, _, err = run(related, "status-set", bad, "x")
        assert rc == 2 and f'invalid status "{bad}"' in err
    ok(related, "status-set", "--application", "active", "all good")
    assert ctl.status()["applications"]["flannel"]["application-status"] == {
        "current": "active", "message": "all good"}
    app = json.loads(ok(related, "status-get", "--application", "--format=json"))
    assert app["application-status"]["units"]["flannel/0"]["status"] == "active"


def test_juju_log_writes_the_unit_log_only(related):
    rc, out, err = run(related, "juju-log", "-l", "WARNING", "client_key", "is", "secret")
    assert (rc, out, err) == (0, "", "")
    rc, out, err = run(related, "juju-log", "--log-level=DEBUG", "plain")
    assert (rc, out) == (0, "")
    log = related.ctl.unit_log("flannel/0")
    assert "WARNING unit.flannel/0.juju-log client_key is secret" in log
    assert "DEBUG unit.flannel/0.juju-log plain" in log
    rc, _, err = run(related, "juju-log", "-l", "LOUD", "x")
    assert rc == 2
    # the tools log never holds the message
    calls = [c for c in related.ctl.tool_calls("flannel/0") if c["tool"] == "juju-log"]
    assert calls and all("secret" not in json.dumps(c) for c in calls)


def test_resource_get_present_and_missing(related):
    ctl = related.ctl
    rc, out, err = run(related, "resource-get", "flannel-amd64")
    assert rc == 1 and out == ""
    assert err.startswith("ERROR could not download resource: HTTP request failed: Get ")
    assert "resource#flannel/flannel-amd64 not found" in err
    rc, _, err = run(related, "resource-get", "bogus")
    assert rc == 1 and 'resource "bogus" not found' in err
    tarball = related.tmp / "upload.bin"
    tarball.write_bytes(b"\x1f\x8bresource bytes")
    ctl.attach_resource("flannel", "flannel-amd64", tarball)
    ctl.settle()
    path = ok(related, "resource-get", "flannel-amd64")
    agent_dir = ctl.unit("flannel/0")["agent-dir"]
    assert path == f"{agent_dir}/resources/flannel-amd64/flannel.tar.gz"  # no newline
    assert related.host("flannel/0", path).read_bytes() == b"\x1f\x8bresource bytes"


def test_network_get(related):
    full = yaml.safe_load(ok(related, "network-get", "cni", "--format", "yaml"))
    assert full["bind-addresses"][0]["interface-name"] == "eth0"
    assert full["bind-addresses"][0]["mac-address"] == "02:00:0a:63:00:0a"
    assert full["bind-addresses"][0]["addresses"] == [
        {"hostname": "", "address": "10.99.0.10", "cidr": "10.99.0.0/24", "value": "10.99.0.10"}]
    assert full["ingress-addresses"] == ["10.99.0.10"]
    assert full["egress-subnets"] == ["10.99.0.10/32"]
    # JSON without the YAML-only spellings (macaddress, interfacename, address)
    shown = json.loads(ok(related, "network-get", "--format=json", "etcd"))
    assert shown["bind-addresses"] == [{
        "interface-name": "eth0", "mac-address": "02:00:0a:63:00:0a",
        "addresses": [{"hostname": "", "cidr": "10.99.0.0/24", "value": "10.99.0.10"}]}]
    assert {k: v for k, v in shown.items() if k != "bind-addresses"} == \
        {k: v for k, v in full.items() if k != "bind-addresses"}
    # (as the charm asks it: hook.py's bind_addresses)
    assert json.loads(ok(related, "network-get", "cni", "--format", "json")) == shown
    assert ok(related, "network-get", "cni", "--primary-address") == "10.99.0.10\n"
    assert ok(related, "network-get", "--ingress-address", "cni") == "10.99.0.10\n"
    assert ok(related, "network-get", "cni", "--bind-address") == "10.99.0.10\n"
    both = yaml.safe_load(ok(related, "network-get", "cni", "--bind-address", "--ingress-address"))
    assert both == {"bind-address": "10.99.0.10", "ingress-address": "10.99.0.10"}
    assert ok(related, "network-get", "-r", f"cni:{related.cni}", "--ingress-address") == \
        "10.99.0.10\n"
    rc, _, err = run(related, "network-get", "bogus")
    assert rc == 1 and 'no network config found for binding "bogus"' in err
    assert ok(related, "unit-get", "private-address") == "10.99.0.10\n"
    assert ok(related, "unit-get", "--format=json", "public-address") == '"10.99.0.10"\n'


def test_misc_tools(related):
    ctl = related.ctl
    ok(related, "application-version-set", "v0.28.9")
    assert ctl.model().app("flannel")["version"] == "v0.28.9"
    ok(related, "leader-set", "a=1", "b=2")
    assert json.loads(ok(related, "leader-get", "--format=json")) == {"a": "1", "b": "2"}
    assert ok(related, "leader-get", "a") == "1\n"
    ok(related, "open-port", "8472/udp")
    ok(related, "open-port", "1000-1010")
    assert json.loads(ok(related, "opened-ports", "--format=json")) == ["8472/udp", "1000-1010/tcp"]
    ok(related, "close-port", "1000-1010/tcp")
    assert ok(related, "opened-ports") == "8472/udp\n"
    gs = json.loads(ok(related, "goal-state", "--format=json"))
    assert "flannel/0" in gs["units"] and "kubernetes-worker/0" in gs["relations"]["cni"]
    rc, _, err = run(related, "action-get")
    assert rc == 1 and "not running an action" in err
    rc, _, err = run(related, "juju-reboot")
    assert rc == 1 and "not supported" in err


def test_jujud_version(related):
    ctl = related.ctl
    mid = ctl.unit("flannel/0")["machine"]
    jujud = ctl.executor_for("flannel/0").machine_path(f"/var/lib/juju/tools/machine-{mid}/jujud")
    cp = ctl.exec("flannel/0", [jujud, "version"])
    assert cp.stdout.decode() == "3.6.4-ubuntu-amd64\n"


def test_tools_inside_a_hook_see_the_hook_context(related):
    """The same tools as a charm sees them in a relation hook."""
    ctl = related.ctl
    out = related.out / "changed.txt"
    related.script("cni-relation-changed", f"""
        {{
          echo "hook=$JUJU_HOOK_NAME rel=$JUJU_RELATION relid=$JUJU_RELATION_ID"
          echo "remote=$JUJU_REMOTE_UNIT app=$JUJU_REMOTE_APP principal=$JUJU_PRINCIPAL_UNIT"
          echo "charm_dir=$CHARM_DIR pwd=$(pwd) lang=$LANG"
          relation-get kubeconfig_path
          relation-list
        }} > {out}
    """)
    # the worker publishes something new in one of its hooks
    related.worker.extra_data["image-registry"] = "rocks.canonical.com"
    related.worker.on_upgrade_charm = lambda c: c.relation_set(
        rid=related.cni, **related.worker.published())
    ctl.fire("kubernetes-worker/0", "upgrade-charm")
    ctl.settle()
    lines = out.read_text().splitlines()
    charm_dir = ctl.unit("flannel/0")["charm-dir"]
    assert lines[0] == f"hook=cni-relation-changed rel=cni relid=cni:{related.cni}"
    assert lines[1] == "remote=kubernetes-worker/0 app=kubernetes-worker " \
                       "principal=kubernetes-worker/0"
    assert lines[2] == f"charm_dir={charm_dir} pwd={charm_dir} lang=C.UTF-8"
    assert lines[3] == "/root/cdk/kubeconfig"
    assert lines[4] == "kubernetes-worker/0"
