"""The fault bench: one started sandbox cluster, the fault rows' registry,
and the checks every row makes after its fault.

A row is `def row_fn(bench: FaultBench) -> Outcome`, registered with
`@row("name")`. It gets a fresh two-machine cluster (etcd and
kubernetes-worker up, flannel not deployed), injects its fault, calls
`bench.observe()` while the fault is on, removes the cause, lets the unit
recover as Juju would (`bench.recover()`: `juju resolve` re-runs a failed
hook, then update-status), and returns `bench.outcome(...)`, which runs the
checks a user would make:

- no worker file in /opt/cni/bin changed or went (files lost, must be 0);
- every file the unit's install record claims is on disk with the recorded
  sha256 and mode, no file of the charm's is unrecorded, no temp file of an
  interrupted write is left, the etcd client key is root-only;
- the machines' iptables rules and systemd units are what they were before
  the fault (none twice, none gone, none of an old network's left);
- the pods that ran before the fault still ping across machines, and a new
  pod on each machine gets an address and pings.

A bench made with shared=True plays on a cluster that rows before it may
have played on (tests/functional/test_fault_matrix.py's chains): deploy()
then takes flannel as the row before left it, if it is there, and
handover_problems() says whether the next row may have it.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Optional

from sandbox.cluster import FLANNEL, Cluster, ClusterError
from sandbox.juju.operations import coerce_config
from sandbox.machine import Machine
from sandbox.network import ping_from_netns
from sandbox.pod import Pod
from sandbox.waiting import wait_for

# Where the charm writes (lib/charms/flannel/facts/paths.py) and the names of its
# files there: a file of these names that the record does not claim is an
# unrecorded file of the charm's.
CHARM_FILES = ("/usr/local/bin/flanneld", "/opt/cni/bin/flannel",
               "/etc/cni/net.d/10-flannel.conflist", "/lib/systemd/system/flannel.service",
               "/etc/ssl/flannel/client-ca.pem", "/etc/ssl/flannel/client-cert.pem",
               "/etc/ssl/flannel/client-key.pem")
CHARM_DIRS = sorted({str(PurePosixPath(p).parent) for p in CHARM_FILES})
ETCD_KEY = "/etc/ssl/flannel/client-key.pem"
WORKER_BIN = "/opt/cni/bin"
RECORD_DIR = "flannel-install-record"  # beside the unit's charm dir (facts/paths.py)


@dataclass
class Outcome:
    """One row of the fault table."""
    fault: str
    seen: str             # statuses seen while the fault was on, condensed
    recovery: float       # seconds from removing the cause to every unit active
    files_lost: int       # worker files changed or gone (must be 0)
    problems: list[str] = field(default_factory=list)  # [] = the row passes

    @property
    def passed(self) -> bool:
        return not self.problems and self.files_lost == 0


@dataclass
class Row:
    name: str
    play: Callable[["FaultBench"], Outcome]
    soak: bool = False   # long-running: not part of CI's matrix
    workers: int = 2


ROWS: dict[str, Row] = {}


def row(name: str, *, soak: bool = False, workers: int = 2):
    """Register a fault row under `name` (its first word orders the table)."""
    def register(play):
        if name in ROWS:
            raise ValueError(f"fault row {name!r} registered twice")
        ROWS[name] = Row(name, play, soak, workers)
        return play
    return register


def sha256_of(path: Path) -> Optional[str]:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def unreachable(pod: Pod, peer: Pod) -> list[str]:
    """The addresses of `peer` (IPv4, and IPv6 when both pods have one)
    that `pod` does not reach."""
    addresses = [peer.address] + ([peer.address6] if pod.address6 and peer.address6 else [])
    return [a for a in addresses if ping_from_netns(pod.netns, a, count=3) == 0]


class FaultBench:
    def __init__(self, cluster: Cluster, say: Callable[[str], None] = lambda _: None,
                 network_config: Optional[dict] = None, shared: bool = False):
        self.cluster = cluster
        self.say = say
        # flannel options every deploy() of the row gets (dual-stack: ipv6-cidr)
        self.network_config = dict(network_config or {})
        # the cluster may hold flannel as the row before handed it on
        self.shared = shared
        # the first hook of this row's (hook_log index): what came before is
        # the rows' before it on a shared cluster, or etcd's and the worker's
        self.first_hook = len(cluster.controller.hook_log) if cluster.controller else 0
        self.seen: list[str] = []
        self.worker_files: dict[str, dict[str, str]] = {}   # machine -> name -> sha256
        self.pods: dict[str, Pod] = {}                      # machine -> a pod made before the fault

    @property
    def ctl(self):
        return self.cluster.controller

    def machine(self, name: str) -> Machine:
        return self.cluster.machines[name]

    def unit_on(self, machine: str) -> str:
        return self.cluster.unit_on(machine)

    # --- set-up ------------------------------------------------------------------
    def deploy(self, config: Optional[dict] = None, *, settle_active: bool = True,
               timeout: float = 180) -> None:
        """Deploy flannel related to etcd and the worker; with settle_active,
        wait until every unit is active, snapshot() and start a pod per machine.
        On a shared cluster where the row before left flannel (handed on as
        deployed with these options), take it as it is."""
        if self.shared and self.cluster.flannel_units():
            differences = self.deploy_differences(config)
            if differences or not settle_active:
                raise ClusterError("flannel is up from the row before, not as this row's "
                                   f"deploy would make it: {differences or 'a fault in install'}")
            self.say("   flannel is up as the row before handed it on: not deployed again")
            self.cluster.wait_for_flannel(timeout=timeout)
            self.snapshot()
            return
        self.cluster.deploy_flannel(config={**self.network_config, **(config or {})})
        if settle_active:
            self.cluster.wait_for_flannel(timeout=timeout)
            self.snapshot()

    def snapshot(self, pods: bool = True) -> None:
        """Remember every worker file (sha256) and, with pods, start a pod on
        each machine that has none yet: what verify() holds the row to."""
        self.worker_files = {m: self._worker_files(m) for m in self.cluster.worker_machines()}
        self.node_states = {m: self._settled_node_state(m) for m in self.cluster.worker_machines()}
        # a row played before flannel runs (a fault during install) ends with
        # flanneld's rules and unit there: expected, once each
        self.flannel_ran = {m: bool(self.cluster.flanneld_pids(m))
                            for m in self.cluster.worker_machines()}
        if pods:
            for m in self.cluster.worker_machines():
                if m not in self.pods:
                    self.pods[m] = self.cluster.start_pod(m)

    def deploy_differences(self, config: Optional[dict] = None) -> list[str]:
        """How deployed flannel differs from what deploy(config) makes: its
        options, its charm, its resource (none: the same)."""
        app = self.ctl.model().app(FLANNEL)
        wanted = coerce_config(app["config-options"], {**self.network_config, **(config or {})})
        out = [] if app["config"] == wanted else [f"options {app['config']}, not {wanted}"]
        if app["charm-dir"] != os.path.abspath(self.cluster.charm_dir):
            out.append(f"charm {app['charm-dir']}")
        resource = (app["resources"].get(self.cluster.resource_name) or {}).get("path")
        if resource != os.path.abspath(self.cluster.resource):
            out.append(f"resource {resource}")
        return out

    def handover_problems(self, outcome: "Outcome") -> list[str]:
        """Why the next row of a chain may not play on this cluster ([]: it
        may, and this row's pods are deleted, as if it had never run them: a
        row counts the pods on its machines). The row passed; etcd runs; every
        flannel unit is active, its agent idle, with a running flanneld and a
        lease; no hook kill is left armed; flannel is as deploy() makes it.
        The cluster's pristine node states (Cluster.remember_nodes) stay
        those of up(): flannel's removal must still leave the nodes so."""
        problems = [] if outcome.passed else ["the row failed"]
        if self.ctl.cancel_kills():
            problems.append("a hook kill was left armed")
        if self.ctl.queue:
            problems.append(f"{len(self.ctl.queue)} hooks still queued")
        if not self.cluster.etcd.running:
            problems.append("etcd is not running")
        units = self.cluster.flannel_units()
        problems += [f"{unit} shows {text!r}" for unit, text in self.statuses().items()
                     if not text.startswith("active")]
        if len(units) != len(self.cluster.worker_machines()):
            problems.append(f"flannel units {units}")
        for m in self.cluster.worker_machines():
            if not self.cluster.flanneld_pids(m) or \
                    not self.cluster.subnet_env(m).get("FLANNEL_SUBNET"):
                problems.append(f"{m}: no flanneld running with a lease")
        if units:
            problems += self.deploy_differences()
        if problems:
            return problems
        for pod in list(self.cluster.pods):
            error = pod.delete()
            self.cluster.pods.remove(pod)
            if error:
                problems.append(f"pod {pod.name}'s CNI DEL failed: {error}")
        self.pods.clear()
        return problems

    def forget_pods(self, machine: str) -> None:
        """The machine's pods are gone (a reboot): verify() no longer pings them."""
        self.pods.pop(machine, None)

    def _worker_files(self, machine: str) -> dict[str, str]:
        m = self.machine(machine)
        names = m.ls(WORKER_BIN) or []
        out = {}
        for name in names:
            path = f"{WORKER_BIN}/{name}"
            if path in CHARM_FILES:
                continue
            digest = sha256_of(m.path_on_host(path))
            if digest is not None:
                out[name] = digest
        return out

    # --- during the fault ---------------------------------------------------------------
    def statuses(self) -> dict[str, str]:
        """unit -> "status: message" as `juju status` shows it (an agent in
        error shows "error: hook failed: ...")."""
        out = {}
        for unit in self.cluster.flannel_units():
            rec = self.ctl.unit(unit)
            agent = rec.get("agent") or {}
            if agent.get("status") == "error":
                out[unit] = f"error: {agent.get('message', '')}"
            else:
                status, message = self.cluster.workload(unit)
                out[unit] = f"{status}: {message}" if message else status
        return out

    def observe(self, note: str = "") -> dict[str, str]:
        """Record the units' statuses now into `seen` (distinct values kept)."""
        now = self.statuses()
        for unit, text in now.items():
            if text not in self.seen:
                self.seen.append(text)
        shown = "; ".join(f"{u} {t}" for u, t in now.items())
        self.say(f"   {note + ': ' if note else ''}{shown}")
        return now

    # --- recovery -----------------------------------------------------------------------
    def recover(self, timeout: float = 180, state: str = "active") -> float:
        """What Juju does by itself: re-run every failed hook (Juju 3 retries
        them; `juju resolve` here), then update-status, until every flannel
        unit shows `state`. Returns the seconds it took."""
        started = time.monotonic()
        deadline = started + timeout
        while True:
            errored = [u for u in self.cluster.flannel_units()
                       if (self.ctl.unit(u).get("agent") or {}).get("status") == "error"]
            for unit in errored:
                self.ctl.resolve(unit, retry=True)
            self.cluster.settle()
            units = self.cluster.flannel_units()
            if not errored and units and all(self.cluster.workload(u)[0] == state for u in units) \
                    and not any((self.ctl.unit(u).get("agent") or {}).get("status") == "error"
                                for u in units):
                return time.monotonic() - started
            if time.monotonic() > deadline:
                raise ClusterError(f"flannel did not recover to {state} in {timeout:.0f}s: "
                                   f"{self.statuses()}\n{self.ctl.format_status()}")
            time.sleep(1.0)
            self.ctl.update_status(FLANNEL)
            self.cluster.settle()

    # --- the checks ------------------------------------------------------------------------
    def record(self, unit: str) -> dict:
        """The unit's install record (record.json) as a dict; {} if missing or unreadable."""
        raw = self._machine_of(unit).read_file(self._record_path(unit))
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {}

    def _record_path(self, unit: str) -> str:
        charm_dir = self.ctl.unit(unit)["charm-dir"]
        return str(PurePosixPath(charm_dir).parent / RECORD_DIR / "record.json")

    def kept_original(self, unit: str, path: str) -> Optional[bytes]:
        """The copy the unit's install record keeps of what stood at `path`
        before flannel wrote it (None: none kept)."""
        record = PurePosixPath(self._record_path(unit)).parent
        return self._machine_of(unit).read_file(str(record / "originals" / path.lstrip("/")))

    def principals_flannel(self, machine: str) -> Optional[bytes]:
        """The flannel plugin the principal on `machine` ships itself (that
        of the reactive kubernetes-worker of 2020), None for the ops
        principals, which ship none."""
        return getattr(self.cluster.principal_app(machine), "flannel", None)

    def flannels_file(self, machine: str, path: str) -> bool:
        """Whether `path` on `machine` is flannel's (not the principal's own
        /opt/cni/bin/flannel, put back as it was)."""
        theirs = self.principals_flannel(machine) if path == f"{WORKER_BIN}/flannel" else None
        return theirs is None or self.machine(machine).read_file(path) != theirs

    def _machine_of(self, unit: str) -> Machine:
        machine_id = self.ctl.unit(unit)["machine"]
        for name, mid in self.cluster.machine_ids.items():
            if mid == machine_id:
                return self.machine(name)
        raise ClusterError(f"{unit} is on no sandbox machine")

    def lost_worker_files(self) -> list[str]:
        out = []
        for machine, files in self.worker_files.items():
            now = self._worker_files(machine)
            for name, digest in files.items():
                if now.get(name) is None:
                    out.append(f"{machine}: {WORKER_BIN}/{name} gone")
                elif now[name] != digest:
                    out.append(f"{machine}: {WORKER_BIN}/{name} changed")
        return out

    def record_problems(self, unit: str) -> list[str]:
        """Where the unit's install record and its machine's disk disagree."""
        m = self._machine_of(unit)
        record = self.record(unit)
        files = record.get("files", {})
        problems = []
        if not files:
            problems.append(f"{unit}: install record {self._record_path(unit)} missing or empty")
        for path, entry in files.items():
            host = m.path_on_host(path)
            digest = sha256_of(host)
            if digest is None:
                problems.append(f"{unit}: {path} recorded but not on disk")
            elif digest != entry.get("sha256"):
                problems.append(f"{unit}: {path} differs from the record")
            elif entry.get("mode") is not None and \
                    stat.S_IMODE(host.stat().st_mode) != entry["mode"]:
                mode = stat.S_IMODE(host.stat().st_mode)
                problems.append(f"{unit}: {path} mode {oct(mode)}, "
                                f"record says {oct(entry['mode'])}")
        for path in CHARM_FILES:
            if m.exists(path) and path not in files:
                problems.append(f"{unit}: {path} on disk but not in the install record")
        for directory in CHARM_DIRS:
            for name in m.ls(directory) or []:
                if name.endswith(".tmp") and name.startswith("."):
                    problems.append(f"{unit}: temp file of an interrupted write left: "
                                    f"{directory}/{name}")
        if m.exists(ETCD_KEY):
            mode = stat.S_IMODE(m.path_on_host(ETCD_KEY).stat().st_mode)
            if mode & 0o077:
                problems.append(f"{unit}: {ETCD_KEY} has mode {oct(mode)} (not root-only)")
        return problems

    def old_pods_problems(self, during: str = "") -> list[str]:
        """The pods of snapshot() that no longer reach each other across
        machines (by each family both have)."""
        problems = []
        pods = list(self.pods.items())
        for machine, pod in pods:
            for other, peer in pods:
                for address in unreachable(pod, peer) if other != machine else ():
                    where = f"on {other} {during}".rstrip()
                    problems.append(f"pod {pod.name} on {machine} cannot reach pod {peer.name} "
                                    f"({address}) {where}")
        return problems

    def pod_problems(self) -> list[str]:
        problems = self.old_pods_problems()
        pods = list(self.pods.items())
        for machine in self.cluster.worker_machines():
            pod, error = self.cluster.try_pod(machine)
            if pod is None:
                problems.append(f"a new pod on {machine} got no address: {error}")
                continue
            if self.network_config.get("ipv6-cidr") and pod.address6 is None:
                problems.append(f"a new pod on {machine} got no IPv6 address: {pod.result}")
            for other, peer in pods:
                for address in unreachable(pod, peer) if other != machine else ():
                    problems.append(f"new pod {pod.name} on {machine} cannot reach pod "
                                    f"{peer.name} ({address}) on {other}")
        return problems

    def _settled_node_state(self, machine: str):
        """The node's state once a running flanneld has put its rules in
        place (it does so after it writes subnet.env, which `active` follows)."""
        def state():
            now = self.cluster.node_state(machine)
            chains = {r.split()[0] for rules in now.rules.values() for r in rules
                      if r.startswith(":FLANNEL-")}
            ready = not self.cluster.flanneld_pids(machine) or {
                ":FLANNEL-POSTRTG", ":FLANNEL-FWD"} <= chains
            return now if ready else None
        return wait_for(state, timeout=30, interval=0.2) or self.cluster.node_state(machine)

    def rule_problems(self) -> list[str]:
        """iptables rules and systemd units that differ from snapshot()'s,
        either way: flanneld's rules twice, an old network's left, a rule
        gone, a unit left (the pods' own rules, portmap's, aside)."""
        watched = ("iptables", "ip6tables", "unit ")

        def differences(machine: str, before) -> list[str]:
            now = self.cluster.node_state(machine)
            gained = [x for x in now.gained_since(before) if x.startswith(watched)]
            if not getattr(self, "flannel_ran", {}).get(machine, True):
                gained = [x for x in gained if "FLANNEL" not in x and "flannel" not in x]
                gained += [f"{rule} (twice)" for rules in now.rules.values()
                           for rule, n in Counter(rules).items() if n > 1 and "FLANNEL" in rule]
            return ([f"{machine}: {x} gained" for x in gained]
                    + [f"{machine}: {x} gone" for x in before.gained_since(now)
                       if x.startswith(watched)])

        problems = []
        for machine, before in getattr(self, "node_states", {}).items():
            # a flanneld restarted by the recovery flushes its rules and adds
            # them again as it starts: wait for that to be over, or report
            found: list[str] = []

            def settled() -> bool:
                found[:] = differences(machine, before)
                return not found
            wait_for(settled, timeout=30, interval=0.3)
            problems += found
        return problems

    def verify(self, *, units: Optional[Iterable[str]] = None, pods: bool = True
               ) -> tuple[int, list[str]]:
        """(files lost, problems) after recovery; see the module's docstring."""
        lost = self.lost_worker_files()
        problems = list(lost) + self.rule_problems()
        for unit in (self.cluster.flannel_units() if units is None else units):
            problems += self.record_problems(unit)
        if pods:
            problems += self.pod_problems()
        return len(lost), problems

    def outcome(self, fault: str, recovery: float, extra_problems: Iterable[str] = (), *,
                pods: bool = True, units: Optional[Iterable[str]] = None) -> Outcome:
        lost, problems = self.verify(units=units, pods=pods)
        return Outcome(fault=fault, seen="; ".join(self.seen) or "-", recovery=recovery,
                       files_lost=lost, problems=list(extra_problems) + problems)


