"""Helpers the functional tests share: the user's remove/add scenario (played
the same way against the charm and against a deliberately broken copy), the
old charm's stop hook, resource repacking. The sandbox API itself is
sandbox.cluster; nothing here duplicates it."""
from __future__ import annotations

import gzip
import io
import json
import re
import shutil
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from charms.flannel.adapters.machine import Machine
from charms.flannel.facts.restarts import GRACE
from sandbox.cluster import CNI_RELATION, FLANNEL, Cluster
from sandbox.juju import EmulatedApp
from sandbox.waiting import wait_for

# Every path the charm installs on a unit (docs/reference/unit-paths.md).
CHARM_PATHS = ("/usr/local/bin/flanneld", "/opt/cni/bin/flannel",
               "/etc/cni/net.d/10-flannel.conflist", "/lib/systemd/system/flannel.service",
               "/etc/ssl/flannel", "/etc/udev/rules.d/90-flannel-vxlan-checksum.rules",
               "/etc/modules-load.d/flannel.conf")
# libcni's error when a plugin a conflist needs is not in CNI_PATH.
MISSING_PLUGIN = re.compile(r'failed to find plugin "([^"]+)" in path \[/opt/cni/bin\]')
# containerd's own words for it (the bug report's), on a CRI pod sandbox.
CONTAINERD_MISSING_PLUGIN = re.compile(
    r'^failed to setup network for sandbox "[0-9a-f]{64}": plugin type="flannel" failed '
    r'\(add\): failed to find plugin "([^"]+)" in path \[/opt/cni/bin\]$')

Plugins = dict[str, Optional[bytes]]

# sandbox.faults.Outcome of every fault row played (test_fault_matrix), for the
# fault table conftest prints in the session summary.
FAULT_OUTCOMES: list = []


def plugin_bytes(cluster: Cluster, machine: str) -> Plugins:
    """The principal's own CNI plugins on `machine` (the reactive worker's
    four, the ops principals' whole set): name -> bytes (None: gone)."""
    files = cluster.cni_bin(machine)
    return {name: files.get(name) for name in cluster.principal_plugins(machine)}


def all_plugin_bytes(cluster: Cluster) -> dict[str, Plugins]:
    return {m: plugin_bytes(cluster, m) for m in cluster.machines}


def charm_files_left(cluster: Cluster, machine: str) -> list[str]:
    """The charm's paths (CHARM_PATHS) still on `machine`, but a plugin of
    the principal's own (the 2020 worker ships a flannel: the charm puts it
    back, and plugin_differences compares it byte for byte)."""
    theirs = {f"/opt/cni/bin/{name}" for name in cluster.principal_plugins(machine)}
    return [p for p in CHARM_PATHS if p not in theirs and cluster.machines[machine].exists(p)]


def plugin_differences(before: dict[str, Plugins], now: dict[str, Plugins], *,
                       flannel_running: bool = False) -> list[str]:
    """What differs from `before`, e.g. "m1: bridge deleted". With
    flannel_running, a flannel of the principal's own (the 2020 worker's)
    is left out: while flannel runs, /opt/cni/bin/flannel is its plugin."""
    out = []
    for machine, files in before.items():
        for name, data in files.items():
            if flannel_running and name == "flannel":
                continue
            got = now[machine][name]
            if got is None:
                out.append(f"{machine}: {name} deleted")
            elif got != data:
                out.append(f"{machine}: {name} changed ({len(data or b'')} -> {len(got)} bytes)")
    return out


def deploy_and_wait(cluster: Cluster, charm_dir: Optional[Path] = None, *,
                    config: Optional[dict] = None, resource: Optional[Path] = None,
                    timeout: float = 180) -> dict[str, Plugins]:
    """Deploy flannel (related to etcd and the worker), wait for active.
    Returns the worker's plugins as they were before flannel arrived."""
    before = all_plugin_bytes(cluster)
    assert all(data for files in before.values() for data in files.values()), \
        f"the worker did not install its CNI plugins: {before}"
    cluster.deploy_flannel(config=config, charm_dir=charm_dir, resource=resource)
    with cluster.timings.phase("flannel becomes active", cluster.say):
        cluster.wait_for_flannel(timeout=timeout)
    cluster.say(cluster.status_table())
    return before


