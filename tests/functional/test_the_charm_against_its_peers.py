"""The charm against what its peers and the machine really do: one
machine, one deploy, one scenario per test in
order, each a user's action and what `juju status`, the principal, etcd and
the machine show after it.

The charm at af418f6 failed each of them, as its docstring says.
"""
from __future__ import annotations

import json

import pytest
import yaml
from functional_kit import (CHECK_FILE, READY_CHECK_FILE, NrpeApp, deploy_and_wait,
                            wait_until_flanneld_is_older_than)

from charms.flannel.facts.flanneld import READY_GRACE
from sandbox.cluster import CNI_RELATION, NETWORK_PREFIX

# the module's tests share its cluster(s): one pytest-xdist worker runs them all
pytestmark = [pytest.mark.functional, pytest.mark.xdist_group("the_charm_against_its_peers")]

# Wraps the machine's systemctl: logs every call, and fails `daemon-reload`
# once while FAIL_FLAG exists (a hook dying between writing the unit file
# and reloading systemd).
CALLS = "/run/charmfix-systemctl.calls"
FAIL_FLAG = "/run/charmfix-fail-daemon-reload"
WRAPPER = """#!/bin/sh
echo "$*" >> {calls}
if [ "$1" = daemon-reload ] && [ -e {flag} ]; then
  rm -f {flag}; echo "injected failure" >&2; exit 1
fi
exec {real} "$@"
"""


@pytest.fixture(scope="module")
def cluster(open_cluster):
    with open_cluster("charm vs peers", workers=1) as opened:
        deploy_and_wait(opened)
        yield opened


def idle(cluster):
    cluster.controller.update_status("flannel")
    cluster.settle()


def unit_of(cluster):
    return cluster.unit_on("m1")


def published_cidr(cluster) -> str:
    rid = cluster.controller.relation_id(*CNI_RELATION)
    return cluster.controller.relation_data(rid, unit_of(cluster)).get("cidr", "")


def leases(cluster) -> list[str]:
    prefix = f"{NETWORK_PREFIX}/subnets/"
    return sorted(key[len(prefix):] for key in cluster.etcd_values(prefix))


def test_the_nagios_check_comes_and_goes_with_nrpe_and_is_written_only_when_it_changes(
        cluster):
    """The checks for flanneld (running; ready, asking its /readyz) are
    written and published when nrpe is related, work, and go with the
    relation; they are written and published again only when a nagios
    option changes. The charm at af418f6 rewrote it and
    published `monitors` again (relation-set) in every hook, and restarted
    nagios-nrpe-server in every hook but update-status: it failed this test
    on the relation-set calls of config-changed (8 where none is wanted);
    the checks of the file, the command and the removal passed for it."""
    ctl, machine, unit = cluster.controller, cluster.machines["m1"], unit_of(cluster)
    ctl.deploy(NrpeApp())
    ctl.add_relation("nrpe:general-info", "kubernetes-worker:juju-info")
    ctl.add_relation("flannel:nrpe-external-master", "nrpe:nrpe-external-master")
    cluster.settle()
    config = (machine.read_file(CHECK_FILE) or b"").decode()
    assert "command[check_flannel]=/usr/lib/nagios/plugins/check_procs" in config, config
    command = config.split("command[check_flannel]=", 1)[1].split("\n", 1)[0]
    check = machine.run(command.split(), check=False)
    assert check.returncode == 0 and "OK" in check.stdout, check.stdout + check.stderr
    rid = ctl.relation_id("flannel:nrpe-external-master", "nrpe:nrpe-external-master")
    published = yaml.safe_load(ctl.relation_data(rid, unit)["monitors"])
    assert published["monitors"]["remote"]["nrpe"]["flannel"] == {"command": "check_flannel"}
    # (Whether check_procs goes critical without flanneld can't be shown
    # here: the sandbox's machines share one PID namespace, so it counts
    # every machine's flanneld. The readiness check asks the machine's own
    # loopback.)
    ready_config = (machine.read_file(READY_CHECK_FILE) or b"").decode()
    ready = ready_config.split("command[check_flannel-ready]=", 1)[1].split("\n", 1)[0]
    assert ready.startswith("/usr/lib/nagios/plugins/check_http -I 127.0.0.1 -p 8474 -u /readyz")
    check = machine.run(ready.split(), check=False)
    assert check.returncode == 0 and "200 OK" in check.stdout, check.stdout + check.stderr
    assert published["monitors"]["remote"]["nrpe"]["flannel-ready"] == {
        "command": "check_flannel-ready"}
    written = machine.path_on_host(CHECK_FILE).stat().st_mtime_ns
    calls = len(ctl.tool_calls(unit))
    ctl.fire(unit, "config-changed")
    idle(cluster)
    hooks_calls = ctl.tool_calls(unit)[calls:]
    assert {c["hook"] for c in hooks_calls} >= {"config-changed", "update-status"}
    assert [c for c in hooks_calls if c["tool"] == "relation-set"] == []
    assert machine.path_on_host(CHECK_FILE).stat().st_mtime_ns == written
    # A nagios option is an input: the check is written (and published) again.
    calls = len(ctl.tool_calls(unit))
    cluster.configure(nagios_servicegroups="flannel-group")
    assert [c for c in ctl.tool_calls(unit)[calls:] if c["tool"] == "relation-set"]
    assert machine.path_on_host(CHECK_FILE).stat().st_mtime_ns != written

    # A hung flanneld (SIGSTOP: systemd still says active) is not ready: the
    # check goes critical and the unit is not active until it answers again.
    [pid] = cluster.flanneld_pids("m1")
    # the charm does not ask a flanneld that started less than 10 s ago (READY_GRACE)
    wait_until_flanneld_is_older_than(cluster, "m1", READY_GRACE + 1)
    machine.run(["kill", "-STOP", str(pid)])
    try:
        check = machine.run(ready.split(), check=False)
        assert check.returncode == 2, check.stdout + check.stderr      # CRITICAL
        idle(cluster)
        assert cluster.workload(unit) == ("waiting", "flanneld is not ready: 127.0.0.1:8474/"
                                                     "readyz did not answer 200 (journalctl -u "
                                                     "flannel)")
    finally:
        machine.run(["kill", "-CONT", str(pid)])
    idle(cluster)
    assert cluster.workload(unit)[0] == "active", cluster.workload(unit)
    assert cluster.flanneld_pids("m1") == [pid]

    ctl.remove_relation("flannel:nrpe-external-master", "nrpe:nrpe-external-master")
    cluster.settle()
    assert machine.read_file(CHECK_FILE) is None
    assert machine.read_file(READY_CHECK_FILE) is None


