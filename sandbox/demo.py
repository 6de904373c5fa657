"""The user's scenario, played end to end in the sandbox (the README's main job).

Deploy flannel as Charmed Kubernetes does, on a kubernetes-control-plane
machine and two kubernetes-worker machines (the ops principals by default,
`--worker-generation reactive` for the worker of the bug report); show every
principal and flannel unit active; start a CRI pod on each machine
(containerd's CRI plugin, as kubelet makes them: sandbox.cri) and ping across
flannel's vxlan; then remove and re-add the flannel/kubernetes-worker relation
(LP #1866869) and show that the workers' CNI plugins are untouched, the
control plane's flannel carried on, new pods get addresses and ping, and the
pods made before still reach each other. Ends with the phase table and what
the runtime costs (containerd's memory per machine, time to the first sandbox).
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Callable

from sandbox.cli import charm_parser, resource_for
from sandbox.cluster import (CONTROL_PLANE_MACHINE, FLANNEL, WORKER_GENERATIONS, Cluster,
                             ClusterError)
from sandbox.cri import runtime_for
from sandbox.waiting import wait_for

CNI_CONF_FILE = "10-flannel.conflist"
# seconds a pod may take to reach another machine's pod (3 echoes per try)
PING_WITHIN = 20.0


def _interrupt_on_sigterm() -> None:
    # Ctrl-C raises KeyboardInterrupt; make a kill do the same, so the
    # cluster's teardown runs either way.
    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, raise_interrupt)


def reaches(pod, address: str, within: float = PING_WITHIN) -> bool:
    """Whether `pod` gets an echo from `address` within `within` seconds: a
    node's flanneld adds the route to a new or re-leased subnet when etcd's
    watch tells it, which a busy host may deliver after the unit went active."""
    return bool(wait_for(lambda: pod.ping(address), within, interval=0.5))


def play(charm_dir: Path, resource: Path, say: Callable[[str], None] = print, *,
         worker_generation: str = "ops") -> bool:
    """Returns True when every step behaved as a user expects."""
    ok = True

    def check(what: str, good: bool) -> None:
        nonlocal ok
        ok &= good
        say(f"   [{'ok' if good else 'FAILED'}] {what}")

    with Cluster(charm_dir, resource, workers=2, worker_generation=worker_generation,
                 control_plane=True, say=say) as cluster:
        cp = CONTROL_PLANE_MACHINE
        workers = cluster.worker_machines()
        plugins_before = {m: cluster.cni_bin(m) for m in cluster.machines}
        cluster.deploy_flannel()
        with cluster.timings.phase("flannel negotiates subnets", say):
            cluster.wait_for_flannel(timeout=120)
        say(cluster.status_table())

        def everything_active() -> None:
            for unit in cluster.principal_units() + cluster.flannel_units():
                status, message = cluster.workload(unit)
                check(f"{unit}: {status} {message}", status == "active")

        everything_active()
        check(f"{cp}: /etc/cni/net.d/01-default.conflist -> {CNI_CONF_FILE}",
              cluster.default_conflist_link(cp) == CNI_CONF_FILE)
        network = cluster.network_config()["Network"]
        check(f"{cp}: the control plane's cluster cidr is flannel's {network}",
              cluster.control_plane_app.cluster_cidr(cluster.machines[cp]) == network)

        def pods_ping_across(phase: str) -> dict:
            with cluster.timings.phase(phase, say):
                pods = {m: cluster.start_pod(m, runtime="cri") for m in cluster.machines}
                for m, pod in pods.items():
                    check(f"pod {pod.name} on {m} got {pod.address}", bool(pod.address))
                for a, b in ((workers[0], workers[1]), (workers[1], cp), (cp, workers[0])):
                    check(f"{pods[a].address} ({a}) pings {pods[b].address} ({b}) over vxlan "
                          "(crictl exec)", reaches(pods[a], pods[b].address))
            for m in cluster.machines:
                runtime = runtime_for(cluster.machines[m])
                say(f"{m}$ crictl pods\n{runtime.crictl('pods').stdout.rstrip()}")
                say(f"{m}$ crictl ps\n{runtime.crictl('ps').stdout.rstrip()}")
            return pods

        with cluster.timings.phase(f"first pod sandbox (containerd starts on {cp})", say):
            probe = cluster.start_pod(cp, runtime="cri")
            probe.delete()
            cluster.pods.remove(probe)
        first_sandbox = cluster.timings.phases[-1].seconds
        before = pods_ping_across("a CRI pod on each machine, ping across the overlay")

        cp_flannel = cluster.unit_on(cp)
        cp_flanneld = cluster.flanneld_pids(cp)
        with cluster.timings.phase("juju remove-relation flannel:cni kubernetes-worker:cni", say):
            cluster.remove_cni_relation()
            check(f"only {cp_flannel} is left", cluster.flannel_units() == [cp_flannel])
            for m in workers:
                machine = cluster.machines[m]
                check(f"{m}: no flanneld running", not machine.pids_of("flanneld"))
                check(f"{m}: /opt/cni/bin/flannel as before flannel came (gone, or the "
                      "worker's own put back)",
                      machine.read_file("/opt/cni/bin/flannel")
                      == plugins_before[m].get("flannel"))
                kept = cluster.cni_bin(m)
                names = cluster.principal_plugins(m)
                check(f"{m}: the worker's {len(names)} plugins ({', '.join(names[:4])}, ...) "
                      "untouched in /opt/cni/bin",
                      all(kept.get(p) == plugins_before[m][p] for p in names))
            check(f"{cp}: flanneld carried on", cluster.flanneld_pids(cp) == cp_flanneld)
        say(cluster.status_table())

        with cluster.timings.phase("juju add-relation flannel:cni kubernetes-worker:cni", say):
            cluster.add_cni_relation()
            cluster.wait_for_flannel(timeout=120)
        everything_active()
        for m in cluster.machines:
            names = cluster.principal_plugins(m)
            check(f"{m}: {len(names)} principal plugins and flannel's in /opt/cni/bin",
                  set(names) | {FLANNEL} <= set(cluster.cni_bin(m)))
        pods_ping_across("new pods after the re-add")
        a, b = workers
        check(f"pods from before the cycle: {before[a].address} ({a}) pings "
              f"{before[b].address} ({b})", reaches(before[a], before[b].address))
        say(cluster.status_table())
        say("")
        say(cluster.timings.table())
        say(f"time to the first pod sandbox (containerd started): {first_sandbox:.1f}s")
        for m, machine in cluster.machines.items():
            memory = runtime_for(machine).memory_kib()
            say(f"{m}: containerd {memory['containerd'] / 1024:.1f} MiB resident, "
                f"its shims {memory['shims'] / 1024:.1f} MiB")
    return ok


def main(argv: list[str]) -> int:
    parser = charm_parser("demo", __doc__)
    parser.add_argument("--worker-generation", choices=WORKER_GENERATIONS, default="ops",
                        help="the ops kubernetes-worker (default) or the reactive one "
                             "of the bug report")
    args = parser.parse_args(argv)
    resource = resource_for(args)
    _interrupt_on_sigterm()
    try:
        ok = play(args.charm, resource, worker_generation=args.worker_generation)
    except ClusterError as error:
        print(f"demo failed: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; the sandbox was torn down", file=sys.stderr)
        return 130
    print("demo passed" if ok else "demo FAILED")
    return 0 if ok else 1
