"""The status an operator sees, for each state the unit can be in.

steps/status.py turns what a hook sees (the flags, what steps recorded,
the files on the node, flanneld's lease, whether flannel.service runs) into
problems; facts/status.py shows the one to act on first. The unit here is
real files below the test's directory, its state in a real unitdata store,
and flannel.service run by systemctl3 (docker-systemctl-replacement, the
sandbox machines' systemd: this machine runs none).
"""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import stepkit

from charms.flannel.adapters.machine import Machine
from charms.flannel.facts.status import FIXED_TEXTS, Problem, Status, choose
from charms.flannel.steps.context import EtcdRelation
from charms.flannel.steps.status import Seen, gather, status

VXLAN = {"Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan", "VNI": 1}}
DUAL = {**VXLAN, "EnableIPv6": True, "IPv6Network": "fd10:1::/56", "IPv6SubnetLen": 64}
SUBNET_ENV = """FLANNEL_NETWORK=10.1.0.0/16
FLANNEL_SUBNET=10.1.52.1/24
FLANNEL_MTU=1450
FLANNEL_IPMASQ=true
"""
DUAL_ENV = SUBNET_ENV + "FLANNEL_IPV6_NETWORK=fd10:1::/56\nFLANNEL_IPV6_SUBNET=fd10:1:0:5::1/64\n"
HEALTHY = Seen(installed=True, series_upgrade=False, network_configured=True,
               service_started=True, cni_configured=True)
ETCD = EtcdRelation("https://10.0.0.5:2379", "CA", "CERT", "KEY")
PLUGINS = ("flannel", "bridge", "host-local", "portmap", "loopback")


# --- flannel.service, run by systemctl3 -------------------------------------------------

def systemctl3():
    found = Path(sys.executable).with_name("systemctl3")
    return str(found) if found.exists() else shutil.which("systemctl3")


def with_systemd(root: Path, inner: Machine | None = None) -> Machine:
    """`inner` (this machine by default) whose systemd is systemctl3 on the
    units below `root` (root/lib/systemd/system)."""
    inner = inner or Machine()
    if not systemctl3():
        pytest.skip("docker-systemctl-replacement (systemctl3) is not installed")

    def runner(argv, *, check, input=None):
        if argv[0] == "systemctl":
            argv = [systemctl3(), f"--root={root}", *argv[1:]]
        return inner.run(argv, check=check, input=input)
    return Machine(runner=runner)


def write_unit(root: Path, command: str = "/bin/sleep 600") -> Path:
    """flannel.service below `root`, running a stand-in for flanneld."""
    unit = root / "lib" / "systemd" / "system" / "flannel.service"
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text(f"[Unit]\nDescription=flannel\n[Service]\nType=simple\n"
                    f"ExecStart={command}\nRestart=always\n[Install]\n"
                    "WantedBy=multi-user.target\n")
    return unit


@pytest.fixture(scope="module")
def flanneld_running(tmp_path_factory):
    """A root whose flannel.service is active (one for the module: only
    `systemctl is-active` is asked of it)."""
    root = tmp_path_factory.mktemp("systemd")
    write_unit(root)
    machine = with_systemd(root)
    assert machine.run(["systemctl", "start", "flannel"], check=False).returncode == 0
    yield root
    machine.run(["systemctl", "stop", "flannel"], check=False)


# --- a unit -----------------------------------------------------------------------------

def unit(tmp_path, systemd_root: Path, *, config=None, network=VXLAN, subnet_env=SUBNET_ENV):
    """A unit whose flanneld holds a lease of the network etcd confirmed,
    with the CNI chain complete and the conflist in place."""
    ctx = stepkit.context(tmp_path, machine=with_systemd(systemd_root), config=config, etcd=ETCD)
    paths = ctx.paths
    paths.cni_bin_dir.mkdir(parents=True)
    for name in PLUGINS:
        (paths.cni_bin_dir / name).write_text("#!/bin/sh\n")
        os.chmod(paths.cni_bin_dir / name, 0o755)
    paths.cni_conf_dir.mkdir(parents=True)
    paths.cni_conflist.write_text(json.dumps({
        "name": "CDK-flannel-network", "cniVersion": "0.3.1",
        "plugins": [{"type": "flannel"}, {"type": "portmap"}]}))
    ctx.state.confirmed_network = network
    if subnet_env is not None:
        paths.subnet_env.parent.mkdir(parents=True)
        paths.subnet_env.write_text(subnet_env)
    return ctx


def shown(ctx, seen: Seen = HEALTHY) -> tuple[str, str]:
    result = status(ctx, seen, ctx.lease())
    return result.state, result.message


