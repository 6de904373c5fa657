"""Fault rows of etcd (issue 11 items 1-3): etcd away during each kind of
hook, one member of three down, its data wiped, its PKI replaced.

Every row holds the charm to what an operator expects while etcd is away:
the unit's status names etcd (or still honestly says active, where no hook
needed etcd), no hook fails or takes long for it (hooks never wait for
etcd), the pods that ran before keep pinging and keep their node's subnet,
and once etcd is back the units go active with no manual step
(bench.recover()). Rows print the hook durations they measure.
"""
from __future__ import annotations

from sandbox.cluster import CNI_RELATION, ETCD_RELATION, FLANNEL
from sandbox.faults.core import FaultBench, Outcome, row
from sandbox.network import ping_from_netns

# A hook that took longer than this during a fault waited for etcd: the
# charm's own etcd timeout is 5 s per endpoint, and hooks must not wait.
SLOW_HOOK = 15.0


# --- helpers --------------------------------------------------------------------------

def etcd_app(bench: FaultBench):
    """The emulated etcd charm (sandbox.juju.apps.EtcdApp)."""
    return bench.ctl.emulated["etcd"]


def flannel_hooks(bench: FaultBench, since: int) -> list:
    """The flannel hooks run since hook_log index `since`."""
    return [run for run in bench.ctl.hook_log[since:]
            if run.unit.startswith(FLANNEL + "/") and not run.skipped]


def hook_problems(bench: FaultBench, since: int, during: str) -> list[str]:
    """Flannel hooks since `since` that failed, printed a traceback, or took long."""
    problems = []
    for run in flannel_hooks(bench, since):
        if not run.ok:
            problems.append(f"{run.unit} {run.hook} failed (exit {run.exit_code}) {during}: "
                            f"{run.stderr_tail[-300:]}")
        elif "Traceback" in (run.stderr_tail or ""):
            problems.append(f"{run.unit} {run.hook} printed a traceback {during}: "
                            f"{run.stderr_tail[-300:]}")
        if run.duration > SLOW_HOOK:
            problems.append(f"{run.unit} {run.hook} took {run.duration:.1f}s {during}")
    return problems


def durations(bench: FaultBench, since: int, hook: str | None = None) -> list[float]:
    return [run.duration for run in flannel_hooks(bench, since) if hook in (None, run.hook)]


def show_durations(bench: FaultBench, since: int, label: str) -> str:
    runs = flannel_hooks(bench, since)
    text = ", ".join(f"{r.unit} {r.hook} {r.duration:.2f}s" for r in runs) or "no hook"
    bench.say(f"   hooks {label}: {text}")
    return text


def status_names_etcd(bench: FaultBench, statuses: dict[str, str], during: str) -> list[str]:
    """Every flannel unit's status must say what is wrong: etcd."""
    return [f"{unit} said {text!r} {during}" for unit, text in statuses.items()
            if "etcd" not in text.lower()]


def subnets(bench: FaultBench) -> dict[str, str]:
    """machine -> FLANNEL_SUBNET of its subnet.env ('' if none)."""
    return {m: bench.cluster.subnet_env(m).get("FLANNEL_SUBNET", "")
            for m in bench.cluster.worker_machines()}


def pods_ping(bench: FaultBench, during: str) -> list[str]:
    """The pods made before the fault reach each other across machines."""
    problems = []
    pods = list(bench.pods.items())
    for machine, pod in pods:
        for other, peer in pods:
            if other != machine and ping_from_netns(pod.netns, peer.address, count=3) == 0:
                problems.append(f"pod {pod.name} on {machine} cannot reach {peer.address} "
                                f"on {other} {during}")
    return problems


def leases_kept(before: dict[str, str], bench: FaultBench, during: str) -> list[str]:
    now = subnets(bench)
    return [f"{m}: subnet {before[m]} became {now.get(m) or 'none'} {during}"
            for m in before if now.get(m) != before[m]]


def start_pods(bench: FaultBench) -> None:
    """A pod per machine, for rows whose fault came before flannel was up."""
    for m in bench.cluster.worker_machines():
        if m not in bench.pods:
            bench.pods[m] = bench.cluster.start_pod(m)


def update_status(bench: FaultBench) -> None:
    bench.ctl.update_status(FLANNEL)
    bench.cluster.settle()


# --- 1: etcd away ---------------------------------------------------------------------

