"""The user's scenario, played end to end in the sandbox (the README's main job),
as the bug report's reporter saw it: through kubectl.

Deploy flannel as Charmed Kubernetes does, on a kubernetes-control-plane
machine and two kubernetes-worker machines (the ops principals), with
Kubernetes itself running on them (sandbox.kubernetes: kube-apiserver over
the sandbox's etcd, kubelet and kube-proxy on every machine); show every unit
active and every node Ready; `kubectl create -f busybox.yaml` and show it
Running; ping from it to a pod on the other worker across flannel's vxlan.
Then `juju remove-relation kubernetes-worker flannel` (LP #1866869): the
workers' CNI plugins are untouched, the control plane's flannel carries on,
and a pod created meanwhile waits in ContainerCreating (`kubectl describe`
says why). `juju add-relation` again: that pod runs by kubelet's own
retries, a new pod runs, and the pods from before still reach each other.
Ends with each node's Ready condition through the cycle, the phase table and
the components' resident memory per machine.

It plays the platform operators run by the end of 2026 (Juju 4.0 deploying the
packed charm, Ubuntu 24.04 machines, containerd 2); --juju, --base and
--containerd play the others. The negative control plays the charm it
replaces on the platform that charm ran on (Juju 3.6: Juju 4.0 deploys no
charm directory without manifest bases; Ubuntu 22.04; containerd 1.6).
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sandbox.cli import charm_parser, resource_for, run_with_cluster
from sandbox.old_flannel import MISSING_FLANNEL_EVENT, OLD_CHARM_CLUSTER, deploy_old_charm
from sandbox.cluster import CONTROL_PLANE_MACHINE, FLANNEL, Cluster
from sandbox.juju.versions import JUJU_RELEASES
from sandbox.kubernetes import BUSYBOX_YAML, ReadyWatch, busybox_pod, kubectl_binary
from sandbox.resource import kubernetes_paths
from sandbox.ubuntu import RELEASES, SERIES_OF_VERSION

CNI_CONF_FILE = "10-flannel.conflist"
# seconds a pod may take to reach another machine's pod (3 echoes per try)
PING_WITHIN = 20.0
# seconds kubelet may take to run a pod: it retries a failed pod sandbox with
# a back-off (10 s, doubling)
RUNNING_WITHIN = 120.0
BASES = tuple(f"ubuntu@{version}" for version, _, _ in RELEASES.values())
CONTAINERDS = ("1.6", "2")


@dataclass(frozen=True)
class Platform:
    """What the demo's cluster runs: its Juju, its machines' Ubuntu base and
    their containerd."""
    juju: str = "4.0"              # a key of JUJU_RELEASES
    base: str = "ubuntu@24.04"     # one of BASES
    containerd: str = "2"          # one of CONTAINERDS

    def cluster_options(self) -> dict:
        return {"juju": JUJU_RELEASES[self.juju],
                "series": SERIES_OF_VERSION[self.base.removeprefix("ubuntu@")],
                "containerd": self.containerd}

    def __str__(self) -> str:
        return (f"Juju {JUJU_RELEASES[self.juju]}, Ubuntu {self.base.removeprefix('ubuntu@')} "
                f"machines, containerd {self.containerd}")


# charm-flannel f79f180 is a charm directory without manifest bases, which
# Juju 4.0 refuses to deploy; the platform of 2022-2024 ran it
OLD_CHARM_PLATFORM = Platform(juju="3.6", base="ubuntu@22.04", containerd="1.6")


def play(charm_dir: Path, resource: Path, say: Callable[[str], None] = print,
         platform: Platform = Platform()) -> bool:
    """Returns True when every step behaved as a user expects. On Juju 4.0
    the packed charm beside `charm_dir` (scripts/build-charm's) is deployed."""
    ok = True

    def check(what: str, good: bool) -> None:
        nonlocal ok
        ok &= bool(good)
        say(f"   [{'ok' if good else 'FAILED'}] {what}")

    say("Kubernetes v1.37 (kube-apiserver, kubelet, ...): built from the Go module proxy "
        "on first use (minutes), then cached")
    kubernetes_paths(progress=lambda line: say(f"   {line}"))
    say(f"The platform: {platform}")
    with Cluster(charm_dir, resource, workers=2, worker_generation="ops", control_plane=True,
                 kubernetes=True, say=say, **platform.cluster_options()) as cluster:
        cp = CONTROL_PLANE_MACHINE
        workers = cluster.worker_machines()
        k8s = cluster.kubernetes

        def kubectl(*args: str, stdin: str | None = None) -> str:
            out = k8s.kubectl(*args, input=stdin, check=False)
            say(f"$ kubectl {' '.join(args)}\n{(out.stdout + out.stderr).rstrip()}")
            return out.stdout

        def runs(name: str) -> bool:
            try:
                k8s.wait_pod_running(name, timeout=RUNNING_WITHIN)
                return True
            except TimeoutError:
                return False

        def pings(source: str, target: str) -> bool:
            address = k8s.get("pod", target)["status"]["podIP"]
            return bool(k8s.wait_for(f"{source} pings {target}", lambda: k8s.kubectl(
                "exec", source, "--", "ping", "-c", "1", "-W", "1", address,
                check=False).returncode == 0, PING_WITHIN))

        plugins_before = {m: cluster.cni_bin(m) for m in cluster.machines}
        cluster.deploy_flannel()
        with cluster.timings.phase("flannel negotiates subnets, every node Ready", say):
            cluster.wait_for_flannel(timeout=120)
            k8s.wait_nodes_ready(list(cluster.machines), timeout=120)
            k8s.wait_default_service_account()
        say(cluster.status_table())
        for unit in cluster.principal_units() + cluster.flannel_units():
            status, message = cluster.workload(unit)
            check(f"{unit}: {status} {message}", status == "active")
        check(f"{cp}: /etc/cni/net.d/01-default.conflist -> {CNI_CONF_FILE}",
              cluster.default_conflist_link(cp) == CNI_CONF_FILE)
        network = cluster.network_config()["Network"]
        check(f"{cp}: kube-controller-manager runs with --cluster-cidr={network} (flannel's)",
              any(f"--cluster-cidr={network}" in " ".join(argv) for argv in
                  cluster.machines[cp].command_lines("kube-controller-manager")))
        kubectl("get", "nodes", "-o", "wide")

        with cluster.timings.phase("kubectl create -f busybox.yaml: Running", say):
            say(f"busybox.yaml:\n{BUSYBOX_YAML.rstrip()}")
            kubectl("create", "-f", "-", stdin=BUSYBOX_YAML)
            k8s.kubectl("create", "-f", "-", input=busybox_pod("busybox-m2", workers[1]))
            check("busybox Running", runs("busybox") and runs("busybox-m2"))
            kubectl("get", "po", "-o", "wide")
            check("busybox pings busybox-m2 across flannel's vxlan (kubectl exec)",
                  pings("busybox", "busybox-m2"))

        with ReadyWatch(k8s) as ready:
            cp_flannel = cluster.unit_on(cp)
            cp_flanneld = cluster.flanneld_pids(cp)
            with cluster.timings.phase("juju remove-relation kubernetes-worker flannel", say):
                cluster.remove_cni_relation()
                check(f"only {cp_flannel} is left", cluster.flannel_units() == [cp_flannel])
                for m in workers:
                    machine = cluster.machines[m]
                    check(f"{m}: no flanneld running", not machine.pids_of("flanneld"))
                    kept = cluster.cni_bin(m)
                    names = cluster.principal_plugins(m)
                    check(f"{m}: the worker's {len(names)} plugins ({', '.join(names[:4])}, "
                          "...) untouched in /opt/cni/bin",
                          all(kept.get(p) == plugins_before[m][p] for p in names))
                check(f"{cp}: flanneld carried on", cluster.flanneld_pids(cp) == cp_flanneld)
            say(cluster.status_table())
            with cluster.timings.phase("a pod created while flannel is away", say):
                kubectl("create", "-f", "-", stdin=busybox_pod("made-while-away", workers[0]))
                # kubelet's word on its pod sandbox: an earlier event (a volume's
                # configmap not synced yet) comes while the pod is still Pending
                try:
                    k8s.wait_for("kubelet's sandbox event for made-while-away", lambda: k8s.kubectl(
                        "get", "events", "--field-selector", "involvedObject.name=made-while-away,"
                        "reason=FailedCreatePodSandBox", "-o", "name").stdout.strip(), 60)
                except TimeoutError as error:
                    say(f"   {error}")
                waiting = kubectl("get", "po", "made-while-away")
                check("made-while-away waits in ContainerCreating", "ContainerCreating" in waiting)
                uid = k8s.get("pod", "made-while-away")["metadata"]["uid"]
                described = kubectl("describe", "po", "made-while-away")
                check("kubectl describe says why (its events)", "Events:" in described)

            with cluster.timings.phase("juju add-relation kubernetes-worker flannel", say):
                cluster.add_cni_relation()
                cluster.wait_for_flannel(timeout=120)
            for unit in cluster.principal_units() + cluster.flannel_units():
                status, message = cluster.workload(unit)
                check(f"{unit}: {status} {message}", status == "active")
            for m in cluster.machines:
                names = cluster.principal_plugins(m)
                check(f"{m}: {len(names)} principal plugins and flannel's in /opt/cni/bin",
                      set(names) | {FLANNEL} <= set(cluster.cni_bin(m)))
            with cluster.timings.phase("made-while-away Running by kubelet's retries", say):
                check("made-while-away Running, the same pod (kubelet retried it)",
                      runs("made-while-away")
                      and k8s.get("pod", "made-while-away")["metadata"]["uid"] == uid)
            with cluster.timings.phase("new pods after the re-add", say):
                kubectl("create", "-f", "-", stdin=busybox_pod("busybox-new", workers[1]))
                check("a new pod Running", runs("busybox-new"))
                kubectl("get", "po", "-o", "wide")
                check("made-while-away pings busybox-new",
                      pings("made-while-away", "busybox-new"))
                check("busybox (from before the cycle) pings busybox-m2",
                      pings("busybox", "busybox-m2"))
            k8s.wait_nodes_ready(list(cluster.machines), timeout=60)
        say("Ready through remove-relation and add-relation:\n" + ready.timeline())
        for m in cluster.machines:
            say(f"   {m}: NotReady for {ready.not_ready_seconds(m):.1f}s")
        say(cluster.status_table())
        say("")
        say(cluster.timings.table())
        for m, machine in cluster.machines.items():
            memory = k8s.memory_mib(machine)
            say(f"{m}: " + ", ".join(f"{name} {mib:.0f} MiB" for name, mib in memory.items()))
        say(f"kubectl: {kubectl_binary()}")
    return ok


def negative_control(charm_dir: Path, resource: Path, workdir: Path,
                     say: Callable[[str], None] = print) -> str | None:
    """The bug report itself: charm-flannel at f79f180 (sandbox.old_flannel,
    its stop hook included) on the reactive kubernetes-worker of 2020, on
    Kubernetes; busybox.yaml Running, `juju remove-relation` and
    `add-relation`, then a new pod. Returns the event kubelet gives the new
    pod that matches the report's words, None if none does. It runs on the
    platform that charm ran on (OLD_CHARM_PLATFORM)."""
    with Cluster(charm_dir, resource, workers=1, **OLD_CHARM_CLUSTER,
                 **OLD_CHARM_PLATFORM.cluster_options(),
                 say=lambda text: say(f"[negative control] {text}")) as cluster:
        k8s = cluster.kubernetes
        deploy_old_charm(cluster, workdir, say)
        k8s.kubectl("create", "-f", "-", input=BUSYBOX_YAML)
        k8s.wait_pod_running("busybox", timeout=RUNNING_WITHIN)
        say(f"$ kubectl get po\n{k8s.kubectl('get', 'po').stdout.rstrip()}")
        with cluster.timings.phase("juju remove-relation, add-relation (the old charm)", say):
            cluster.remove_cni_relation()
            cluster.add_cni_relation()
            cluster.wait_for_flannel(timeout=120)
        say(cluster.status_table())
        k8s.kubectl("create", "-f", "-", input=busybox_pod("busybox-2", "m1"))

        def the_event() -> str | None:
            out = k8s.kubectl("get", "events", "--field-selector",
                              "involvedObject.name=busybox-2", "-o", "json").stdout
            for event in json.loads(out)["items"]:
                if MISSING_FLANNEL_EVENT.search(event.get("message", "")):
                    return event["message"]
            return None

        try:
            event = k8s.wait_for("the bug report's event", the_event, timeout=60)
        except TimeoutError:
            event = None
        say(f"$ kubectl get po\n{k8s.kubectl('get', 'po').stdout.rstrip()}")
        described = k8s.kubectl("describe", "po", "busybox-2").stdout
        say("$ kubectl describe po busybox-2\n..." + described[described.find("Events:"):]
            .rstrip())
        return event


def main(argv: list[str]) -> int:
    parser = charm_parser("demo", __doc__)
    default = Platform()
    parser.add_argument("--juju", choices=sorted(JUJU_RELEASES), default=default.juju,
                        help=f"the Juju to play (default: {default.juju})")
    parser.add_argument("--base", choices=BASES, default=default.base,
                        help=f"the machines' Ubuntu (default: {default.base})")
    parser.add_argument("--containerd", choices=CONTAINERDS, default=default.containerd,
                        help=f"the machines' containerd (default: {default.containerd})")
    args = parser.parse_args(argv)
    platform = Platform(args.juju, args.base, args.containerd)
    resource = resource_for(args)

    def demo() -> int:
        ok = play(args.charm, resource, platform=platform)
        print("\nThe negative control: the same scenario with the charm this one replaces, "
              f"on the platform it ran on ({OLD_CHARM_PLATFORM}; Juju 4.0 refuses its "
              "charm directory, which has no manifest bases)")
        with tempfile.TemporaryDirectory(prefix="flannel-negative-control.") as work:
            event = negative_control(args.charm, resource, Path(work))
        print(f"   [{'ok' if event else 'FAILED'}] kubelet's event for the new pod is the bug "
              f"report's: {event}")
        ok &= event is not None
        print("demo passed" if ok else "demo FAILED")
        return 0 if ok else 1

    return run_with_cluster("demo", demo)