@pytest.fixture
def running(tmp_path, flanneld_running):
    """A healthy unit whose flanneld runs."""
    return unit(tmp_path, flanneld_running)


@pytest.fixture
def stopped(tmp_path):
    """The same unit, its flannel.service not running."""
    return unit(tmp_path, tmp_path / "node")


# --- what the operator sees --------------------------------------------------------------

def test_a_healthy_unit_shows_its_subnet(running):
    assert gather(running, HEALTHY, running.lease()) == []
    assert shown(running) == ("active", "Flannel subnet 10.1.52.1/24")


def without_etcd(ctx, seen=HEALTHY) -> Seen:
    ctx.juju.related_to_etcd, ctx.juju.etcd_relation = False, None
    return seen


def without_credentials(ctx, seen=HEALTHY) -> Seen:
    ctx.juju.etcd_relation = None   # (related: etcd's unit has not published them yet)
    return seen


def test_without_etcd_the_unit_is_blocked_waiting_for_the_relation(running):
    assert shown(running, without_etcd(running)) == ("blocked", "Waiting for etcd relation.")


def test_before_flanneld_writes_subnet_env_the_unit_is_negotiating(running):
    running.paths.subnet_env.unlink()
    assert shown(running) == ("waiting", "Negotiating flannel network subnet.")


def test_a_subnet_outside_a_new_cidr_is_not_reported_as_active(running):
    """subnet.env left from before a cidr change is stale until flanneld
    leases anew: claiming it would be a lie."""
    running.state.confirmed_network = {**VXLAN, "Network": "10.9.0.0/16"}
    assert shown(running) == ("waiting", "Negotiating flannel network subnet.")


def test_a_lease_of_another_subnet_len_is_negotiating(running):
    running.state.confirmed_network = {**VXLAN, "SubnetLen": 26}
    assert shown(running) == ("waiting", "Negotiating flannel network subnet.")


def set_resource(ctx, seen):
    ctx.state.set_problem(Problem.RESOURCE, "Missing resource flannel-amd64: attach it with "
                                            "juju attach-resource")
    return seen


def set_etcd(ctx, seen):
    ctx.state.set_problem(Problem.ETCD, "cannot reach etcd: https://10.0.0.5:2379 "
                                        "(connection refused)")
    return seen


@pytest.mark.parametrize("override, expected", [
    (set_resource, ("blocked", "Missing resource flannel-amd64: attach it with juju "
                               "attach-resource")),
    (lambda ctx, seen: seen._replace(series_upgrade=True),
     ("blocked", "Series upgrade in progress")),
    (lambda ctx, seen: seen._replace(installed=False),
     ("maintenance", "Installing flannel.")),
    (without_credentials, ("waiting", "Waiting for etcd client credentials.")),
    (set_etcd, ("waiting", "cannot reach etcd: https://10.0.0.5:2379 (connection refused)")),
    (lambda ctx, seen: seen._replace(network_configured=False),
     ("waiting", "Waiting to write the flannel network to etcd.")),
], ids=["resource", "series-upgrade", "installing", "credentials", "etcd", "network"])
def test_each_problem_is_named_in_the_status(running, override, expected):
    seen = override(running, HEALTHY)
    assert shown(running, seen) == expected


def test_an_invalid_option_is_named_in_the_status(tmp_path, flanneld_running):
    ctx = unit(tmp_path, flanneld_running, config={"vni": 0})
    assert shown(ctx) == ("blocked", "Invalid vni: 0 is out of range; use 1 to 9999999 "
                                     "(flanneld's device flannel.<vni> must fit Linux's "
                                     "15-character names)")


def test_bad_config_outranks_a_missing_etcd_relation(tmp_path, flanneld_running):
    # The operator can fix the option now; the relation may be on its way.
    ctx = unit(tmp_path, flanneld_running, config={"cidr": "x"})
    assert shown(ctx, without_etcd(ctx)) == ("blocked", 'Invalid cidr: "x" is not an IPv4 '
                                                        'network')


def test_a_broken_cni_chain_is_blocked_with_the_plugin_named(running):
    """flanneld is fine, but no pod on this node can start: the unit must
    not show active."""
    (running.paths.cni_bin_dir / "bridge").unlink()
    assert shown(running) == ("blocked", f'CNI plugin "bridge" missing from '
                                         f'{running.paths.cni_bin_dir} (provided by the '
                                         'principal)')


def test_a_config_the_container_runtime_fails_on_first_is_blocked(running):
    """containerd reads the configs in name order and gives up on the first
    that does not load, before it reaches flannel's."""
    broken = running.paths.cni_conf_dir / "05-broken.conflist"
    broken.write_text("{")
    state, message = shown(running)
    assert state == "blocked"
    assert message.startswith(f"CNI config {broken} is not JSON (")
    assert message.endswith("): the container runtime starts no pod")