@row("1a etcd down during install")
def etcd_down_during_install(bench: FaultBench) -> Outcome:
    """etcd stopped before flannel is deployed: install, the relation hooks
    and the first network config all run without etcd."""
    name = "1a etcd down during install"
    bench.snapshot(pods=False)
    bench.cluster.etcd.stop()
    mark = len(bench.ctl.hook_log)
    bench.deploy(settle_active=False)
    update_status(bench)
    seen = bench.observe("etcd stopped through install")
    show_durations(bench, mark, "with etcd down")
    problems = hook_problems(bench, mark, "while etcd was down")
    problems += status_names_etcd(bench, seen, "while etcd was down")
    bench.cluster.etcd.start()
    recovery = bench.recover()
    start_pods(bench)
    return bench.outcome(name, recovery, problems)


@row("1b etcd down at the first network config")
def etcd_down_first_network_config(bench: FaultBench) -> Outcome:
    """flannel installed and related to an etcd that has not published its
    credentials yet; etcd stops, then publishes them: the first
    configure_network runs without etcd."""
    name = "1b etcd down at the first network config"
    bench.snapshot(pods=False)
    etcd = etcd_app(bench)
    etcd.ready = False
    bench.ctl.deploy(FLANNEL, bench.cluster.charm_dir,
                     resources={bench.cluster.resource_name: bench.cluster.resource})
    bench.ctl.add_relation(*CNI_RELATION)
    bench.ctl.add_relation(*ETCD_RELATION)
    bench.cluster.settle()
    bench.observe("etcd related, no credentials yet")
    bench.cluster.etcd.stop()
    mark = len(bench.ctl.hook_log)
    etcd.update(ready=True)
    bench.cluster.settle()
    seen = bench.observe("credentials published, etcd stopped")
    show_durations(bench, mark, "with etcd down")
    problems = hook_problems(bench, mark, "while etcd was down")
    problems += status_names_etcd(bench, seen, "while etcd was down")
    bench.cluster.etcd.start()
    recovery = bench.recover()
    start_pods(bench)
    return bench.outcome(name, recovery, problems)


@row("1c etcd down during a config change")
def etcd_down_config_change(bench: FaultBench) -> Outcome:
    """Active with pods; etcd stops; the operator changes the vxlan port: the
    change waits for etcd, flanneld keeps its lease and the pods their
    traffic; once etcd is back the change lands by itself."""
    name = "1c etcd down during a config change"
    bench.deploy()
    before = subnets(bench)
    bench.cluster.etcd.stop()
    mark = len(bench.ctl.hook_log)
    bench.cluster.configure(port=8475)
    seen = bench.observe("etcd stopped, port changed")
    show_durations(bench, mark, "with etcd down")
    problems = hook_problems(bench, mark, "while etcd was down")
    problems += status_names_etcd(bench, seen, "while etcd was down")
    problems += pods_ping(bench, "while etcd was down")
    problems += leases_kept(before, bench, "while etcd was down")
    bench.cluster.etcd.start()
    recovery = bench.recover()
    ports = {m: {link: info.get("port") for link, info in bench.cluster.vxlan_links(m).items()}
             for m in bench.cluster.worker_machines()}
    bench.say(f"   vxlan devices after recovery: {ports}")
    problems += [f"{m}: vxlan devices {links} after recovery, not port 8475"
                 for m, links in ports.items() if list(links.values()) != [8475]]
    config = bench.cluster.network_config() or {}
    if (config.get("Backend") or {}).get("Port") != 8475:
        problems.append(f"etcd holds {config} after recovery, not port 8475")
    problems += leases_kept(before, bench, "after recovery")
    return bench.outcome(name, recovery, problems)


@row("1d etcd down during update-status")
def etcd_down_update_status(bench: FaultBench) -> Outcome:
    """Active with pods; etcd stops; update-status must say so (the node's
    network keeps working: flanneld holds its lease for 24 h)."""
    name = "1d etcd down during update-status"
    bench.deploy()
    before = subnets(bench)
    mark = len(bench.ctl.hook_log)
    update_status(bench)
    show_durations(bench, mark, "update-status with etcd up")
    bench.cluster.etcd.stop()
    mark = len(bench.ctl.hook_log)
    update_status(bench)
    seen = bench.observe("etcd stopped, update-status")
    show_durations(bench, mark, "update-status with etcd down")
    problems = hook_problems(bench, mark, "while etcd was down")
    problems += status_names_etcd(bench, seen, "while etcd was down")
    problems += pods_ping(bench, "while etcd was down")
    problems += leases_kept(before, bench, "while etcd was down")
    bench.cluster.etcd.start()
    recovery = bench.recover()
    problems += leases_kept(before, bench, "after recovery")
    return bench.outcome(name, recovery, problems)
