"""Fault rows of the node (issue 11, items 7-9): flanneld killed or
crash-looping, the machine rebooted, many units configuring the network at
once. See sandbox/faults/core.py for the bench and the checks."""
from __future__ import annotations

import io
import os
import signal
import tarfile
import time
from pathlib import Path

from sandbox.faults.core import FaultBench, Outcome, row
from sandbox.network import run

M1 = "m1"
SERVICE = "flannel.service"
# flannel.service's RestartSec= (templates/flannel.service) and some slack for
# a loaded host: how long systemd's Restart= may take to bring flanneld back.
RESTART_WITHIN = 5.0 + 20.0
BROKEN_FLANNELD = b"#!/bin/sh\necho 'flanneld: broken build, exiting' >&2\nexit 1\n"


def wait_for(predicate, timeout: float, interval: float = 0.2):
    """predicate()'s first truthy value within `timeout` seconds, else None."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(interval)


def update_status(bench: FaultBench) -> None:
    """One run of Juju's update-status timer on every flannel unit."""
    bench.ctl.update_status("flannel")
    bench.cluster.settle()


def status_problems(bench: FaultBench, expect_running: dict[str, bool], when: str) -> list[str]:
    """An active unit whose flanneld is not running lies, and so does a
    waiting/blocked unit whose flanneld runs fine (when `expect_running`
    says so); a traceback in a hook is a problem whatever the status."""
    problems = []
    for machine, running in expect_running.items():
        unit = bench.unit_on(machine)
        state, message = bench.cluster.workload(unit)
        pids = bench.cluster.flanneld_pids(machine)
        if state == "active" and not pids:
            problems.append(f"{when}: {unit} says active ({message}) with no flanneld running")
        if not running and state == "active":
            problems.append(f"{when}: {unit} says active while flanneld is failing")
        if not running and (SERVICE not in message or "failing" not in message):
            problems.append(f"{when}: {unit} says {state}: {message!r}, not that "
                            f"{SERVICE} is failing")
    return problems


def hook_tracebacks(bench: FaultBench, since: int) -> list[str]:
    out = []
    for hook in bench.ctl.hook_log[since:]:
        if not hook.ok or "Traceback" in (hook.stderr_tail or ""):
            out.append(f"{hook.unit} {hook.hook} exit {hook.exit_code}: "
                       f"{(hook.stderr_tail or '')[-300:]}")
    return out


def pod_addresses(pod) -> list[str]:
    """The IPv4 addresses the pod's namespace holds now."""
    out = run(["ip", "-n", pod.netns, "-4", "-o", "addr", "show"], check=False).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3]


def broken_resource(good: Path, dest: Path) -> Path:
    """The good resource with flanneld replaced by a script that exits 1 (a
    broken build), cni-plugin/flannel kept: what a bad upgrade attaches."""
    out = io.BytesIO()
    with tarfile.open(good, "r:gz") as src, tarfile.open(fileobj=out, mode="w:gz") as dst:
        for member in src.getmembers():
            if member.name == "flanneld":
                info = tarfile.TarInfo("flanneld")
                info.mode, info.size = 0o755, len(BROKEN_FLANNELD)
                dst.addfile(info, io.BytesIO(BROKEN_FLANNELD))
            elif member.isfile():
                dst.addfile(member, src.extractfile(member))
            else:
                dst.addfile(member)
    dest.write_bytes(out.getvalue())
    return dest


@row("7a flanneld killed with SIGKILL")
def flanneld_killed(bench: FaultBench) -> Outcome:
    bench.deploy()
    cluster, problems = bench.cluster, []
    subnet = cluster.subnet_env(M1).get("FLANNEL_SUBNET")
    # 1. systemd's Restart= alone (no hook runs meanwhile)
    old = cluster.flanneld_pids(M1)
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    bench.say(f"   killed flanneld {old} on {M1}")
    bench.observe("flanneld killed")
    back = wait_for(lambda: [p for p in cluster.flanneld_pids(M1) if p not in old],
                    RESTART_WITHIN)
    if not back:
        problems.append(f"systemd's Restart= did not bring flanneld back within "
                        f"{RESTART_WITHIN:.0f}s")
    else:
        bench.say(f"   flanneld back as {back} by Restart=")
    # 2. killed again, and update-status comes before Restart= does: the
    # status must not claim a running flanneld that is not there.
    since = len(bench.ctl.hook_log)
    old = cluster.flanneld_pids(M1)
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    update_status(bench)
    bench.observe("update-status right after a second kill")
    problems += status_problems(bench, {}, "after the second kill")
    problems += hook_tracebacks(bench, since)
    bench.recover()
    recovery = time.monotonic() - started
    if cluster.subnet_env(M1).get("FLANNEL_SUBNET") != subnet:
        problems.append(f"{M1}'s lease changed: {subnet} -> "
                        f"{cluster.subnet_env(M1).get('FLANNEL_SUBNET')}")
    return bench.outcome("7a flanneld killed with SIGKILL", recovery, problems)


@row("7b flanneld crash-looping (broken binary in an upgraded resource)")
def flanneld_crash_looping(bench: FaultBench) -> Outcome:
    name = "7b flanneld crash-looping (broken binary in an upgraded resource)"
    bench.deploy()
    cluster, problems = bench.cluster, []
    subnets = {m: cluster.subnet_env(m).get("FLANNEL_SUBNET")
               for m in cluster.worker_machines()}
    addresses = {m: pod.address for m, pod in bench.pods.items()}
    broken = broken_resource(cluster.resource, cluster.workdir / "flannel-broken.tar.gz")
    since = len(bench.ctl.hook_log)
    cluster.upgrade_flannel(broken)
    bench.observe("broken resource attached")
    update_status(bench)
    bench.observe("after one update-status")
    everyone = {m: False for m in cluster.worker_machines()}
    problems += status_problems(bench, everyone, "broken flanneld, after one update-status")
    update_status(bench)
    bench.observe("after a second update-status")
    problems += status_problems(bench, everyone, "broken flanneld, after two update-status")
    problems += hook_tracebacks(bench, since)
    started = time.monotonic()
    cluster.upgrade_flannel(cluster.resource)
    bench.recover()
    recovery = time.monotonic() - started
    for m, subnet in subnets.items():
        now = cluster.subnet_env(m).get("FLANNEL_SUBNET")
        if now != subnet:
            problems.append(f"{m}'s lease changed: {subnet} -> {now}")
    for m, pod in bench.pods.items():
        if addresses[m] not in pod_addresses(pod):
            problems.append(f"pod {pod.name} on {m} lost its address {addresses[m]}")
    return bench.outcome(name, recovery, problems)