def test_a_flanneld_that_exited_after_its_start_is_failing_not_starting(stopped):
    """A crash-looping flanneld (a broken binary in the resource) is not
    one that is still starting, hook after hook."""
    assert shown(stopped) == (
        "waiting", "flannel.service is failing: flanneld exited after start "
                   "(journalctl -u flannel)")
    assert shown(stopped, HEALTHY._replace(service_started=False)) == (
        "waiting", "Waiting for flannel.service to start.")


def test_a_flanneld_started_with_other_inputs_is_starting_even_while_it_runs(running):
    """Its inputs changed and it is restarted: it is not on its lease yet."""
    assert shown(running, HEALTHY._replace(service_started=False)) == (
        "waiting", "Waiting for flannel.service to start.")


def test_a_damaged_install_record_blocks_and_names_the_record(running):
    problem = "Install record /var/lib/juju/agents/unit-flannel-0/flannel-install-record/" \
              "record.json is missing"
    running.state.set_problem(Problem.RECORD, problem)
    expected = ("blocked", problem + ": no file is changed; remove and re-add flannel "
                                     "(unproven files stay)")
    assert shown(running) == expected
    # whatever else is wrong: nothing is written or removed until the operator acts
    running.state.set_problem(Problem.RESOURCE, "Missing resource flannel-amd64")
    assert shown(running, Seen(series_upgrade=True)) == expected


def test_a_dual_stack_unit_names_both_subnets(tmp_path, flanneld_running):
    ctx = unit(tmp_path, flanneld_running, network=DUAL, subnet_env=DUAL_ENV)
    assert shown(ctx) == ("active", "Flannel subnet 10.1.52.1/24, fd10:1:0:5::1/64")


@pytest.mark.parametrize("subnet_env, network", [
    (SUBNET_ENV, DUAL),                                # IPv6 just turned on: no IPv6 lease yet
    (DUAL_ENV, VXLAN),                                 # just turned off: the old dual lease
    (DUAL_ENV, {**DUAL, "IPv6Network": "fd20::/56"}),  # another ipv6-cidr
], ids=["ipv6-on", "ipv6-off", "other-ipv6-cidr"])
def test_a_lease_of_the_other_ipv6_shape_is_negotiating_not_active(tmp_path, flanneld_running,
                                                                   subnet_env, network):
    """flanneld drops such a lease and leases anew (both families)."""
    ctx = unit(tmp_path, flanneld_running, network=network, subnet_env=subnet_env)
    assert shown(ctx) == ("waiting", "Negotiating flannel network subnet.")


def test_flannel_s_old_gateway_still_on_cni0_is_waiting_not_active(running):
    pending = "cni0 still holds flannel's old gateway 10.1.29.1/24: no new pod starts"
    running.state.set_problem(Problem.BRIDGE_STALE, pending)
    assert shown(running) == ("waiting", pending)


def test_an_address_on_cni0_that_is_not_flannel_s_blocks(running):
    foreign = "cni0 holds 192.168.9.1/24, which is not flannel's"
    running.state.set_problem(Problem.BRIDGE, foreign)
    running.state.set_problem(Problem.BRIDGE_STALE, "x")
    assert shown(running) == ("blocked", foreign)


def test_before_the_conflist_is_handed_to_the_principal_no_pod_can_start(running):
    """flanneld on its lease, etcd's hooks first: the cni relation's hooks
    have not run yet, so there is no flannel network config on the node."""
    running.paths.cni_conflist.unlink()
    assert shown(running, HEALTHY._replace(cni_configured=False)) == (
        "waiting", "Waiting for the principal on the cni relation.")


# --- the order, as facts/status.py ranks it ------------------------------------------------

def test_problems_are_shown_in_the_order_an_operator_acts_on_them():
    """A damaged record first (nothing may be written), then what the
    operator fixes (series upgrade, resource, options), then what the unit
    waits for, and the lease last."""
    assert sorted(Problem, key=lambda p: p.rank) == [
        Problem.RECORD, Problem.SERIES_UPGRADE, Problem.RESOURCE, Problem.INSTALLING,
        Problem.OPTIONS, Problem.CIDR, Problem.MTU, Problem.NETWORK, Problem.IFACE,
        Problem.IPV6, Problem.COMMANDS, Problem.KERNEL, Problem.NO_ETCD,
        Problem.NO_KUBECONFIG, Problem.KUBE_ACCESS, Problem.NODE, Problem.POD_CIDR,
        Problem.ETCD_CREDENTIALS, Problem.ETCD,
        Problem.KUBE, Problem.NETWORK_PENDING,
        Problem.OUT_OF_SUBNETS, Problem.SERVICE_FAILING, Problem.SERVICE_STARTING,
        Problem.CNI_PENDING, Problem.CNI, Problem.BRIDGE, Problem.BRIDGE_STALE,
        Problem.OFFLOAD, Problem.UNROUTABLE, Problem.RESTARTS, Problem.NEGOTIATING,
        Problem.NOT_READY]
    assert len({p.rank for p in Problem}) == len(Problem)


