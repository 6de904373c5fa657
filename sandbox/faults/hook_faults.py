"""Fault rows of the hooks themselves (rows 4-6).

4a-4d  A hook SIGKILLed (its whole process group, as a machine dying
       mid-hook leaves it) at offsets spread over its run, in install,
       config-changed, upgrade-charm and stop; Juju shows the unit in error
       and `juju resolve` (Juju 3 retries by itself) re-runs the hook: the
       unit must converge every time. The hook's duration is measured first
       (an unkilled run); each round kills every unit once, at a different
       offset. FLANNEL_FAULT_KILL_STEP_MS (e.g. 20) makes a thorough run:
       an offset every that many milliseconds over the whole hook, instead
       of the few rounds that keep the four rows within about four minutes.

5      The disk full during install: a 512 KiB tmpfs over /usr/local/bin on
       one machine (flanneld is ~50 MB) in that machine's mount namespace.
       The unit must say so (blocked: "Cannot install /usr/local/bin/flanneld
       (... MB): No space left on device", the hook exits 0: a full disk is
       the operator's to fix, and any later hook retries) and leave nothing
       partial (no temp file, no truncated flanneld); once the tmpfs is
       remounted bigger, update-status completes the install.

6a-6b  The install record damaged (truncated JSON) or missing on one unit.
       The charm's answer (reactive/flannel.py check_record): a record that
       proves nothing blocks the unit with a status naming the record; no
       handler writes through it (so it never "starts over" owning nothing
       and mistakes its own files for someone else's originals), flanneld and
       the pods carry on; stop stops the service but deletes no file it
       cannot prove it wrote, and names what it left (juju-log and status).
       The row then removes flannel as the user would, checks that no worker
       file and none of the damaged unit's files went, says which were left,
       and adds flannel back (recovery: until every unit is active again).
"""
from __future__ import annotations

import gzip
import io
import itertools
import math
import os
import statistics
import tarfile
import time
from pathlib import Path

from sandbox import profile
from sandbox.cluster import CNI_RELATION, FLANNEL, ClusterError
from sandbox.faults.core import CHARM_DIRS, CHARM_FILES, WORKER_BIN, FaultBench, Outcome, row

KILL_STEP_ENV = "FLANNEL_FAULT_KILL_STEP_MS"
# Rounds per row in CI (each round kills the hook on every unit once):
# install and stop cost a remove/add cycle a round (~20 s), the others ~5 s.
# The everyday profile (sandbox.profile) plays one round a hook, two for the
# hooks that do most, whose kills cost a few seconds each.
KILL_ROUNDS = {"install": 2, "config-changed": 4, "upgrade-charm": 4, "stop": 2}
EVERYDAY_KILL_ROUNDS = {"install": 1, "config-changed": 2, "upgrade-charm": 2, "stop": 1}
MISSED_KILL_RETRIES = 2
RECOVER_TIMEOUT = 180.0


# --- helpers --------------------------------------------------------------------------

def kill_offsets(duration: float, kills_per_round: int, hook: str) -> list[list[float]]:
    """Offsets (seconds) into the hook, grouped per round, spread evenly over
    (0, duration): KILL_ROUNDS[hook] rounds (EVERYDAY_KILL_ROUNDS in the everyday
    profile, sandbox.profile), or one offset
    every $FLANNEL_FAULT_KILL_STEP_MS. Round r kills unit i at offset
    r + i * rounds of the sorted list, so every round reaches into the
    whole run."""
    step_ms = os.environ.get(KILL_STEP_ENV)
    if step_ms:
        total = max(1, math.ceil(duration * 1000 / float(step_ms)))
    else:
        per_hook = KILL_ROUNDS if profile.current() == profile.FULL else EVERYDAY_KILL_ROUNDS
        total = per_hook[hook] * kills_per_round
    rounds = math.ceil(total / kills_per_round)
    total = rounds * kills_per_round
    offsets = [duration * (k + 0.5) / total for k in range(total)]
    return [[offsets[r + i * rounds] for i in range(kills_per_round)] for r in range(rounds)]


def _hook_runs(bench: FaultBench, since: int, hook: str) -> list:
    return [r for r in bench.ctl.hook_log[since:]
            if r.hook == hook and r.unit.startswith(FLANNEL + "/")]