def test_a_missing_cni_plugin_is_named_in_the_status_and_clears_itself(cluster):
    """A plugin missing from /opt/cni/bin, or not executable, blocks the
    unit with a status naming it, which clears once the plugin is back. A
    charm without this check stayed "active" while every new pod failed with
    libcni's 'failed to find plugin "bridge"', and failed this test with
    ('active', 'Flannel subnet ...') != ('blocked', ...)."""
    machine = cluster.machines["m1"]
    unit = unit_of(cluster)
    bridge = machine.read_file("/opt/cni/bin/bridge")
    machine.run(["rm", "/opt/cni/bin/bridge"])
    idle(cluster)
    assert cluster.workload(unit) == (
        "blocked", 'CNI plugin "bridge" missing from /opt/cni/bin (provided by the principal)')
    machine.write_file("/opt/cni/bin/bridge", bridge, 0o644)
    idle(cluster)
    assert cluster.workload(unit) == (
        "blocked",
        'CNI plugin "bridge" in /opt/cni/bin is not executable (provided by the principal)')
    machine.run(["chmod", "0755", "/opt/cni/bin/bridge"])
    idle(cluster)
    assert cluster.workload(unit)[0] == "active", cluster.workload(unit)


def test_an_iface_that_does_not_exist_is_refused_and_flanneld_keeps_running(cluster):
    """An iface that is not an interface of this machine blocks the unit
    with a status naming it, and flanneld keeps running. A charm that took
    it stopped flanneld, the new one failed on the missing interface, and
    the unit said only "Waiting for flannel.service to start." (failing this
    test with 'waiting' != 'blocked')."""
    unit = unit_of(cluster)
    before = cluster.flanneld_pids("m1")
    cluster.configure(iface="nosuch0")
    assert cluster.workload(unit) == (
        "blocked", 'Invalid iface: "nosuch0" is not an interface of this machine')
    assert cluster.flanneld_pids("m1") == before
    idle(cluster)
    assert cluster.flanneld_pids("m1") == before
    cluster.configure(iface="")
    cluster.wait_for_flannel(timeout=60)
    assert cluster.flanneld_pids("m1") == before   # nothing it reads changed


def test_a_hook_that_died_before_daemon_reload_reloads_on_retry(cluster):
    """A hook that died between writing the unit file and daemon-reload
    runs daemon-reload when retried. A charm whose retried hook found the
    unit file already written (install() -> False) never ran it, and systemd
    kept the old unit; it failed this test with the retry's systemctl calls
    ['stop flannel', 'start flannel', 'restart nagios-nrpe-server',
    'is-active flannel']."""
    machine = cluster.machines["m1"]
    unit = unit_of(cluster)
    real = machine.run(["sh", "-c", "command -v systemctl"]).stdout.strip()
    machine.run(["mv", real, real + ".real"])
    machine.write_file(real, WRAPPER.format(calls=CALLS, flag=FAIL_FLAG, real=real + ".real"),
                       0o755)
    cluster.controller.auto_retry = False   # the test resolves by hand
    try:
        machine.write_file(FAIL_FLAG, "")
        cluster.configure(iface=machine.address)   # a new unit file: -iface <address>
        assert any(run.unit == unit and not run.ok for run in cluster.controller.hook_log[-5:])
        machine.write_file(CALLS, "")
        cluster.controller.resolve(unit, retry=True)
        cluster.settle()
        calls = (machine.read_file(CALLS) or b"").decode().splitlines()
        assert "daemon-reload" in calls, calls
        cluster.wait_for_flannel(timeout=60)
        unit_file = machine.read_file("/lib/systemd/system/flannel.service").decode()
        assert f"-iface={machine.address}" in unit_file or f"-iface {machine.address}" in \
            unit_file, unit_file
    finally:
        machine.run(["mv", real + ".real", real])
        cluster.controller.auto_retry = True
    cluster.configure(iface="")
    cluster.wait_for_flannel(timeout=60)


