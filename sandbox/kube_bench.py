"""What a user of Kubernetes feels of flannel: the time from `kubectl create`
to Running for a pod on flannel's network, against the same nodes on a plain
bridge network with no overlay, and how long the workers are NotReady in a
`juju remove-relation` / `add-relation` cycle.

    python -m sandbox kube-bench --charm build/flannel [--resource T] [--pods 10]
                                 [--json F]

One sandbox cluster with Kubernetes itself (sandbox.kubernetes: a control
plane and two workers): flannel deployed, `--pods` busybox pods created one
after another (alternately on m1 and m2), each timed from `kubectl create`
to `kubectl wait` seeing it Running; then the workers' flannel removed, each
worker given a plain `bridge` + `host-local` network of its own (no overlay,
no flannel), and the same pods timed again; then flannel related again,
every node's Ready condition watched through the cycle. Prints the figures
(median, 90th percentile, their ratio; the aim is at most 1.1) and the
components' resident memory per machine; asserts nothing.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Callable

from sandbox.cli import charm_parser, resource_for
from sandbox.cluster import Cluster
from sandbox.kubernetes import ReadyWatch, busybox_pod

PLAIN_CONFLIST = "/etc/cni/net.d/05-plain-bridge.conflist"


def create_to_running(k8s, names_nodes: list[tuple[str, str]]) -> list[float]:
    """Seconds from `kubectl create` to Running, per pod, one after another."""
    took = []
    for name, node in names_nodes:
        started = time.monotonic()
        k8s.kubectl("create", "-f", "-", input=busybox_pod(name, node, grace_seconds=0))
        k8s.kubectl("wait", "--for=jsonpath={.status.phase}=Running", f"pod/{name}",
                    "--timeout=120s", timeout=130)
        took.append(time.monotonic() - started)
    for name, _ in names_nodes:
        k8s.kubectl("delete", "pod", name, "--wait=false")
    return took


def plain_bridge(index: int) -> str:
    """A node-local bridge network: what a node without an overlay has."""
    return json.dumps({
        "cniVersion": "0.3.1", "name": "plain-bridge",
        "plugins": [{"type": "bridge", "bridge": "plain0", "isGateway": True, "ipMasq": True,
                     "ipam": {"type": "host-local", "subnet": f"10.99.{index}.0/24"}},
                    {"type": "portmap", "capabilities": {"portMappings": True}}]})


def summary(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    return {"median": statistics.median(ordered),
            "p90": ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))],
            "max": ordered[-1], "n": len(ordered)}


def play(charm: Path, resource: Path, pods: int, say: Callable[[str], None] = print) -> dict:
    figures: dict = {}
    with Cluster(charm, resource, workers=2, worker_generation="ops", control_plane=True,
                 kubernetes=True, say=say) as cluster:
        k8s = cluster.kubernetes
        workers = cluster.worker_machines()
        cluster.deploy_flannel()
        cluster.wait_for_flannel(timeout=120)
        k8s.wait_nodes_ready(list(cluster.machines), timeout=120)
        k8s.wait_default_service_account()
        plan = [(f"flannel-{i}", workers[i % 2]) for i in range(pods)]
        create_to_running(k8s, [("warm-up", workers[0])])   # the first pull of the image
        figures["flannel"] = summary(create_to_running(k8s, plan))
        say(f"flannel: {figures['flannel']}")

        with ReadyWatch(k8s) as cycle:
            cluster.remove_cni_relation()
            cluster.add_cni_relation()
            cluster.wait_for_flannel(timeout=120)
            k8s.wait_nodes_ready(list(cluster.machines), timeout=120)
        figures["not_ready_seconds"] = {m: cycle.not_ready_seconds(m) for m in workers}
        say(f"Ready through remove-relation / add-relation:\n{cycle.timeline()}")

        cluster.remove_cni_relation()
        for index, m in enumerate(workers, start=1):
            cluster.machines[m].write_file(PLAIN_CONFLIST, plain_bridge(index))
        k8s.wait_nodes_ready(workers, timeout=120)
        plan = [(f"plain-{i}", workers[i % 2]) for i in range(pods)]
        create_to_running(k8s, [("warm-up-plain", workers[0])])
        figures["plain_bridge"] = summary(create_to_running(k8s, plan))
        say(f"plain bridge: {figures['plain_bridge']}")
        figures["memory_mib"] = {m: k8s.memory_mib(machine)
                                 for m, machine in cluster.machines.items()}
    return figures


def report(figures: dict) -> str:
    f, p = figures["flannel"], figures["plain_bridge"]
    lines = ["kubectl create -> Running (s)   median    p90    max   n",
             f"  flannel (vxlan)             {f['median']:6.2f} {f['p90']:6.2f} "
             f"{f['max']:6.2f} {f['n']:3d}",
             f"  plain bridge, no overlay    {p['median']:6.2f} {p['p90']:6.2f} "
             f"{p['max']:6.2f} {p['n']:3d}",
             f"  ratio (median)              {f['median'] / p['median']:6.2f}  (aim: <= 1.10)",
             "NotReady in a remove/add cycle: " + ", ".join(
                 f"{m} {s:.1f}s" for m, s in figures["not_ready_seconds"].items())]
    for m, memory in figures["memory_mib"].items():
        lines.append(f"{m}: " + ", ".join(f"{c} {mib:.0f} MiB" for c, mib in memory.items()))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = charm_parser("kube-bench", __doc__)
    parser.add_argument("--pods", type=int, default=10, help="pods timed per network")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    figures = play(Path(args.charm), resource_for(args), args.pods)
    print()
    print(report(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0