def cri_loaded_network(cluster: Cluster, machine: str = "m1") -> Optional[str]:
    """The name of the CNI network containerd on `machine` has loaded (None: none)."""
    from sandbox.cri import runtime_for
    info = json.loads(runtime_for(cluster.machines[machine]).crictl("info").stdout)
    names = [n["Config"]["Name"] for n in info.get("cniconfig", {}).get("Networks") or []]
    names = [n for n in names if n != "cni-loopback"]
    return names[0] if names else None


def wait_cri_loaded(cluster: Cluster, name: Optional[str], machine: str = "m1",
                    timeout: float = 120.0) -> None:
    """Wait until containerd on `machine` has loaded network `name`."""
    if not wait_for(lambda: cri_loaded_network(cluster, machine) == name, timeout):
        raise AssertionError(f"containerd loaded {cri_loaded_network(cluster, machine)!r}, "
                             f"not {name!r}")


def pods_everywhere(cluster: Cluster) -> dict:
    """A new pod on each machine (asserting each got an address)."""
    pods = {}
    for m in cluster.machines:
        pod, error = cluster.try_pod(m)
        assert pod is not None, f"a new pod on {m} got no address: {error}"
        pods[m] = pod
    return pods


def allocation_tables(cluster: Cluster, machine: str) -> dict[str, set[str]]:
    """host-local's allocation tables on `machine`: network name -> the pod
    addresses it holds (/var/lib/cni/networks/<name>/<address>)."""
    m = cluster.machines[machine]
    root = "/var/lib/cni/networks"
    return {net: {f for f in (m.ls(f"{root}/{net}") or []) if f[0].isdigit()}
            for net in (m.ls(root) or [])}


@dataclass
class PodAttempt:
    machine: str
    address: Optional[str]
    error: str

    def __str__(self) -> str:
        return f"{self.machine}: {self.address or 'FAILED: ' + self.error}"


@dataclass
class ScenarioRun:
    """What the user saw along the remove/add scenario."""
    plugin_changes: dict[str, list[str]] = field(default_factory=dict)  # step -> differences
    first_pods: list[PodAttempt] = field(default_factory=list)
    units_after_remove: list[str] = field(default_factory=list)
    flanneld_after_remove: dict[str, list[int]] = field(default_factory=dict)
    # machine -> what flannel left on it (Cluster.flannel_leftovers)
    leftovers_after_remove: dict[str, list[str]] = field(default_factory=dict)
    # machine -> the charm's own files (CHARM_PATHS) still there
    files_after_remove: dict[str, list[str]] = field(default_factory=dict)
    readd_status: str = ""   # "" when every unit came back in readd_state, else the error
    readd_messages: dict[str, str] = field(default_factory=dict)  # unit -> status message
    new_pods: list[PodAttempt] = field(default_factory=list)

    def all_plugin_changes(self) -> list[str]:
        return [f"after {step}: {d}" for step, diffs in self.plugin_changes.items() for d in diffs]


def _pods(cluster: Cluster) -> list[PodAttempt]:
    attempts = []
    for machine in cluster.machines:
        pod, error = cluster.try_pod(machine)
        attempts.append(PodAttempt(machine, pod.address if pod else None, error))
    return attempts