def open_bench(charm_dir: Path, resource: Path, say: Callable[[str], None], *, workers: int = 2,
               label: str = "", network_config: Optional[dict] = None
               ) -> tuple[Cluster, FaultBench]:
    """A started cluster (not yet entered as a context) and its bench. A
    failed hook waits for the bench (recover(): `juju resolve`), so that
    what a fault did is seen before anything retries it."""
    cluster = Cluster(charm_dir, resource, workers=workers, auto_retry=False, label=label,
                      say=(lambda t: say(f"[{label}] {t}")) if label else say)
    return cluster, FaultBench(cluster, say=cluster.say, network_config=network_config)


def run_row(row_: Row, charm_dir: Path, resource: Path,
            say: Callable[[str], None] = print, network_config: Optional[dict] = None) -> Outcome:
    """Play one row on a fresh cluster (flannel deployed with
    `network_config`'s options); a row that raises is a failed row."""
    cluster, bench = open_bench(charm_dir, resource, say, workers=row_.workers, label=row_.name,
                                network_config=network_config)
    started = time.monotonic()
    try:
        with cluster:
            return row_.play(bench)
    except Exception as error:  # noqa: BLE001  (the table reports it)
        return Outcome(fault=row_.name, seen="; ".join(bench.seen) or "-",
                       recovery=time.monotonic() - started, files_lost=0,
                       problems=[f"{type(error).__name__}: {error}"])


def table(outcomes: list[Outcome]) -> str:
    """fault | status seen during it | recovery | files lost | result"""
    head = ("fault", "status seen during the fault", "recovery", "files lost", "result")
    rows = [(o.fault, o.seen if len(o.seen) < 90 else o.seen[:87] + "...",
             f"{o.recovery:.1f}s", str(o.files_lost), "ok" if o.passed else "FAILED")
            for o in outcomes]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for o in outcomes:
        for problem in o.problems:
            lines.append(f"  {o.fault}: {problem}")
    return "\n".join(lines)
