"""The speed benchmark: this charm side by side with a bare reactive charm.

    python -m sandbox bench --charm build/flannel [--resource T] [--json F]
                            [--machines 1,4,16] [--runs 20] [--parallel N]

Runs, in one process and one sandbox per cluster size, and prints a table of
figures and ratios (written as JSON too); never asserts a timing:

- bootstrap: the dependency install (a venv and the wheelhouse), each
  charm's run alone on the idle machine, interleaved; and the first hook's own
  (from the bootstrap log the unit writes), which ran while the cluster was
  deploying for flannel, on a quiet one for the bare charm;
- update-status: `--runs` interleaved runs of each charm's hook on the same
  machine, median wall and CPU (the hook's process tree, from rusage);
- the re-add cycle (three of each charm, interleaved: medians), in phases:
  remove-relation, add-relation (hooks), until every unit is active, a new
  pod addressed; the bare charm through the same hook sequence; flanneld's
  own start-to-lease on a machine;
- deploys of N machines: etcd + workers + flannel until every unit is
  active, wall and CPU per unit, against two floors: the hooks' CPU, and
  all the machine's (/proc/stat: flanneld, etcd and the sandbox's Juju
  too) spread over the cores. The sandbox's Juju runs the hooks of units
  on different machines concurrently, one hook per machine at a time, as
  Juju's machine lock does; `--parallel 1` runs one hook at a time (the
  scheduler before that), for comparison.

The bare charm is made here from the built flannel charm: the same hooks
(hook template, bootstrap, interface layers) and metadata endpoints, a
wheelhouse of charms.reactive's own closure, and one handler that sets a
flag and an active status. What it costs is what the framework costs.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import resource as _rusage
import shutil
import statistics
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from sandbox.cli import charm_parser, resource_for

BARE = "bare"
BARE_CNI_RELATION = ("bare:cni", "kubernetes-worker:cni")
BARE_ETCD_RELATION = ("bare:etcd", "etcd:db")
BOOTSTRAP_LOG = "flannel-bootstrap.log"

BARE_HANDLERS = '''"""The bare reactive charm of the benchmark: the framework and nothing else."""
from charmhelpers.core import hookenv
from charms.reactive import hook, set_flag, when_not


@when_not("bare.installed")
def install():
    set_flag("bare.installed")


@hook("stop")
def stop():
    pass


hookenv.atexit(lambda: hookenv.status_set("active", "ready"))
'''


# --- the bare charm --------------------------------------------------------------

def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_requirements(wheel: Path) -> list[str]:
    """The distributions a wheel requires unconditionally (no extras)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8", "replace")
    wanted = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        spec = line.split(":", 1)[1].strip()
        if "extra ==" in spec:
            continue
        wanted.append(_dist(re.split(r"[\s;<>=!~\[(]", spec, maxsplit=1)[0]))
    return wanted


def wheel_closure(wheelhouse: Path, roots: list[str]) -> list[Path]:
    """The wheels of ``roots`` and everything they require, from ``wheelhouse``."""
    by_dist = {_dist(p.name.split("-", 1)[0]): p for p in wheelhouse.glob("*.whl")}
    todo, seen = [_dist(r) for r in roots], set()
    while todo:
        dist = todo.pop()
        if dist in seen or dist not in by_dist:
            continue
        seen.add(dist)
        todo.extend(wheel_requirements(by_dist[dist]))
    return sorted(by_dist[d] for d in seen)


def make_bare_charm(flannel_charm: Path, dest: Path) -> Path:
    """A reactive charm with flannel's hooks, endpoints and bootstrap, and
    charms.reactive's closure (+ setuptools for pkg_resources) as wheelhouse."""
    import yaml

    dest.mkdir(parents=True)
    shutil.copytree(flannel_charm / "hooks", dest / "hooks", symlinks=True)
    # the bootstrap, and the profiler it runs a hook under for the benchmark
    for name in ("bootstrap.py", "hook_profile.py"):
        boot = Path("lib") / "charms" / "flannel" / name
        (dest / boot).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(flannel_charm / boot, dest / boot)
    meta = yaml.safe_load((flannel_charm / "metadata.yaml").read_text())
    meta["name"] = BARE
    meta["summary"] = meta["description"] = "The framework alone (benchmark)."
    meta.pop("resources", None)
    (dest / "metadata.yaml").write_text(yaml.safe_dump(meta))
    (dest / "reactive").mkdir()
    (dest / "reactive" / "bare.py").write_text(BARE_HANDLERS)
    (dest / "wheelhouse").mkdir()
    for wheel in wheel_closure(flannel_charm / "wheelhouse", ["charms.reactive", "setuptools"]):
        shutil.copy2(wheel, dest / "wheelhouse" / wheel.name)
    (dest / "wheelhouse.txt").write_text("charms.reactive\nsetuptools\n")
    return dest