def play_remove_add(cluster: Cluster, before: dict[str, Plugins],
                    say: Callable[[str], None], readd_state: str = "active",
                    label: str = "", *, meanwhile: Optional[Callable[[], None]] = None,
                    drain: bool = False, watch: Optional["StatusWatch"] = None) -> ScenarioRun:
    """LP #1866869 from a deployed, active flannel: a pod on each machine,
    `juju remove-relation flannel:cni kubernetes-worker:cni`, `meanwhile()`
    (what happens while flannel is away: a day passing, a config change),
    the pods deleted with `drain`, `juju add-relation` again (hook by hook
    under `watch`), a new pod on each machine; the worker's plugins are
    compared with `before` after every step (a flannel of the worker's own
    only once flannel is gone: while flannel runs, /opt/cni/bin/flannel is
    its plugin). Records, never asserts. `label` prefixes the timed phases'
    names (e.g. "cycle 2: ")."""
    run = ScenarioRun()

    def compare(step: str) -> None:
        run.plugin_changes[step] = plugin_differences(
            before, all_plugin_bytes(cluster), flannel_running=step != "remove-relation")

    compare("deploy")
    with cluster.timings.phase(label + "a pod on each machine", say):
        run.first_pods = _pods(cluster)
    compare("the first pods")
    with cluster.timings.phase(label + "remove-relation flannel:cni kubernetes-worker:cni", say):
        cluster.remove_cni_relation()
    run.units_after_remove = cluster.flannel_units()
    run.flanneld_after_remove = {m: cluster.flanneld_pids(m) for m in cluster.machines}
    run.leftovers_after_remove = {m: cluster.flannel_leftovers(m)
                                  for m in cluster.worker_machines()}
    run.files_after_remove = {m: charm_files_left(cluster, m) for m in cluster.worker_machines()}
    compare("remove-relation")
    if meanwhile is not None:
        meanwhile()
    if drain:
        delete_pods(cluster)
    with cluster.timings.phase(label + "add-relation flannel:cni kubernetes-worker:cni", say):
        try:
            if watch is not None:
                cluster.controller.add_relation(*CNI_RELATION)
                watch.settle()
                run.readd_messages = watch.until_active()
            else:
                cluster.add_cni_relation()
                run.readd_messages = cluster.wait_for_flannel(timeout=180, state=readd_state)
        except Exception as error:   # recorded: the caller decides what it means
            run.readd_status = str(error)
    compare("add-relation")
    with cluster.timings.phase(label + "a new pod on each machine", say):
        run.new_pods = _pods(cluster)
    compare("the new pods")
    say(cluster.status_table())
    return run


def delete_pods(cluster: Cluster) -> None:
    """A drain: every pod deleted (the runtime's CNI DEL)."""
    for pod in list(cluster.pods):
        pod.delete()
        cluster.pods.remove(pod)


class StatusWatch:
    """After each batch of hooks, every flannel unit that says `active`
    starts a pod on its machine (released at once): the status told the
    truth, or `lies` says when it did not."""

    def __init__(self, cluster: Cluster):
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
            if time.monotonic() > deadline:
                raise AssertionError(f"not every unit active after {timeout:.0f}s: {seen}\n"
                                     + self.cluster.controller.format_status())
            time.sleep(1.0)


# The Nagios check the charm writes for nrpe.
CHECK_FILE = "/etc/nagios/nrpe.d/check_flannel.cfg"
READY_CHECK_FILE = "/etc/nagios/nrpe.d/check_flannel-ready.cfg"


class NrpeApp(EmulatedApp):
    """The nrpe charm, emulated as the etcd charm and kubernetes-worker are: a
    subordinate of the worker that at install does what installing
    nagios-nrpe-server does on a machine (the nagios user, /etc/nagios/nrpe.d,
    the export dir). The check command itself is Debian's real check_procs."""
    charm_name = "nrpe"
    subordinate = True
    endpoints = {"general-info": {"interface": "juju-info", "role": "requires",
                                  "scope": "container"},
                 "nrpe-external-master": {"interface": "nrpe-external-master",
                                          "role": "requires", "scope": "container"}}

    def __init__(self):
        super().__init__("nrpe")

    def on_install(self, ctx):
        ctx.run(["/bin/sh", "-c", "getent passwd nagios >/dev/null || useradd --system nagios; "
                 "mkdir -p /etc/nagios/nrpe.d /var/lib/nagios/export"])
        ctx.status_set("active", "ready")


# The stop handler of the charm before LP #1866869 was fixed: it deleted
# CNI plugins the worker had installed.
OLD_STOP_HOOK = '''

# --- appended by tests/functional: the old charm's stop hook (LP #1866869) ---
import os as _old_os  # noqa: E402


@hook("stop")
def remove_cni_binaries_like_the_old_charm():
    for _name in ("bridge", "host-local", "flannel"):
        try:
            _old_os.remove("/opt/cni/bin/" + _name)
        except FileNotFoundError:
            pass
'''