def _duration(runs) -> float:
    if not runs:
        raise ClusterError("no hook run to measure")
    return statistics.median(r.duration for r in runs)


def _errored(bench: FaultBench) -> list[str]:
    return [u for u in bench.cluster.flannel_units()
            if (bench.ctl.unit(u).get("agent") or {}).get("status") == "error"]


def _check_kills(bench: FaultBench, since: int, hook: str, label: str,
                 statuses: dict[str, str]) -> tuple[list[str], dict[str, float], list[str]]:
    """(what was killed, unit -> (seconds its hook ran, seconds its kill was
    armed at) where the kill missed it, problems): every killed hook must
    show as failed."""
    killed, missed, problems = [], {}, []
    for run in _hook_runs(bench, since, hook):
        if run.kill_missed:
            missed[run.unit] = (run.duration, run.kill_after)
        if run.killed_after is None:
            continue
        killed.append(f"{run.unit}@{run.killed_after:.2f}s")
        want = f'error: hook failed: "{hook}"'
        if statuses.get(run.unit) != want:
            problems.append(f"{label}: {run.unit}'s {hook} was killed but it shows "
                            f"{statuses.get(run.unit)!r}, not {want!r}")
    left = bench.ctl.cancel_kills()
    if left:
        problems.append(f"{label}: armed kills never fired: {left}")
    return killed, missed, problems


def _by_index(units: list[str], missed: dict[str, tuple]) -> dict[int, tuple]:
    """What _check_kills says of each unit, keyed by its index in `units`."""
    return {i: missed[u] for i, u in enumerate(units) if u in missed}


def _round_checks(bench: FaultBench, label: str) -> list[str]:
    """What the bench checks at the end, minus the pods: cheap enough per round."""
    problems = [f"{label}: {p}" for p in bench.lost_worker_files()]
    for unit in bench.cluster.flannel_units():
        problems += [f"{label}: {p}" for p in bench.record_problems(unit)]
        machine = bench.cluster.machine_of(unit)
        for path, entry in bench.record(unit).get("files", {}).items():
            if path not in ("/usr/local/bin/flanneld", f"{WORKER_BIN}/flannel"):
                continue
            # Nothing stood there before flannel but the flannel plugin of the
            # reactive kubernetes-worker of 2020: any other original means a
            # retry took the charm's own earlier file for someone else's,
            # which stop would then put back.
            theirs = bench.principals_flannel(machine) if path.endswith("/flannel") else None
            kept = bench.kept_original(unit, path) if entry.get("original") else None
            if kept != theirs:
                problems.append(f"{label}: {unit}'s record keeps {'an' if kept else 'no'} "
                                f"'original' of {path}: removing flannel would put "
                                f"{'an old flanneld back' if kept else 'nothing back'}")
    return problems


def _leftovers(bench: FaultBench, machine: str) -> list[str]:
    """What a removed flannel left on a machine (must be nothing)."""
    m = bench.machine(machine)
    out = [p for p in CHARM_FILES if m.exists(p) and bench.flannels_file(machine, p)]
    for directory in CHARM_DIRS:
        out += [f"{directory}/{n}" for n in m.ls(directory) or []
                if n.startswith(".") and n.endswith(".tmp")]
    if m.exists("/etc/ssl/flannel"):
        out.append("/etc/ssl/flannel/")
    if bench.cluster.flanneld_pids(machine):
        out.append("a running flanneld")
    out += bench.cluster.flannel_leftovers(machine)   # rules, routes, links, units
    return out


def _resolve_until_gone(bench: FaultBench, timeout: float = RECOVER_TIMEOUT) -> float:
    """`juju resolve` every flannel unit in error until they are all gone
    (their stop and remove ran); seconds it took."""
    started = time.monotonic()
    while bench.cluster.flannel_units():
        for unit in _errored(bench):
            bench.ctl.resolve(unit, retry=True)
        bench.cluster.settle()
        if time.monotonic() - started > timeout:
            raise ClusterError(f"flannel units not removed in {timeout:.0f}s: "
                               f"{bench.statuses()}")
    return time.monotonic() - started