# --- measuring ----------------------------------------------------------------------

def _children_cpu(machines=()) -> float:
    """CPU of every process this one waited for, plus what the hook tools'
    calls cost in this process (sandbox.juju.agent_socket: they run here)
    and what the machines' systemctl servers spent on calls (their log)."""
    from sandbox.juju.agent_socket import ALL_CALLS
    from sandbox.systemctl import SERVED_CPU_LOG, served_cpu
    usage = _rusage.getrusage(_rusage.RUSAGE_CHILDREN)
    served = sum(served_cpu((m.read_file(SERVED_CPU_LOG) or b"").decode()) for m in machines)
    return usage.ru_utime + usage.ru_stime + ALL_CALLS.cpu_seconds + served


# A hook's usual calls, as charms.reactive makes them in every hook.
TOOL_CALLS = ("config-get --all --format=json", "relation-ids --format=json cni",
              "juju-log -l DEBUG bench", "status-get")


def tool_call_cost(controller, unit: str, rounds: int = 50) -> dict:
    """CPU of one hook tool call, as the sandbox serves it: the calling
    process tree (the client) and, separately, the agent's side in this
    process; the shell loop around the calls is measured alone and taken off."""
    from sandbox.juju.agent_socket import ALL_CALLS
    calls = "; ".join(f"{c} >/dev/null" for c in TOOL_CALLS)

    def loop(body: str) -> tuple[float, float]:
        script = f"i=0; while [ $i -lt {rounds} ]; do {body}; i=$((i+1)); done"
        before, agent = _rusage.getrusage(_rusage.RUSAGE_CHILDREN), ALL_CALLS.cpu_seconds
        cp = controller.exec(unit, ["/bin/sh", "-c", script])
        after = _rusage.getrusage(_rusage.RUSAGE_CHILDREN)
        if cp.returncode != 0:
            raise RuntimeError(f"hook tools failed in {unit}: {cp.stderr[-500:]!r}")
        return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
                ALL_CALLS.cpu_seconds - agent)
    empty, _ = loop(":")
    client, agent = loop(calls)
    n = rounds * len(TOOL_CALLS)
    return {"calls": n, "client": max(0.0, client - empty) / n, "agent": agent / n}


@dataclass
class HookCost:
    wall: float
    cpu: float


def hook_cost(controller, unit: str, hook: str, machines=()) -> HookCost:
    """Fire one hook on one unit; its wall time (the agent's) and the CPU of
    its process tree (every process it waited for, and the systemctl calls
    the `machines`' servers answered)."""
    before = _children_cpu(machines)
    controller.fire(unit, hook)
    runs = [r for r in controller.settle() if r.unit == unit and r.hook == hook]
    cpu = _children_cpu(machines) - before
    if not runs or not runs[-1].ok:
        raise RuntimeError(f"{unit} {hook} failed: {runs[-1].stderr_tail if runs else 'not run'}")
    return HookCost(wall=runs[-1].duration, cpu=cpu)


def bootstrap_seconds(machine, unit: str) -> Optional[float]:
    """What the unit's first dependency install took, from its bootstrap log."""
    agent = "/var/lib/juju/agents/unit-{}".format(unit.replace("/", "-"))
    text = (machine.read_file(f"{agent}/{BOOTSTRAP_LOG}") or b"").decode()
    found = re.findall(r"==== done in ([0-9.]+)s", text)
    return float(found[0]) if found else None