def test_a_refused_backend_change_keeps_the_network_and_its_way_out_works(cluster):
    """During a refused change the principal keeps the network its pods
    use, and the refusal's message names a way out. A charm that told the
    principal cidr 10.2.0.0/16 (the option) while etcd, flanneld and every
    pod stayed on 10.1.0.0/16, with a message naming no way out that works,
    failed this test.
    And the way out works: each unit releases its lease as it stops. A charm
    that left the stopped unit's lease in etcd (24 h TTL, flanneld does not
    revoke it) kept the units blocked on "1 node holds a lease" for a day
    after remove/add, and failed this test with the leases after
    remove-relation ['10.1.36.0-24'], not []."""
    unit = unit_of(cluster)
    assert published_cidr(cluster) == "10.1.0.0/16"
    cluster.configure(cidr="10.2.0.0/16", backend="host-gw")
    assert published_cidr(cluster) == "10.1.0.0/16"
    state, message = cluster.workload(unit)
    assert state == "blocked" and message.startswith(
        "Invalid backend: cannot change from vxlan to host-gw while 1 node holds a lease;"), \
        message
    assert "remove flannel from every node (each unit releases its lease as it stops)" in message
    assert cluster.network_config()["Network"] == "10.1.0.0/16"

    # the way out the message names
    assert len(leases(cluster)) == 1
    cluster.remove_cni_relation()
    assert leases(cluster) == []
    cluster.add_cni_relation()
    cluster.wait_for_flannel(timeout=180)
    config = cluster.network_config()
    assert config["Backend"]["Type"] == "host-gw" and config["Network"] == "10.2.0.0/16"
    assert published_cidr(cluster) == "10.2.0.0/16"
    assert cluster.start_pod("m1").address.startswith("10.2.")
    print(json.dumps(cluster.etcd_values(f"{NETWORK_PREFIX}/subnets/"))[:300])


def test_the_observability_agent_gets_flannel_s_rules_and_dashboard(cluster):
    """`juju integrate flannel:cos-agent opentelemetry-collector:cos-agent`,
    the built charm through the sandbox's Juju: charms.reactive hands a
    relation hook's handler its endpoint once an interface layer implements
    it, and flannel's cos-agent-relation-joined died with a TypeError,
    nothing published. The agent reads the databag as its library does
    (JSON, each dashboard base64 and lzma), and a change on its side runs
    flannel's -changed hook, which fails no more."""
    import base64
    import lzma
    from sandbox.juju import CosAgentApp
    ctl, unit = cluster.controller, unit_of(cluster)
    failed = len(cluster.failed_hooks())
    agent = CosAgentApp()
    ctl.deploy(agent)
    ctl.add_relation("opentelemetry-collector:juju-info", "kubernetes-worker:juju-info")
    ctl.add_relation("flannel:cos-agent", "opentelemetry-collector:cos-agent")
    cluster.settle()
    [config] = agent.received.values()
    data = json.loads(config)
    alerts = {rule["alert"] for group in data["metrics_alert_rules"]["groups"]
              for rule in group["rules"]}
    assert {"FlannelServiceNotActive", "FlannelVxlanDeviceMissing"} <= alerts, alerts
    [dashboard] = [json.loads(lzma.decompress(base64.b64decode(text)))
                   for text in data["dashboards"]]
    assert dashboard["title"] == "Flannel"

    def ran() -> list:
        return [(h.hook, h.ok) for h in ctl.hook_log if h.unit == unit and h.hook.startswith(
            "cos-agent-relation-")]
    assert ("cos-agent-relation-joined", True) in ran(), ran()
    before = ran().count(("cos-agent-relation-changed", True))
    agent.receivers = json.dumps({"otlp_http": "http://10.0.0.9:4318"})
    agent.fire()
    cluster.settle()
    assert ran().count(("cos-agent-relation-changed", True)) == before + 1, ran()
    assert cluster.failed_hooks()[failed:] == []
    assert cluster.workload(unit)[0] == "active", cluster.workload(unit)
    ctl.remove_relation("flannel:cos-agent", "opentelemetry-collector:cos-agent")
    cluster.settle()
    assert cluster.failed_hooks()[failed:] == []