def variant_resource(resource: Path, out: Path, tag: bytes) -> Path:
    """The resource with `tag` appended to both binaries (an ELF runs the
    same with trailing bytes): an upgrade the charm must really install."""
    members = []
    with tarfile.open(resource, "r:gz") as tar:
        for info in tar.getmembers():
            data = tar.extractfile(info).read() if info.isfile() else None
            members.append((info, data))
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=1) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for info, data in members:
                if data is None:
                    tar.addfile(info)
                    continue
                data += b"\0" + tag
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    out.write_bytes(buf.getvalue())
    return out


# --- row 4: hooks killed ---------------------------------------------------------------

def _estimate(bench: FaultBench, hook: str, unit: str | None = None) -> float:
    """The hook's duration now: the median of its last three complete runs
    (the load on the machine changes; a run measured while two machines
    installed at once may take several times longer than the next), on
    `unit` if it has any (the leader's config-changed does more)."""
    done = [r for r in _hook_runs(bench, 0, hook) if r.exit_code == 0 and r.killed_after is None]
    mine = [r for r in done if r.unit == unit]
    return _duration((mine or done)[-3:])


def _sweep(bench: FaultBench, name: str, hook: str, duration: float, kill_round) -> Outcome:
    """Play kill_round(offsets) for every round; returns the row's outcome
    (recovery: the worst round's). The offsets are fractions of the hook's
    duration, measured again before each round (_estimate); offsets[i] is
    for the i-th unit, None for none. A kill the hook outran (it ended
    first: the load changed) is tried again at an offset scaled to the run
    it missed, up to MISSED_KILL_RETRIES times; the row says how many of
    its kills landed."""
    units = len(bench.cluster.worker_machines())
    rounds = kill_offsets(1.0, units, hook) if not os.environ.get(KILL_STEP_ENV) else \
        [[o / duration for o in r] for r in kill_offsets(duration, units, hook)]
    bench.say(f"   {hook} takes {duration:.2f}s: {len(rounds)} rounds of {units} kills, at "
              f"{', '.join(f'{o:.0%}' for r in rounds for o in r)} of its run")
    problems, worst, killed = [], 0.0, []
    armed = 0
    todo = [(list(fractions), 0) for fractions in rounds]
    n = 0
    while todo:
        fractions, attempt = todo.pop(0)
        n += 1
        now = _estimate(bench, hook)
        offsets = [None if f is None else f * now for f in fractions]
        armed += sum(o is not None for o in offsets)
        label = (f"round {n} ({'/'.join('-' if o is None else f'{o:.2f}s' for o in offsets)}"
                 f" of {now:.2f}s{', again' if attempt else ''})")
        took, hit, missed, found = kill_round(offsets, label)
        for problem in found:
            bench.say(f"   PROBLEM {problem}")
        worst = max(worst, took)
        killed += hit
        problems += found
        if missed and attempt < MISSED_KILL_RETRIES:
            # unit i's hook ended after `ran` seconds, before its kill armed
            # at `armed`: aim at the same point of a run that short
            again = [None] * len(fractions)
            for i, (ran, armed) in missed.items():
                again[i] = fractions[i] * min(1.0, ran / armed if armed else 1.0) * 0.9
            bench.say(f"   {len(missed)} kill(s) missed their hook: trying again")
            todo.insert(0, (again, attempt + 1))
    bench.say(f"   kills landed: {len(killed)} of {armed} armed "
              f"({', '.join(killed) or 'none'})")
    if not killed:
        problems.append(f"no {hook} hook was killed: the sweep tested nothing")
    return bench.outcome(name, worst, problems)


def _kill_existing_units(bench: FaultBench, hook: str, trigger):
    """A round for a hook of running units (config-changed, upgrade-charm):
    arm the kills, trigger, see the units fail, recover."""
    def kill_round(offsets, label):
        ctl = bench.ctl
        units = bench.cluster.flannel_units()
        everyone = _estimate(bench, hook)
        for unit, offset in zip(units, offsets):
            if offset is not None:  # the same fraction of this unit's own run
                ctl.kill_hook_after(unit, hook, offset * _estimate(bench, hook, unit) / everyone)
        since = len(ctl.hook_log)
        trigger()
        bench.cluster.settle()
        statuses = bench.observe(f"{label}")
        hit, missed, problems = _check_kills(bench, since, hook, label, statuses)
        took = bench.recover(timeout=RECOVER_TIMEOUT)
        return took, hit, _by_index(units, missed), problems + _round_checks(bench, label)
    return kill_round