# The bootstrap alone, as the first hook runs it (the machine's python3, the
# charm's bootstrap module), into a venv of its own: argv charm_dir venv_dir.
BOOTSTRAP_ALONE = """
import sys, time
sys.path.insert(0, sys.argv[1] + "/lib")
from charms.flannel.bootstrap import ensure
started = time.monotonic()
ensure(sys.argv[1], sys.argv[2])
print(time.monotonic() - started)
"""


def bootstrap_runs(machine, units: dict[str, str], runs: int) -> dict[str, list[float]]:
    """Each charm's bootstrap (creating a venv and unpacking its wheelhouse
    into it) `runs` times, interleaved, on an idle machine: the first hook's
    own bootstrap runs while the cluster deploys, the bare charm's later on a
    quiet one, so their logs do not compare."""
    seconds: dict[str, list[float]] = {name: [] for name in units}
    for run in range(runs):
        for name, unit in units.items():
            charm_dir = "/var/lib/juju/agents/unit-{}/charm".format(unit.replace("/", "-"))
            venv = f"/tmp/bench-bootstrap-{name}-{run}/venv"
            done = machine.run(["python3", "-c", BOOTSTRAP_ALONE, charm_dir, venv])
            seconds[name].append(float(done.stdout.split()[-1]))
            machine.run(["rm", "-rf", os.path.dirname(venv)])
    return seconds


def flanneld_start_to_lease(machine, timeout: float = 30.0) -> float:
    """systemctl start flannel -> /run/flannel/subnet.env written, on one machine."""
    machine.run(["systemctl", "stop", "flannel"], check=False)
    machine.run(["rm", "-f", "/run/flannel/subnet.env"], check=False)
    started = time.monotonic()
    machine.run(["systemctl", "start", "flannel"], check=False)
    while time.monotonic() - started < timeout:
        if machine.read_file("/run/flannel/subnet.env"):
            return time.monotonic() - started
        time.sleep(0.01)
    raise RuntimeError("flanneld wrote no subnet.env in {:.0f}s".format(timeout))


