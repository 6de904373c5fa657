"""The user's scenario, played end to end in the sandbox (the README's main job).

Deploy flannel on two kubernetes-worker machines, start a CRI pod on each
(containerd's CRI plugin, as kubelet makes them: sandbox.cri) and ping one
from the other across flannel's vxlan; then remove and re-add the
flannel/kubernetes-worker relation (LP #1866869) and show that new pods run,
that the pods made before still reach each other, and that the worker's CNI
plugins are still in /opt/cni/bin. Ends with the phase table and what the
runtime costs (containerd's memory per machine, time to the first sandbox).
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Callable

from sandbox.cluster import WORKER_PLUGINS, Cluster, ClusterError
from sandbox.cri import runtime_for


def _interrupt_on_sigterm() -> None:
    # Ctrl-C raises KeyboardInterrupt; make a kill do the same, so the
    # cluster's teardown runs either way.
    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, raise_interrupt)


def play(charm_dir: Path, resource: Path, say: Callable[[str], None] = print) -> bool:
    """Returns True when every step behaved as a user expects."""
    _interrupt_on_sigterm()
    ok = True

    def check(what: str, good: bool) -> None:
        nonlocal ok
        ok &= good
        say(f"   [{'ok' if good else 'FAILED'}] {what}")

    with Cluster(charm_dir, resource, workers=2, say=say) as cluster:
        worker_files = {m: cluster.cni_bin(m) for m in cluster.machines}
        cluster.deploy_flannel()
        with cluster.timings.phase("flannel negotiates subnets", say):
            cluster.wait_for_flannel(timeout=90)
        say(cluster.status_table())

        def pod_on_each_machine_pings_the_other(phase: str) -> tuple:
            with cluster.timings.phase(phase, say):
                first, second = (cluster.start_pod(m, runtime="cri") for m in ("m1", "m2"))
                check(f"pod {first.name} on m1 got {first.address}", bool(first.address))
                check(f"pod {second.name} on m2 got {second.address}", bool(second.address))
                check(f"{first.address} pings {second.address} over vxlan (crictl exec)",
                      first.ping(second.address))
            for m in cluster.machines:
                runtime = runtime_for(cluster.machines[m])
                say(f"{m}$ crictl pods\n{runtime.crictl('pods').stdout.rstrip()}")
                say(f"{m}$ crictl ps\n{runtime.crictl('ps').stdout.rstrip()}")
            return first, second

        with cluster.timings.phase("first pod sandbox (containerd starts on m1)", say):
            probe = cluster.start_pod("m1", runtime="cri")
            probe.delete()
            cluster.pods.remove(probe)
        first_sandbox = cluster.timings.phases[-1].seconds
        before = pod_on_each_machine_pings_the_other(
            "a CRI pod on each machine, ping across the overlay")

        with cluster.timings.phase("juju remove-relation flannel:cni kubernetes-worker:cni", say):
            cluster.remove_cni_relation()
            check("no flannel units left", not cluster.flannel_units())
            for m in cluster.machines:
                check(f"{m}: no flanneld running", not cluster.machines[m].pids_of("flanneld"))
                kept = cluster.cni_bin(m)
                check(f"{m}: worker's {', '.join(WORKER_PLUGINS)} untouched in /opt/cni/bin",
                      all(kept.get(p) == worker_files[m][p] for p in WORKER_PLUGINS))
        say(cluster.status_table())

        with cluster.timings.phase("juju add-relation flannel:cni kubernetes-worker:cni", say):
            cluster.add_cni_relation()
            cluster.wait_for_flannel(timeout=90)
        say(cluster.status_table())

        pod_on_each_machine_pings_the_other("new pods after the re-add")
        check(f"pods from before the cycle: {before[0].address} pings {before[1].address}",
              before[0].ping(before[1].address))
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
    import argparse

    from sandbox.resource import build_resource, host_arch

    parser = argparse.ArgumentParser(prog="python -m sandbox demo", description=__doc__)
    parser.add_argument("--charm", type=Path, required=True, help="the built charm directory")
    parser.add_argument("--resource", type=Path,
                        help="flannel-<arch>.tar.gz (default: build it with go install)")
    args = parser.parse_args(argv)
    resource = args.resource or build_resource(host_arch(), Path(args.charm).parent,
                                               progress=print)
    try:
        ok = play(args.charm, resource)
    except ClusterError as error:
        print(f"demo failed: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; the sandbox was torn down", file=sys.stderr)
        return 130
    print("demo passed" if ok else "demo FAILED")
    return 0 if ok else 1