@row("4a install killed (SIGKILL sweep)")
def install_killed(bench: FaultBench) -> Outcome:
    since = len(bench.ctl.hook_log)
    bench.deploy()
    # flannel up from the row before (a shared cluster): its last installs
    installs = _hook_runs(bench, since, "install") or [
        r for r in _hook_runs(bench, 0, "install") if r.ok and r.killed_after is None][-2:]
    duration = _duration(installs)
    ctl, cluster = bench.ctl, bench.cluster

    def kill_round(offsets, label):
        cluster.remove_cni_relation()
        problems = [f"{label}: before the kill: {p}" for p in bench.lost_worker_files()]
        first = ctl.model().app(FLANNEL)["next-unit"]
        units = [f"{FLANNEL}/{first + i}" for i in range(len(offsets))]
        for unit, offset in zip(units, offsets):
            if offset is not None:
                ctl.kill_hook_after(unit, "install", offset)
        since = len(ctl.hook_log)
        ctl.add_relation(*CNI_RELATION)
        cluster.settle()
        statuses = bench.observe(label)
        hit, missed, found = _check_kills(bench, since, "install", label, statuses)
        took = bench.recover(timeout=RECOVER_TIMEOUT)
        return (took, hit, _by_index(units, missed),
                problems + found + _round_checks(bench, label))
    return _sweep(bench, "4a install killed (SIGKILL sweep)", "install", duration, kill_round)


@row("4b config-changed killed (SIGKILL sweep)")
def config_changed_killed(bench: FaultBench) -> Outcome:
    bench.deploy()
    cluster = bench.cluster
    # A change config-changed must act on (etcd, flanneld's restart, both
    # nodes' vxlan device) that leaves running pods their addresses.
    vnis = itertools.cycle((2, 1))
    since = len(bench.ctl.hook_log)
    cluster.configure(vni=next(vnis))
    bench.recover(timeout=RECOVER_TIMEOUT)
    duration = _duration(_hook_runs(bench, since, "config-changed"))
    kill_round = _kill_existing_units(
        bench, "config-changed", lambda: bench.ctl.config(FLANNEL, vni=next(vnis)))
    return _sweep(bench, "4b config-changed killed (SIGKILL sweep)", "config-changed",
                  duration, kill_round)


@row("4c upgrade-charm killed (SIGKILL sweep)")
def upgrade_charm_killed(bench: FaultBench) -> Outcome:
    bench.deploy()
    cluster = bench.cluster
    # Alternate two resources whose binaries differ: each upgrade installs.
    resources = [variant_resource(cluster.resource, cluster.workdir / f"flannel-v{n}.tar.gz",
                                  f"sandbox variant {n}".encode()) for n in (1, 2)]
    turn = itertools.cycle(resources)
    since = len(bench.ctl.hook_log)
    cluster.upgrade_flannel(next(turn))
    bench.recover(timeout=RECOVER_TIMEOUT)
    duration = _duration(_hook_runs(bench, since, "upgrade-charm"))
    kill_round = _kill_existing_units(
        bench, "upgrade-charm", lambda: bench.ctl.upgrade_charm(
            FLANNEL, None, resources={cluster.resource_name: next(turn)}))
    return _sweep(bench, "4c upgrade-charm killed (SIGKILL sweep)", "upgrade-charm",
                  duration, kill_round)


