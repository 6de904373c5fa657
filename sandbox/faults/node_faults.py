"""Fault rows of the node (rows 7-9): flanneld killed or
crash-looping, the machine rebooted, many units configuring the network at
once. See sandbox/faults/core.py for the bench and the checks."""
from __future__ import annotations

import io
import ipaddress
import json
import os
import signal
import tarfile
import threading
import time
from pathlib import Path

from sandbox.faults.core import FaultBench, Outcome, row
from sandbox.cluster import NETWORK_PREFIX
from sandbox.network import run
from sandbox.waiting import wait_for

M1 = "m1"
SERVICE = "flannel.service"
# How long to wait for systemd's Restart= to bring flanneld back (RestartSec=
# is 5 s, templates/flannel.service): a bound for a hang, not a speed goal;
# the time it took is printed.
RESTART_WITHIN = 120.0
BROKEN_FLANNELD = b"#!/bin/sh\necho 'flanneld: broken build, exiting' >&2\nexit 1\n"


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
    with tarfile.open(good, "r:gz") as src, \
            tarfile.open(fileobj=out, mode="w:gz", compresslevel=1) as dst:
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
    killed_at = time.monotonic()
    bench.observe("flanneld killed")
    back = wait_for(lambda: [p for p in cluster.flanneld_pids(M1) if p not in old],
                    RESTART_WITHIN)
    if not back:
        problems.append(f"systemd's Restart= did not bring flanneld back within "
                        f"{RESTART_WITHIN:.0f}s")
    else:
        bench.say(f"   flanneld back as {back} by Restart= after "
                  f"{time.monotonic() - killed_at:.1f}s")
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


def lease_keys(bench: FaultBench) -> set[str]:
    return set(bench.cluster.etcd_values("/coreos.com/network/subnets/"))


def routes_to(bench: FaultBench, machine: str, subnet: str) -> list[str]:
    """The routes `machine` has to the pod subnet `subnet` ("10.1.52.1/24")."""
    network = str(ipaddress.ip_interface(subnet).network)
    return [f"{r.get('dst')} dev {r.get('dev')}"
            for r in bench.machine(machine).ip_json("route", "show")
            if r.get("dst") == network]


@row("8 machine reboot")
def machine_reboot(bench: FaultBench) -> Outcome:
    """m1 loses power and boots, twice: first systemd starts what is enabled
    (flanneld) before Juju fires `start`; then with nothing started at boot,
    so that the `start` hook alone must bring flannel back. Its pods are gone
    each time (the kubelet makes new ones): the bench forgets m1's pod, CNI
    DEL releases what it held on disk, and a new pod on m1 must reach m2's
    old pod and back. The lease must be the same, the routes back."""
    name = "8 machine reboot"
    bench.deploy()
    cluster, problems = bench.cluster, []
    other = [m for m in cluster.worker_machines() if m != M1][0]
    subnet = cluster.subnet_env(M1).get("FLANNEL_SUBNET")
    other_subnet = cluster.subnet_env(other).get("FLANNEL_SUBNET")
    leases = lease_keys(bench)
    recovery = 0.0
    for boot_starts in (True, False):
        how = "systemd starts flanneld" if boot_starts else "nothing started at boot"
        old_pod = bench.pods[M1]
        allocations = f"/var/lib/cni/networks/{old_pod.network}"
        if old_pod.address not in (bench.machine(M1).ls(allocations) or []):
            problems.append(f"no host-local allocation of {old_pod.address} before the reboot")
        since = len(bench.ctl.hook_log)
        started = time.monotonic()
        pods, gone = cluster.reboot(M1, start_enabled=boot_starts)   # settled
        bench.forget_pods(M1)
        bench.say(f"   rebooted {M1} ({how}): {', '.join(gone)}")
        if pods != [old_pod]:
            problems.append(f"{how}: the reboot took pods {pods}, not {old_pod}")
        for thing in ("link cni0", "/run/flannel", "pod namespace " + old_pod.netns):
            if thing not in gone:
                problems.append(f"the reboot did not take {thing}")
        if not any(t.startswith("link flannel.") for t in gone):
            problems.append("the reboot did not take flanneld's vxlan link")
        if not any(t.startswith("process ") and t.endswith(" flanneld") for t in gone):
            problems.append("the reboot did not kill flanneld")
        starts = sorted(h.unit for h in bench.ctl.hook_log[since:] if h.hook == "start")
        bench.observe(f"{how}, then start on {', '.join(starts)}")
        if bench.unit_on(M1) not in starts:
            problems.append(f"{how}: Juju fired no start on {bench.unit_on(M1)}")
        problems += hook_tracebacks(bench, since)
        bench.recover()
        recovery = max(recovery, time.monotonic() - started)
        now = cluster.subnet_env(M1).get("FLANNEL_SUBNET")
        if now != subnet:
            problems.append(f"{how}: {M1} came back with another lease: {subnet} -> {now}")
        if lease_keys(bench) != leases:
            problems.append(f"{how}: the leases in etcd changed: {sorted(leases)} -> "
                            f"{sorted(lease_keys(bench))}")
        if not routes_to(bench, M1, other_subnet):
            problems.append(f"{how}: {M1} has no route to {other}'s pods ({other_subnet})")
        if not routes_to(bench, other, subnet):
            problems.append(f"{how}: {other} has no route to {M1}'s pods ({subnet})")
        if old_pod.address in (bench.machine(M1).ls(allocations) or []):
            problems.append(f"{how}: host-local still holds {old_pod.address} for the pod "
                            "the reboot took")
        # the kubelet recreates m1's pod: it must reach m2's old pod and back
        pod = bench.pods[M1] = cluster.start_pod(M1)
        if ipaddress.ip_address(pod.address) not in ipaddress.ip_interface(subnet).network:
            problems.append(f"{how}: the new pod on {M1} got {pod.address}, outside {subnet}")
    return bench.outcome(name, recovery, problems)