def test_the_highest_ranked_problem_is_shown_whatever_the_order_found():
    found = [(Problem.NEGOTIATING, None), (Problem.CIDR, "cidr overlaps eth0's network"),
             (Problem.NO_ETCD, None)]
    assert choose(found) == choose(reversed(found)) == Status(
        "blocked", "cidr overlaps eth0's network")


@pytest.mark.parametrize("problem", list(Problem))
def test_every_problem_shows_its_level_and_a_message(problem):
    text = None if problem in FIXED_TEXTS else f"what is wrong: {problem.key}"
    shown_status = choose([(problem, text)])
    assert shown_status.state == problem.level
    assert shown_status.message == (text or FIXED_TEXTS[problem])
    assert shown_status.message


def test_without_problems_the_unit_is_active_on_its_gateways():
    gateways = [ipaddress.ip_interface("10.1.52.1/24"), ipaddress.ip_interface("fd10:1:0:5::1/64")]
    assert choose([], gateways) == Status("active", "Flannel subnet 10.1.52.1/24, "
                                                    "fd10:1:0:5::1/64")


def test_the_messages_operators_alerts_match_are_unchanged():
    """A refresh keeps each fixed text: operators' alerts match them."""
    assert {problem.key: text for problem, text in FIXED_TEXTS.items()} == {
        "series-upgrade": "Series upgrade in progress",
        "installing": "Installing flannel.",
        "no-etcd": "Waiting for etcd relation.",
        "no-kubeconfig": "Waiting for the principal's kubeconfig (/root/.kube/config) for "
                         "subnet-manager=kubernetes.",
        "etcd-credentials": "Waiting for etcd client credentials.",
        "network-pending": "Waiting to write the flannel network to etcd.",
        "service-failing": "flannel.service is failing: flanneld exited after start "
                           "(journalctl -u flannel)",
        "service-starting": "Waiting for flannel.service to start.",
        "cni-pending": "Waiting for the principal on the cni relation.",
        "negotiating": "Negotiating flannel network subnet.",
        "not-ready": "flanneld is not ready: 127.0.0.1:8474/readyz did not answer 200 "
                     "(journalctl -u flannel)",
    }


def test_flanneld_s_age_is_its_own_process_s_on_the_boot_clock(running, tmp_path):
    """systemd's word (`systemctl show`: active, main PID) and the kernel's
    start time of that process: what the readiness grace counts from."""
    service = running.flanneld_service
    assert service.active and service.main_pid
    assert running.machine.process_age(service.main_pid) == pytest.approx(
        running.flanneld_age, abs=1)
    assert 0 <= running.flanneld_age < 600
    assert running.machine.process_age(os.getpid()) >= 0
    assert running.machine.process_age(2 ** 22 + 1) is None   # no such process
    (tmp_path / "stopped").mkdir()
    stopped = unit(tmp_path / "stopped", tmp_path / "no-systemd")
    assert not stopped.flanneld_service.active and stopped.flanneld_age is None


def test_a_mode_neither_wanted_nor_running_shows_none_of_its_problems(running):
    """A recorded "Cannot reach the Kubernetes API" stayed in the status of
    a unit back on etcd until its network step ran again."""
    running.state.subnet_manager = "etcd"
    running.state.set_problem(Problem.KUBE, "Cannot reach the Kubernetes API: the API server "
                                            "at 10.0.0.2:6443 did not answer (timed out)")
    running.state.set_problem(Problem.POD_CIDR, "Node m1 has no pod CIDR")
    assert shown(running) == ("active", "Flannel subnet 10.1.52.1/24")
    # while a switch to it waits, they are shown
    running.paths.kubeconfig.parent.mkdir(parents=True)
    running.paths.kubeconfig.write_text("current-context: c\n")
    switching = stepkit.context(running.paths.subnet_env.parents[3], kv=running.state.kv,
                                config={"subnet-manager": "kubernetes"}, etcd=ETCD,
                                machine=running.machine)
    assert shown(switching)[1] == "Node m1 has no pod CIDR"