@row("4d stop killed (SIGKILL sweep)")
def stop_killed(bench: FaultBench) -> Outcome:
    bench.deploy()
    ctl, cluster = bench.ctl, bench.cluster
    machines = cluster.worker_machines()
    since = len(ctl.hook_log)
    cluster.remove_cni_relation()
    duration = _duration(_hook_runs(bench, since, "stop"))
    baseline = [f"after a clean removal: {m} keeps {x}" for m in machines
                for x in _leftovers(bench, m)]
    cluster.add_cni_relation()
    bench.recover(timeout=RECOVER_TIMEOUT)

    def kill_round(offsets, label):
        units = cluster.flannel_units()
        for unit, offset in zip(units, offsets):
            if offset is not None:
                ctl.kill_hook_after(unit, "stop", offset)
        since = len(ctl.hook_log)
        ctl.remove_relation(*CNI_RELATION)
        cluster.settle()
        statuses = bench.observe(label)
        hit, missed, problems = _check_kills(bench, since, "stop", label, statuses)
        took = _resolve_until_gone(bench)
        problems += [f"{label}: {p}" for p in bench.lost_worker_files()]
        problems += [f"{label}: after the killed stop and its re-run, {m} keeps {x}"
                     for m in machines for x in _leftovers(bench, m)]
        # and flannel comes back where it was removed
        ctl.add_relation(*CNI_RELATION)
        cluster.settle()
        bench.recover(timeout=RECOVER_TIMEOUT)
        return took, hit, _by_index(units, missed), problems + _round_checks(bench, label)
    outcome = _sweep(bench, "4d stop killed (SIGKILL sweep)", "stop", duration, kill_round)
    outcome.problems[:0] = baseline
    return outcome


# --- row 6: the install record damaged ---------------------------------------------------

def _record_file(bench: FaultBench, unit: str) -> str:
    charm_dir = bench.ctl.unit(unit)["charm-dir"]
    return str(Path(charm_dir).parent / "flannel-install-record" / "record.json")


def _failed_since(bench: FaultBench, since: int) -> list[str]:
    return [f"{r.unit} {r.hook} failed (exit {r.exit_code}): {r.stderr_tail[-300:]}"
            for r in bench.ctl.hook_log[since:] if not r.ok]


@row("6 install record truncated (m1) and missing (m2)")
def record_damaged(bench: FaultBench) -> Outcome:
    """The record of what flannel installed, truncated on one machine and
    gone on the other: each unit writes and deletes nothing (blocked, naming
    its record) through a config change, a refresh and update-status;
    removed, it leaves the files it cannot prove it wrote and names them;
    added back, flannel works again."""
    name = "6 install record truncated (m1) and missing (m2)"
    bench.deploy()
    ctl, cluster = bench.ctl, bench.cluster
    damages = dict(zip(cluster.worker_machines()[:2], (_truncate, _delete)))
    units = {machine: bench.unit_on(machine) for machine in damages}
    records = {machine: _record_file(bench, units[machine]) for machine in damages}
    files = {machine: {p: bench.machine(machine).read_file(p) for p in CHARM_FILES
                       if bench.machine(machine).exists(p)} for machine in damages}
    for machine, damage in damages.items():
        damage(bench.machine(machine), records[machine])
    damaged = {machine: bench.machine(machine).read_file(records[machine])
               for machine in damages}
    problems = []
    log_before = {machine: len(ctl.unit_log(units[machine])) for machine in damages}
    since = len(ctl.hook_log)
    # The next hooks, as they come: a config change, a refresh, update-status.
    for hook in ("config-changed", "upgrade-charm", "update-status"):
        for unit in units.values():
            ctl.fire(unit, hook)
        cluster.settle()
        statuses = bench.observe(f"after {hook}")
    problems += _failed_since(bench, since)
    for machine, unit in units.items():
        m, record_file = bench.machine(machine), records[machine]
        log = ctl.unit_log(unit)[log_before[machine]:]
        if "Traceback" in log:
            problems.append(f"{unit}: a traceback in its log: "
                            f"{log[log.index('Traceback'):][:400]}")
        if not statuses[unit].startswith("blocked: ") or record_file not in statuses[unit]:
            problems.append(f"{unit} shows {statuses[unit]!r}: not blocked naming {record_file}")
        if record_file not in log:
            problems.append(f"{unit}'s log (juju-log) does not name {record_file}")
        if m.read_file(record_file) != damaged[machine]:
            problems.append(f"{unit} rewrote its damaged record {record_file} (started over?)")
        changed = [p for p, data in files[machine].items() if m.read_file(p) != data]
        if changed:
            problems.append(f"{unit} changed files while its record was damaged: {changed}")
        log_before[machine] += len(log)
    # The user removes flannel.
    since = len(ctl.hook_log)
    cluster.remove_cni_relation()
    problems += _failed_since(bench, since)
    problems += [f"after removal: {p}" for p in bench.lost_worker_files()]
    for machine, unit in units.items():
        m, record_file = bench.machine(machine), records[machine]
        left = sorted(p for p in files[machine] if m.exists(p))
        gone = sorted(p for p in files[machine] if not m.exists(p))
        if gone:
            problems.append(f"stop on {machine} deleted {gone} though its record could not "
                            "prove flannel wrote them")
        stop_log = ctl.unit_log(unit)[log_before[machine]:]
        if "Traceback" in stop_log:
            problems.append(f"{unit}: a traceback in its log while being removed: "
                            f"{stop_log[stop_log.index('Traceback'):][:400]}")
        if "removed no file" not in stop_log:
            problems.append(f"{unit}'s stop did not say (juju-log) that it removed no file")
        stop_status = [c["args"] for c in ctl.tool_calls(unit)
                       if c["hook"] == "stop" and c["tool"] == "status-set"]
        if not stop_status or stop_status[-1][:1] != ["blocked"] or \
                record_file not in " ".join(stop_status[-1]):
            problems.append(f"{unit}'s stop status {stop_status[-1:]} does not name "
                            f"{record_file}")
        # What was left, first in the table's "seen" column (the statuses follow).
        bench.seen.insert(0, f"left on {machine} (unproven): "
                             f"{', '.join(Path(p).name for p in left) or 'nothing'}")
        bench.say(f"   left on {machine}, not provably flannel's: {', '.join(left) or 'nothing'}")
    # ... and adds it back.
    started = time.monotonic()
    ctl.add_relation(*CNI_RELATION)
    cluster.settle()
    bench.recover(timeout=RECOVER_TIMEOUT)
    recovery = time.monotonic() - started
    return bench.outcome(name, recovery, problems)