def machine_busy_seconds() -> float:
    """CPU seconds this whole machine's cores have spent busy since boot
    (/proc/stat: user, nice, system, irq and softirq; guest time is in user.
    Not steal: the hypervisor running someone else while this machine's
    work waited)."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq, *_steal = (
            int(value) for value in stat.readline().split()[1:9])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


SANDBOX_JUJU = "the sandbox's Juju"


def running_cpu() -> dict[tuple[int, int], tuple[str, float]]:
    """Every running process's command name and CPU seconds so far, with
    what its children that it waited for spent (flanneld's iptables calls),
    by (pid, start time): a pid reused meanwhile is another process."""
    found, tick = {}, os.sysconf("SC_CLK_TCK")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                text = stat.read()
        except OSError:   # (gone meanwhile)
            continue
        name, _, rest = text.partition("(")[2].rpartition(")")
        # (from the state on: utime 11, stime 12, the reaped children's
        # cutime 13 and cstime 14, starttime 19); the children of this
        # process (the hooks) and of the machines' systemctl servers (the
        # calls, from their log) are in the hooks' CPU already
        fields = rest.split()
        reaped = int(fields[13]) + int(fields[14])
        if reaped and (int(entry.name) == os.getpid() or _serves_systemctl(entry.name)):
            reaped = 0
        found[(int(entry.name), int(fields[19]))] = \
            (name, (int(fields[11]) + int(fields[12]) + reaped) / tick)
    return found


def _serves_systemctl(pid: str) -> bool:
    from sandbox.systemctl import INSTALL_DIR
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return INSTALL_DIR.encode() in cmdline.read()
    except OSError:
        return False


def cpu_by_command(before: dict, after: dict, *, own_less: float = 0.0) -> dict[str, float]:
    """CPU seconds the processes running at the end spent since `before`,
    summed by command name, the largest first. This process (the sandbox's
    Juju, and the benchmark's loop) is named as such, less `own_less`: the
    hook tool calls it served, which the hooks' CPU counts already. What
    ended meanwhile, the hooks, is not here: the children's rusage has it."""
    spent: dict[str, float] = {}
    me = os.getpid()
    for (pid, start), (name, cpu) in after.items():
        was = before.get((pid, start))
        # (a kernel worker renames itself as it works)
        name = SANDBOX_JUJU if pid == me else name.split("/", 1)[0]
        spent[name] = spent.get(name, 0.0) + cpu - (was[1] if was else 0.0) \
            - (own_less if pid == me else 0.0)
    return dict(sorted(spent.items(), key=lambda item: -item[1]))


@contextlib.contextmanager
def timed(into: dict, key: str, machines=()):
    started, cpu = time.monotonic(), _children_cpu(machines)
    busy = machine_busy_seconds()
    try:
        yield
    finally:
        into[key] = {"wall": time.monotonic() - started,
                     "cpu": _children_cpu(machines) - cpu,
                     "machine cpu": machine_busy_seconds() - busy}


def wait_active(cluster, app: str, timeout: float = 120.0) -> None:
    """update-status until every unit of ``app`` is active (no sleep when it already is)."""
    deadline = time.monotonic() + timeout
    while True:
        units = cluster.controller.units(app)
        states = {u: cluster.workload(u)[0] for u in units}
        if units and all(s == "active" for s in states.values()):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{app} not active after {timeout:.0f}s: {states}")
        time.sleep(0.2)
        cluster.controller.update_status(app)
        cluster.settle()


# --- the runs ------------------------------------------------------------------------

@dataclass
class Results:
    figures: dict = field(default_factory=dict)

    def put(self, section: str, key: str, value) -> None:
        self.figures.setdefault(section, {})[key] = value


def bench_side_by_side(charm: Path, resource: Path, bare: Path, runs: int,
                       results: Results, say: Callable[[str], None]) -> None:
    """Bootstrap, update-status and the re-add cycle, on a two-machine cluster."""
    from sandbox.cluster import CNI_RELATION, Cluster

    with Cluster(charm, resource, workers=2, say=say) as cluster:
        ctl = cluster.controller
        cluster.deploy_flannel()
        wait_active(cluster, "flannel")
        ctl.deploy(BARE, bare)
        ctl.add_relation(*BARE_ETCD_RELATION)
        ctl.add_relation(*BARE_CNI_RELATION)
        cluster.settle()
        wait_active(cluster, BARE)
        m1 = cluster.machines["m1"]
        machines = list(cluster.machines.values())
        flannel_unit, bare_unit = cluster.unit_on("m1"), _unit_on(cluster, BARE, "m1")
        results.put("bootstrap", "flannel, in its install hook", bootstrap_seconds(
            m1, flannel_unit))
        results.put("bootstrap", "bare, in its install hook", bootstrap_seconds(m1, bare_unit))
        say(f"-- bootstrap x{BOOTSTRAP_RUNS}, interleaved")
        for name, seen in bootstrap_runs(m1, {"flannel": flannel_unit, BARE: bare_unit},
                                         BOOTSTRAP_RUNS).items():
            results.put("bootstrap", name, statistics.median(seen))

        say(f"-- update-status x{runs}, interleaved")
        costs = {"flannel": [], "bare": []}
        for _ in range(runs):
            costs["flannel"].append(hook_cost(ctl, flannel_unit, "update-status", [m1]))
            costs["bare"].append(hook_cost(ctl, bare_unit, "update-status", [m1]))
        for name, seen in costs.items():
            results.put("update-status", name, {
                "wall": statistics.median(c.wall for c in seen),
                "cpu": statistics.median(c.cpu for c in seen)})
        say("-- update-status, profiled")
        profiles = profile_dir(cluster)
        for _ in range(PROFILED_RUNS):
            for unit in (flannel_unit, bare_unit):
                ctl.fire(unit, "update-status")
                ctl.settle()
        for name, unit in (("flannel", flannel_unit), (BARE, bare_unit)):
            results.put("update-status profile", name,
                        median_profile(read_profiles(profiles, unit, "update-status")))
        say("-- hook tool calls")
        results.put("hook tools", "per call", tool_call_cost(ctl, flannel_unit))

        cycles: dict = {"flannel": ([], []), BARE: ([], [])}
        for cycle in range(READD_CYCLES):   # interleaved: the machine's speed drifts
            for app, relation in (("flannel", CNI_RELATION), (BARE, BARE_CNI_RELATION)):
                say(f"-- the re-add cycle, {app} ({cycle + 1} of {READD_CYCLES})")
                mark = {u: len(read_profiles(profiles, u)) for u in ctl.units(app)}
                phases, profiled = cycles[app]
                phases.append(readd_phases(cluster, app, relation, machines,
                                           pod=app == "flannel"))
                # every hook of the cycle: the removed units' and their successors'
                hooks = [record for unit in sorted(set(ctl.units(app)) | set(mark))
                         for record in read_profiles(profiles, unit)[mark.get(unit, 0):]
                         if record["hook"] != "update-status"]
                profiled.append(summed_profile(hooks))
        for app, (phases, profiled) in cycles.items():
            results.put("re-add", app, {phase: {key: statistics.median(
                p[phase][key] for p in phases) for key in phases[0][phase]}
                for phase in phases[0]})
            results.put("re-add profile", app, median_of(profiled))
            # (each cycle's own sum: a sum of the phases' medians is no cycle's)
            results.put("re-add to active", app, statistics.median(
                sum(fig["wall"] for phase, fig in p.items() if phase != "remove-relation")
                for p in phases))
        results.put("re-add", "flanneld start-to-lease", statistics.median(
            flanneld_start_to_lease(m1) for _ in range(READD_CYCLES)))
        wait_active(cluster, "flannel")


# --- what each hook spends its time on (charms/flannel/hook_profile.py) ---------------------

PROFILED_RUNS = 5
OUTSIDE_SHOWN = 6   # commands named in a deploy's CPU outside the hooks
READD_CYCLES = 3   # of each charm, interleaved; each figure is their median
BOOTSTRAP_RUNS = 5


def profile_dir(cluster) -> Path:
    """From now on every hook of the cluster appends its profile here (the
    cluster's workdir is the host's /tmp, which the machines share)."""
    from sandbox import import_charm_library
    import_charm_library()
    from charms.flannel.bootstrap import PROFILE_ENV
    from charms.flannel.hook_profile import CPROFILE_ENV
    where = Path(cluster.workdir) / "hook-profiles"
    where.mkdir(exist_ok=True)
    cluster.controller.agent.extra_env[PROFILE_ENV] = str(where)
    if os.environ.get(CPROFILE_ENV):  # cProfile statistics per hook, for a closer look
        cluster.controller.agent.extra_env[CPROFILE_ENV] = os.environ[CPROFILE_ENV]
    return where


def read_profiles(where: Path, unit: str, hook: Optional[str] = None) -> list[dict]:
    path = where / (unit.replace("/", "-") + ".jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()] \
        if path.exists() else []
    return [r for r in records if hook is None or r["hook"] == hook]


def _flat(record: dict) -> dict:
    """A profile's figures: seconds, counts, commands and HTTP by kind."""
    commands = record.get("commands", {})
    http = record.get("http", {})
    return {"python wall": record["wall"], "python CPU": record["cpu"],
            "imports (s)": record["import_seconds"],
            "modules imported": record["modules_imported"],
            "commands (s)": record["command_seconds"],
            "hook tool calls": commands.get("tool", 0),
            "other commands": sum(n for c, n in commands.items() if c != "tool"),
            "etcd requests": http.get("etcd", 0), "readyz requests": http.get("readyz", 0),
            "TLS handshakes": record.get("tls", 0),
            "commands run": ", ".join(f"{c} x{n}" for c, n in sorted(commands.items())
                                      if c != "tool") or "-",
            "run again in one hook": _repeated([record])}


def _repeated(records: list[dict]) -> str:
    """The command lines a hook ran more than once, with the hook: each
    one asked the same question twice, or changed what it asks about."""
    return ", ".join(f"{r['hook']}: {line} x{n}" for r in records
                     for line, n in sorted(r.get("repeated", {}).items())) or "-"


def median_profile(records: list[dict]) -> dict:
    if not records:
        return {}
    flats = [_flat(r) for r in records]
    return {key: (statistics.median(f[key] for f in flats)
                  if not isinstance(flats[0][key], str) else flats[-1][key])
            for key in flats[0]}


def summed_profile(records: list[dict]) -> dict:
    if not records:
        return {}
    flats = [_flat(r) for r in records]
    out = {key: sum(f[key] for f in flats) for key in flats[0]
           if not isinstance(flats[0][key], str)}
    out["hooks"] = len(flats)
    commands: dict = {}
    for record in records:
        for command, n in record.get("commands", {}).items():
            if command != "tool":
                commands[command] = commands.get(command, 0) + n
    out["commands run"] = ", ".join(f"{c} x{n}" for c, n in sorted(
        commands.items(), key=lambda item: -item[1])) or "-"
    out["run again in one hook"] = _repeated(records)
    return out


def median_of(profiles: list[dict]) -> dict:
    """Each figure's median over several cycles' summed profiles (a text
    figure, the last cycle's)."""
    profiles = [p for p in profiles if p]   # (a cycle whose hooks left no profile)
    if not profiles:
        return {}
    return {key: (statistics.median(p[key] for p in profiles)
                  if not isinstance(profiles[0][key], str) else profiles[-1][key])
            for key in profiles[0]}


def readd_phases(cluster, app: str, relation: tuple, machines, pod: bool) -> dict:
    """The re-add cycle of `app`'s cni relation, timed by phase; with `pod`,
    until a new pod on m1 has an address."""
    ctl, phases = cluster.controller, {}
    with timed(phases, "remove-relation", machines):
        ctl.remove_relation(*relation)
        cluster.settle()
    with timed(phases, "add-relation (hooks)", machines):
        ctl.add_relation(*relation)
        cluster.settle()
    with timed(phases, "until every unit is active", machines):
        wait_active(cluster, app)
    if pod:
        with timed(phases, "a new pod addressed", machines):
            if not cluster.start_pod("m1").address:
                raise RuntimeError("the new pod got no address")
    return phases


def _unit_on(cluster, app: str, machine: str) -> str:
    for unit in cluster.controller.units(app):
        if cluster.controller.unit(unit).get("machine") == cluster.machine_ids[machine]:
            return unit
    raise RuntimeError(f"no {app} unit on {machine}")


def bench_deploy(charm: Path, resource: Path, machines: int, results: Results,
                 say: Callable[[str], None]) -> None:
    """Deploy flannel on N machines until every unit is active."""
    from sandbox.cluster import Cluster

    with Cluster(charm, resource, workers=machines, say=say) as cluster:
        from sandbox.juju.agent_socket import ALL_CALLS
        figures: dict = {}
        running, calls = running_cpu(), ALL_CALLS.cpu_seconds
        with timed(figures, "deploy", cluster.machines.values()):
            cluster.deploy_flannel()
            wait_active(cluster, "flannel", timeout=300)
        figures["cpu outside the hooks, by command"] = cpu_by_command(
            running, running_cpu(), own_less=ALL_CALLS.cpu_seconds - calls)
        figures["cpu per unit"] = figures["deploy"]["cpu"] / machines
        # what the deploy could take at best: its hooks' CPU spread over the cores
        figures["cpu floor"] = figures["deploy"]["cpu"] / (os.cpu_count() or 1)
        # and all the machine did meanwhile (flanneld and etcd, whose lease
        # watch grows with the nodes, the sandbox's Juju): on a quiet host,
        # wall above this floor is time the cores stood idle, something
        # serialising (other load on the host fills idle cores and hides it)
        figures["machine cpu floor"] = figures["deploy"]["machine cpu"] / (os.cpu_count() or 1)
        results.put("deploy", str(machines), figures)


# --- the report ----------------------------------------------------------------------

def _ratio(a, b) -> str:
    return "{:.2f}x".format(a / b) if a and b else "-"


def report(results: Results) -> str:
    f = results.figures
    lines = ["{:<44} {:>10} {:>10} {:>8}".format("figure", "flannel", "bare", "ratio")]

    def row(name, a, b=None, unit="s"):
        fmt = ("{:.3f}" + unit).format
        lines.append("{:<44} {:>10} {:>10} {:>8}".format(
            name, fmt(a) if a is not None else "-", fmt(b) if b is not None else "-",
            _ratio(a, b) if b is not None else ""))

    if "bootstrap" in f:
        b = f["bootstrap"]
        row(f"bootstrap, idle machine (median of {BOOTSTRAP_RUNS})", b["flannel"], b[BARE])
        row("bootstrap, in the install hook (deploying)", b["flannel, in its install hook"],
            b["bare, in its install hook"])
    if "update-status" in f:
        us = f["update-status"]
        row("update-status wall (median)", us["flannel"]["wall"], us["bare"]["wall"])
        row("update-status CPU (median)", us["flannel"]["cpu"], us["bare"]["cpu"])
    if "hook tools" in f:
        tools = f["hook tools"]["per call"]
        row(f"hook tool call CPU, ms: client ({tools['calls']} calls)", tools["client"] * 1000,
            unit="")
        row("hook tool call CPU, ms: agent (controller)", tools["agent"] * 1000, unit="")
    if "re-add" in f:
        ra = f["re-add"]
        for phase, fig in ra["flannel"].items():
            bare = ra["bare"].get(phase)
            row(f"re-add: {phase}", fig["wall"], bare["wall"] if bare else None)
        lease = ra["flanneld start-to-lease"]
        row(f"flanneld start-to-lease (median of {READD_CYCLES})", lease)
        totals = f["re-add to active"]
        row("re-add to active + pod (vs bare + lease)", totals["flannel"], totals[BARE] + lease)
    for section, title in (("update-status profile", "update-status (median)"),
                           ("re-add profile",
                            "the re-add cycle's hooks (sum; median of the cycles)")):
        if section not in f or not f[section].get("flannel"):
            continue
        mine, bare = f[section]["flannel"], f[section].get(BARE) or {}
        lines.append(f"-- {title}")
        for key, value in mine.items():
            other = bare.get(key)
            if isinstance(value, str):
                lines.append(f"  {key}: {value}")
            elif isinstance(value, float):
                row(f"  {key}", value, other)
            else:
                shown = other if other is not None else "-"
                lines.append("{:<44} {:>10} {:>10}".format(f"  {key}", value, shown))
    for n, fig in sorted(f.get("deploy", {}).items(), key=lambda kv: int(kv[0])):
        row(f"deploy {n} machine(s): wall", fig["deploy"]["wall"])
        row(f"deploy {n} machine(s): CPU per unit", fig["cpu per unit"])
        if "cpu floor" in fig:
            row(f"deploy {n} machine(s): wall vs CPU floor", fig["deploy"]["wall"],
                fig["cpu floor"])
        if "machine cpu floor" in fig:
            row(f"deploy {n} machine(s): wall vs whole-machine floor", fig["deploy"]["wall"],
                fig["machine cpu floor"])
        if fig.get("cpu outside the hooks, by command"):
            spent = fig["cpu outside the hooks, by command"]
            shown = list(spent.items())[:OUTSIDE_SHOWN]
            rest = fig["deploy"]["machine cpu"] - fig["deploy"]["cpu"] - sum(spent.values())
            lines.append(f"  deploy {n}: CPU outside the hooks: " + ", ".join(
                f"{name} {cpu:.1f}s" for name, cpu in shown) + ", {:.1f}s in {} others; "
                "{:.1f}s of the machine's busy CPU unattributed (interrupts, processes that "
                "came and went, anything else on the host)".format(
                    sum(spent.values()) - sum(cpu for _, cpu in shown),
                    len(spent) - len(shown), rest))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = charm_parser("bench", __doc__)
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    parser.add_argument("--machines", default="1,4,16",
                        help="cluster sizes to deploy (comma-separated; '' for none)")
    parser.add_argument("--runs", type=int, default=20, help="update-status runs per charm")
    parser.add_argument("--parallel", type=int,
                        help="hooks the sandbox's Juju runs at once (default: its own, 16)")
    args = parser.parse_args(argv)
    if args.parallel:
        import os

        from sandbox.juju.controller import PARALLEL_ENV
        os.environ[PARALLEL_ENV] = str(args.parallel)
    resource = resource_for(args)
    results = Results()
    with tempfile.TemporaryDirectory(prefix="flannel-bench-") as tmp:
        bare = make_bare_charm(Path(args.charm), Path(tmp) / BARE)
        bench_side_by_side(Path(args.charm), resource, bare, args.runs, results, print)
        for n in [int(x) for x in args.machines.split(",") if x.strip()]:
            print(f"-- deploy on {n} machine(s)")
            bench_deploy(Path(args.charm), resource, n, results, print)
    print()
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results.figures, indent=2, default=asdict))
        print(f"figures written to {args.json}")
    return 0