CONFIG_KEY = f"{NETWORK_PREFIX}/config"


class StatusSampler:
    """Every flannel unit's status, sampled in the background while hooks
    run (a blocked or error status in the middle of a settle counts too)."""

    def __init__(self, bench: FaultBench, interval: float = 0.2):
        self.bench, self.interval = bench, interval
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                for text in self.bench.statuses().values():
                    if text not in self.seen:
                        self.seen.append(text)
            except Exception:   # noqa: BLE001  (the state file mid-write: next sample)
                pass
            self._stop.wait(self.interval)

    def __enter__(self) -> "StatusSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@row("9 units configuring the network at once (4 machines)", workers=4)
def concurrent_first_configuration(bench: FaultBench) -> Outcome:
    """First deploy on four machines: the units' hooks run at once, each
    writing the network config. One config in etcd, written once, no unit
    blocked or in error at any moment (sampled while hooks run and observed
    after each settle), every unit active with a lease of its own."""
    name = "9 units configuring the network at once (4 machines)"
    cluster, problems = bench.cluster, []
    started = time.monotonic()
    with StatusSampler(bench) as sampler:
        cluster.deploy_flannel()
        bench.observe("after the deploy settled")
        deadline = time.monotonic() + 240
        while not all(s.startswith("active") for s in bench.statuses().values()):
            if time.monotonic() > deadline:
                problems.append(f"not every unit active after 240s: {bench.statuses()}")
                break
            time.sleep(1.0)
            update_status(bench)
            bench.observe("after update-status")
    recovery = time.monotonic() - started
    # chronological: what the sampler saw while hooks ran, then the observations
    bench.seen[:] = sampler.seen + [t for t in bench.seen if t not in sampler.seen]
    bad = [t for t in bench.seen if t.startswith(("blocked", "error"))]
    if bad:
        problems.append(f"a unit was blocked or in error while the network was configured: "
                        f"{bad}")
    if len(cluster.flannel_units()) != 4:
        problems.append(f"{len(cluster.flannel_units())} flannel units, not 4")
    configs = cluster.etcd_values(CONFIG_KEY)
    if list(configs) != [CONFIG_KEY]:
        problems.append(f"etcd holds {sorted(configs)} for the network config")
    value, version = cluster.etcd_entries(CONFIG_KEY).get(CONFIG_KEY, (None, 0))
    expected = {"Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan", "VNI": 1}}
    if value is None or json.loads(value) != expected:
        problems.append(f"the network config in etcd is {value}, not {expected}")
    elif version != 1:
        problems.append(f"the network config was written {version} times, not once")
    leases = lease_keys(bench)
    subnets = {cluster.subnet_env(m).get("FLANNEL_SUBNET") for m in cluster.worker_machines()}
    if len(leases) != 4 or len(subnets - {None}) != 4:
        problems.append(f"leases {sorted(leases)}, subnets {sorted(map(str, subnets))}: "
                        "not one each for four machines")
    problems += hook_tracebacks(bench, 0)
    bench.snapshot()
    return bench.outcome(name, recovery, problems)