def old_charm_copy(built_charm: Path, dest: Path) -> Path:
    """A copy of the built charm whose stop hook also deletes the worker's
    bridge and host-local (and flannel), as the old charm did."""
    target = dest / "flannel"
    shutil.copytree(built_charm, target, symlinks=True)
    handlers = target / "reactive" / "flannel.py"
    handlers.write_text(handlers.read_text() + OLD_STOP_HOOK)
    return target


def repack_resource(resource: Path, dest: Path, *, extra_member: Optional[str] = None,
                    flanneld_suffix: bytes = b"") -> Path:
    """A new flannel-<arch>.tar.gz from `resource`: with an extra member
    (flanneld unchanged) and/or flanneld with `flanneld_suffix` appended (a
    "re-stamped" binary: same code, other bytes, still runs)."""
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / resource.name
    buf = io.BytesIO()
    with tarfile.open(resource, "r:gz") as src, \
            gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as out:
        for member in src:
            data = src.extractfile(member).read() if member.isfile() else None
            if member.name.lstrip("./") == "flanneld" and flanneld_suffix:
                data += flanneld_suffix
                member.size = len(data)
            out.addfile(member, io.BytesIO(data) if data is not None else None)
        if extra_member:
            info = tarfile.TarInfo(extra_member)
            text = f"{extra_member}: added by tests/functional\n".encode()
            info.size, info.mode = len(text), 0o644
            out.addfile(info, io.BytesIO(text))
    target.write_bytes(buf.getvalue())
    return target


def member(resource: Path, name: str) -> bytes:
    with tarfile.open(resource, "r:gz") as archive:
        for item in archive:
            if item.name.lstrip("./") == name:
                return archive.extractfile(item).read()
    raise KeyError(name)


def assert_hooks_run_with_the_base_python(cluster: Cluster) -> None:
    """Ubuntu 22.04 ships python3.10, 24.04 python3.12, 26.04 python3.14: every flannel unit's
    hooks (and actions) run with the one of its machine's release (skipped
    where this host has no such Python)."""
    import pytest
    from sandbox.ubuntu import PYTHONS, python_for
    if python_for(cluster.series) is None:
        pytest.skip(f"this host has no python{PYTHONS[cluster.series]}")
    versions = hook_pythons(cluster)
    print(f"{cluster.series}: {versions}")
    assert set(versions) == set(cluster.machines), versions
    assert all(v.startswith(PYTHONS[cluster.series] + ".") for v in versions.values()), versions


def hook_pythons(cluster: Cluster) -> dict[str, str]:
    """machine -> the version ("3.10.13") of the python3 the flannel unit's
    venv there was made with: the one its hooks run with."""
    found = {}
    for name, machine in cluster.machines.items():
        proc = machine.run(["sh", "-c", "for p in /var/lib/juju/agents/unit-flannel-*/.venv/"
                            "bin/python3; do \"$p\" -c 'import platform; "
                            "print(platform.python_version())'; done"], check=False)
        if proc.stdout.strip():
            found[name] = proc.stdout.split()[-1]
    return found


def wait_until_flanneld_is_older_than(cluster: Cluster, machine: str, seconds: float) -> None:
    """Until flanneld on `machine` has run `seconds` (its own process's age,
    as the charm counts it)."""
    ages = [Machine().process_age(pid) for pid in cluster.flanneld_pids(machine)]
    youngest = min((age for age in ages if age is not None), default=seconds)
    time.sleep(max(seconds - youngest, 0))


def wait_past_restart_grace(cluster: Cluster, machine: str) -> None:
    """Until update-status restarts flanneld on `machine` for what it finds
    wrong: past the grace it leaves a fresh flanneld (facts/restarts.py)."""
    wait_until_flanneld_is_older_than(cluster, machine, GRACE + 0.5)


# --- pods, through kubectl ---------------------------------------------------------------

def pod_ip(k8s, name: str, family: int = 4) -> str:
    """The pod's address of `family`, as kubelet reports it (podIPs)."""
    ips = [ip["ip"] for ip in k8s.get("pod", name)["status"]["podIPs"]]
    return next(ip for ip in ips if (":" in ip) == (family == 6))


def pings(k8s, pod: str, address: str) -> bool:
    """`kubectl exec <pod> -- ping` answered."""
    return k8s.kubectl("exec", pod, "--", "ping", "-c", "2", "-W", "2", address,
                       check=False).returncode == 0