def _truncate(m, path: str) -> None:
    data = m.read_file(path)
    m.write_file(path, data[:len(data) // 2], mode=0o600)


def _delete(m, path: str) -> None:
    m.path_on_host(path).unlink()


# --- row 5: the disk full during install ------------------------------------------------

FULL_DIR = "/usr/local/bin"
FULL_SIZE = "512k"


def _partial(m, directory: str) -> list[str]:
    """Temp files of an interrupted write, and a flanneld that is not whole."""
    names = m.ls(directory) or []
    out = [f"{directory}/{n}" for n in names if n.startswith(".") and n.endswith(".tmp")]
    if "flanneld" in names:
        out.append(f"{directory}/flanneld ({len(m.read_file(directory + '/flanneld'))} bytes)")
    return out


@row("5 disk full during install")
def disk_full(bench: FaultBench) -> Outcome:
    name = "5 disk full during install"
    ctl, cluster = bench.ctl, bench.cluster
    machine = cluster.worker_machines()[0]
    m = bench.machine(machine)
    bench.snapshot(pods=False)   # the worker's files; no pod can run before flannel
    m.run(["mount", "-t", "tmpfs", "-o", f"size={FULL_SIZE},mode=0755", "tmpfs", FULL_DIR])
    problems = []
    try:
        bench.deploy(settle_active=False)
        unit = bench.unit_on(machine)
        for n in range(2):   # the deploy's hooks, then update-status while still full
            statuses = bench.observe("disk full" if n == 0 else "still full, update-status")
            text = statuses[unit]
            if not (text.startswith("blocked: Cannot install /usr/local/bin/flanneld")
                    and "No space left on device" in text):
                problems.append(f"{unit} shows {text!r} on a full disk, not a clear status "
                                f"naming flanneld and the lack of space")
            problems += [f"{unit} left a partial file on the full disk: {p}"
                         for p in _partial(m, FULL_DIR)]
            ctl.update_status(FLANNEL)
            cluster.settle()
        problems += _failed_since(bench, 0)
    finally:
        # Room again: the operator grows the filesystem.
        m.run(["mount", "-o", "remount,size=200m", FULL_DIR])
    recovery = bench.recover(timeout=RECOVER_TIMEOUT)
    return bench.outcome(name, recovery, problems)
