"""Kubernetes' own e2e network tests judging the charm: the `[sig-network]`
`[Conformance]` specs of k8s.io/kubernetes at the release the sandbox runs
(sandbox/e2e-module, unchanged), on a sandbox cluster with flannel in one of
the modes it serves.

    python -m sandbox conformance --charm DIR [--resource TARBALL]
        --mode etcd|dual-stack|kubernetes|ipv6-only [--focus REGEX]
        [--junit DIR] [--after-remove-add [--old-charm]]

The cluster is the demo's, as Charmed Kubernetes deploys it: a control plane
and two workers on containerd 2, flannel related to etcd and to both
principals' `cni`, CoreDNS behind kubelet's clusterDNS (the control plane
charm's), the e2e images in every machine's containerd (sandbox.e2e_images).
The suite runs on the control-plane machine (the host has no route to the
test network) with the admin's kubeconfig, under ginkgo's CLI in PROCESSES
parallel processes as upstream CI runs it; its output goes to e2e.log and
its reports to junit.xml and report.json in --junit DIR (by default a new
directory /tmp/flannel-conformance-<mode>.*, kept), and a table of every
spec's outcome, each skip with its reason, is printed at the end.

Modes (the flannel and control plane options each deploys with):

- etcd: flannel's default, IPv4 (`cidr` 10.1.0.0/16);
- dual-stack: etcd with `ipv6-cidr`, the control plane's service-cidr of
  both families; the `[Feature:IPv6DualStack]` specs run too;
- kubernetes: `subnet-manager=kubernetes`, the controller-manager
  allocating Node pod CIDRs from flannel's `cidr` (IPv4);
- ipv6-only: the Kubernetes subnet manager on an IPv6-only cluster.

--after-remove-add runs the same selection after the bug report's
`juju remove-relation kubernetes-worker flannel` and `add-relation`; with
--old-charm, on the charm this one replaces (charm-flannel f79f180, the
reactive worker of 2020 on containerd 1.6, etcd's v2 API; the control
plane's node has no CNI, as that charm was deployed): the negative control,
whose specs that place pods on a worker fail. It runs the everyday five
(FAST_FOCUS) unless --focus says otherwise: each failing spec waits the
framework's 5 minutes for its pods.

API::

    report = run(charm_dir, resource, "etcd", focus=None, junit_dir=None,
                 after_remove_add=False, old_charm=False, say=print)
    report.specs -> [Spec(name, state, seconds, message)]; report.table()
    read_report(path) -> [Spec]          # ginkgo's JSON report
    report.summary (ginkgo's last lines); report.passed (bool)
    MODES, CONFORMANCE_FOCUS, FAST_FOCUS
    skipped_here() -> {skip regex: why this host cannot run those specs}
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from sandbox.cli import charm_parser, resource_for, run_with_cluster
from sandbox.cluster import CONTROL_PLANE_MACHINE, IPV6_CIDR, Cluster, ClusterError
from sandbox.e2e_images import IMAGES
from sandbox.kubernetes import CONF, IPV6_SERVICE_CIDR, SERVICE_CIDR, kubectl_binary
from sandbox.old_flannel import MISSING_FLANNEL_EVENT, OLD_CHARM_CLUSTER, deploy_old_charm
from sandbox.resource import binary_path, e2e_paths, host_arch, kubernetes_paths

CONFORMANCE_FOCUS = r"\[sig-network\].*\[Conformance\]"
# the everyday suite's few (tests/functional/test_kubernetes_sees_the_overlay.py):
# pod to pod and node to pod, HTTP and UDP, across the nodes; a Service. Their
# pods run agnhost alone (FAST_IMAGES, with CoreDNS's), in one round of
# FAST_PROCESSES processes.
FAST_FOCUS = (r"\[sig-network\] (Networking Granular Checks: Pods should function for "
              r"(intra-pod|node-pod) communication: (http|udp) .*\[Conformance\]"
              r"|Services should serve a basic endpoint from pods \[Conformance\])")
FAST_IMAGES = ("agnhost", "coredns")
FAST_PROCESSES = 5
DUAL_STACK_FOCUS = r"\[sig-network\].*\[Feature:IPv6DualStack\]"
# how long the whole selection may take (ginkgo's own limit; minutes per spec)
SUITE_TIMEOUT = "2h"
# ginkgo's parallel processes: the specs mostly wait (pods starting, probes'
# initial delays), so more processes than cores
PROCESSES = 4
JUNIT, REPORT = "junit.xml", "report.json"
WILL_RUN = re.compile(r"^Will run (\d+) of")
# ginkgo -v's line as a spec ends: "• [12.3 seconds]", "• [FAILED] [124.2
# seconds]", "S [SKIPPED] [0.0 seconds]"
SPEC_END = re.compile(r"^(?:• (\[[A-Z]+\] )?\[([\d.]+) seconds\]"
                      r"|S \[SKIPPED\](?: \[([\d.]+) seconds\])?)")


def skipped_here() -> dict[str, str]:
    """Specs this host cannot run, as a ginkgo skip expression -> why (the
    README's Conformance section lists them). The machines share the host's
    kernel, and the [Feature:SCTPConnectivity] specs open SCTP sockets: a
    kernel with SCTP neither built in, loaded nor loadable (some VMs) fails
    them. Looked up without opening a socket, which would load the module."""
    release = os.uname().release
    protocols = Path("/proc/net/protocols")
    if (Path("/sys/module/sctp").exists()
            or (protocols.is_file() and "SCTP" in protocols.read_text())
            or any(Path(f"/lib/modules/{release}").rglob("sctp.ko*"))):
        return {}
    return {r"\[Feature:SCTPConnectivity\]":
            f"this host's kernel ({release}) has no SCTP: not built in, loaded or loadable"}


@dataclass(frozen=True)
class Mode:
    flannel: dict
    control_plane: dict
    focus: tuple = (CONFORMANCE_FOCUS,)


ALLOCATE_V4 = "allocate-node-cidrs=true node-cidr-mask-size-ipv4=24"
MODES = {
    "etcd": Mode({}, {}),
    "dual-stack": Mode({"ipv6-cidr": IPV6_CIDR},
                       {"service-cidr": f"{SERVICE_CIDR},{IPV6_SERVICE_CIDR}"},
                       (CONFORMANCE_FOCUS, DUAL_STACK_FOCUS)),
    "kubernetes": Mode({"subnet-manager": "kubernetes"},
                       {"controller-manager-extra-args": ALLOCATE_V4}),
    "ipv6-only": Mode({"subnet-manager": "kubernetes", "cidr": "", "ipv6-cidr": IPV6_CIDR},
                      {"service-cidr": IPV6_SERVICE_CIDR,
                       "controller-manager-extra-args":
                           "allocate-node-cidrs=true node-cidr-mask-size-ipv6=64"}),
}


@dataclass
class Spec:
    name: str
    state: str          # passed | failed | skipped
    seconds: float
    message: str = ""
    kind: str = "spec"  # or "suite": the suite's own set-up or tear-down


@dataclass
class Report:
    mode: str
    specs: list = field(default_factory=list)
    summary: str = ""
    seconds: float = 0.0
    exit_code: int = 0
    selected: int = 0          # ginkgo's "Will run N of M specs"
    junit: Path | None = None
    host_skips: dict = field(default_factory=dict)   # skipped_here() of the run
    # kubelet's events in the log (the framework dumps a failed spec's
    # namespace) that are the bug report's: failed to find plugin "flannel"
    bug_events: int = 0

    def count(self, state: str) -> int:
        """Specs (not the suite's own nodes) in `state`."""
        return sum(1 for s in self.specs if s.state == state and s.kind == "spec")

    @property
    def passed(self) -> bool:
        """Every selected spec ran and passed, and the suite's own nodes:
        a spec that skipped itself (its own preconditions) is not a pass."""
        return (self.exit_code == 0 and self.count("passed") == self.selected > 0
                and len(self.specs) == self.selected)

    def table(self) -> str:
        width = max((len(s.name) for s in self.specs), default=10)
        rows = [f"{'spec':<{width}}  {'result':<7}  seconds"]
        for spec in sorted(self.specs, key=lambda s: (s.state != "failed", s.name)):
            rows.append(f"{spec.name:<{width}}  {spec.state:<7}  {spec.seconds:7.1f}")
            if spec.state != "passed" and spec.message:
                rows.append(f"    {spec.message.strip().splitlines()[0][:160]}")
        for expression, reason in self.host_skips.items():
            rows.append(f"not run here: specs matching {expression}: {reason}")
        if self.bug_events:
            rows.append(f"kubelet, {self.bug_events} times in the failed specs' namespaces: "
                        'failed to find plugin "flannel" in path [/opt/cni/bin] (LP #1866869)')
        unrun = self.selected - sum(1 for s in self.specs if s.kind == "spec")
        rows.append(f"{self.mode}: {self.count('passed')} passed, {self.count('failed')} "
                    f"failed, {self.count('skipped')} skipped"
                    + (f", {unrun} not run" if unrun > 0 else "")
                    + f" of {self.selected} in {self.seconds:.0f} s")
        return "\n".join(rows)


def spec_texts(path: Path) -> list[str]:
    """The full text of every spec ginkgo's JSON report lists, run or not."""
    return [" ".join([*(spec.get("ContainerHierarchyTexts") or []), spec.get("LeafNodeText") or ""])
            for suite in json.loads(path.read_text())
            for spec in suite.get("SpecReports") or [] if spec.get("LeafNodeType") == "It"]


def read_report(path: Path) -> list[Spec]:
    """Every spec of ginkgo's JSON report that ran or skipped itself (the
    specs outside the focus are "skipped" with no failure, a pending one is
    never run: left out), and each failure of the suite's own set-up or
    tear-down once (every process reports those nodes; one failing on the
    first makes the others fail as well), as a spec of kind "suite"."""
    specs, suite_failures = [], set()
    for suite in json.loads(path.read_text()):
        for spec in suite.get("SpecReports") or []:
            state = spec.get("State", "")
            failure = (spec.get("Failure") or {}).get("Message", "")
            if state == "pending" or (state == "skipped" and not failure):
                continue
            if spec.get("LeafNodeType") != "It":
                if state not in ("passed", "skipped"):
                    suite_failures.add((f"[{spec.get('LeafNodeType')}]", failure))
                continue
            name = " ".join([*(spec.get("ContainerHierarchyTexts") or []),
                             spec.get("LeafNodeText") or ""])
            specs.append(Spec(name.strip(), state if state in ("passed", "skipped") else "failed",
                              (spec.get("RunTime") or 0) / 1e9, failure))
    specs += [Spec(name, "failed", 0.0, failure, kind="suite")
              for name, failure in sorted(suite_failures)]
    return specs


def prepare(cluster: Cluster, mode: str, say: Callable[[str], None]) -> None:
    """Flannel in `mode`, every node Ready, then the cluster DNS."""
    k8s = cluster.kubernetes
    cluster.deploy_flannel(config=MODES[mode].flannel or None)
    with cluster.timings.phase("flannel active, every node Ready", say):
        cluster.wait_for_flannel(timeout=180)
        k8s.wait_nodes_ready(list(cluster.machines), timeout=180)
        k8s.wait_default_service_account()
    say(cluster.status_table())
    if not prepare_dns(cluster, say):
        raise ClusterError("a pod cannot resolve kubernetes.default through CoreDNS")


def prepare_dns(cluster: Cluster, say: Callable[[str], None]) -> bool:
    """CoreDNS deployed as the control plane charm does, every node
    schedulable, shown as an operator would look (`kubectl get pods -A`, a
    pod resolving kubernetes.default). True if that pod resolved it."""
    k8s = cluster.kubernetes
    with cluster.timings.phase("CoreDNS Ready, every node schedulable", say):
        k8s.deploy_cluster_dns()
        wait_schedulable(k8s)
    say(f"$ kubectl get pods -A -o wide\n{k8s.kubectl('get', 'pods', '-A', '-o', 'wide').stdout}")
    k8s.kubectl("run", "dns-check", f"--image={IMAGES['agnhost']}", "--restart=Never",
                "--overrides={\"spec\": {\"nodeName\": \"m1\"}}", "--", "pause")
    k8s.wait_pod_running("dns-check")
    lookup = k8s.kubectl("exec", "dns-check", "--", "nslookup", "kubernetes.default",
                         check=False)
    say(f"$ kubectl exec dns-check -- nslookup kubernetes.default\n"
        f"{(lookup.stdout + lookup.stderr).rstrip()}")
    k8s.kubectl("delete", "pod", "dns-check", "--wait=false")
    return lookup.returncode == 0 and "kubernetes.default.svc.cluster.local" in lookup.stdout


def _ready(node: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in node["status"].get("conditions", []))


def schedulable_nodes(k8s) -> list[str]:
    """The Ready nodes a pod without tolerations may run on."""
    return [node["metadata"]["name"] for node in k8s.get("nodes")["items"] if _ready(node)
            and not any(t.get("effect") in ("NoSchedule", "NoExecute")
                        for t in node["spec"].get("taints") or [])]


def wait_schedulable(k8s, timeout: float = 60) -> None:
    """No Ready node tainted not-ready any more (the e2e suite waits for
    that in 30-second steps before its first spec)."""
    def untainted() -> bool:
        return not any(t.get("key", "").startswith("node.kubernetes.io/")
                       for node in k8s.get("nodes")["items"] if _ready(node)
                       for t in node["spec"].get("taints") or [])
    k8s.wait_for("every node schedulable", untainted, timeout)


def remove_and_add(cluster: Cluster, say: Callable[[str], None]) -> None:
    """The bug report's cycle on the workers."""
    with cluster.timings.phase("juju remove-relation kubernetes-worker flannel; add-relation",
                               say):
        cluster.remove_cni_relation()
        cluster.add_cni_relation()
        cluster.wait_for_flannel(timeout=180)
        cluster.kubernetes.wait_nodes_ready(cluster.worker_machines(), timeout=180)
        wait_schedulable(cluster.kubernetes)
    say(cluster.status_table())


def _follow(proc: subprocess.Popen, log, say: Callable[[str], None]) -> list[str]:
    """ginkgo's output into `log`, a line per finished spec to `say`;
    returns its summary lines ("Will run ...", "Ran ...", "SUCCESS! ...")."""
    summary, finished, ended = [], 0, None
    for line in proc.stdout:
        log.write(line)
        log.flush()
        text = line.rstrip("\n")
        if ended and text.startswith("["):
            # ginkgo -p prints a spec's text on the line after its end
            finished += 1
            outcome = ("skipped" if ended.group(0).startswith("S")
                       else (ended.group(1) or "[passed]").strip()[1:-1].lower())
            seconds = float(ended.group(2) or ended.group(3) or 0)
            say(f"   {finished:3d} {outcome:<8} {seconds:6.1f} s  {text[:140]}")
            ended = None
        elif SPEC_END.match(text):
            ended = SPEC_END.match(text)
        if re.match(r"^(Ran \d+ of|SUCCESS!|FAIL!|Will run|Running in parallel)", text):
            summary.append(text)
            say(f"   {text}")
    return summary


def run_suite(cluster: Cluster, mode: str, focus: str | None, junit_dir: Path,
              say: Callable[[str], None], not_ready_nodes: int = 0,
              processes: int = PROCESSES) -> Report:
    """The e2e binary under ginkgo's CLI on the control-plane machine, its
    specs spread over PROCESSES (as upstream CI runs them; no network
    conformance spec is [Serial]): the output into junit_dir/e2e.log, a line
    per finished spec to `say`, the reports as junit.xml and report.json."""
    ginkgo = binary_path("ginkgo", host_arch())
    e2e = binary_path("e2e-network.test", host_arch())
    focus = focus or "|".join(f"({f})" for f in MODES[mode].focus)
    skipped = skipped_here()
    skip = "|".join(skipped) or "^$"
    junit_dir.mkdir(parents=True, exist_ok=True)
    for old in (REPORT, JUNIT):
        (junit_dir / old).unlink(missing_ok=True)
    argv = [str(ginkgo), f"--procs={processes}", "-v", "--no-color",
            f"--timeout={SUITE_TIMEOUT}", f"--focus={focus}", f"--skip={skip}",
            f"--junit-report={JUNIT}", f"--json-report={REPORT}", f"--output-dir={junit_dir}",
            str(e2e), "--", f"--kubeconfig={CONF}/admin.conf", "--provider=local",
            f"--kubectl-path={kubectl_binary()}",
            # ginkgo -p counts the nodes on its first process only: the
            # others skip what needs "at least 2 nodes" unless told, as
            # upstream's hack/ginkgo-e2e.sh tells them
            f"--num-nodes={len(schedulable_nodes(cluster.kubernetes))}",
            f"--allowed-not-ready-nodes={not_ready_nodes}"]
    say(f"$ ginkgo --procs={processes} --focus='{focus}' e2e-network.test ... (on "
        f"{CONTROL_PLANE_MACHINE}; log: {junit_dir / 'e2e.log'})")
    machine = cluster.machines[CONTROL_PLANE_MACHINE]
    started = time.monotonic()
    with open(junit_dir / "e2e.log", "w") as log:
        # a session of its own: interrupted, ginkgo and its processes go together
        proc = machine.popen(argv, cwd=str(junit_dir), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, bufsize=1,
                             start_new_session=True)
        try:
            summary = _follow(proc, log, say)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        proc.wait()
    will_run = next((int(m.group(1)) for m in map(WILL_RUN.match, summary) if m), 0)
    report = junit_dir / REPORT
    texts = spec_texts(report) if report.is_file() else []
    # a host's skip is told where the focus would have run some of its specs
    told = {expression: reason for expression, reason in skipped.items()
            if any(re.search(expression, t) and re.search(focus, t) for t in texts)}
    bug_events = len(MISSING_FLANNEL_EVENT.findall((junit_dir / "e2e.log").read_text()))
    return Report(mode, read_report(report) if report.is_file() else [], "\n".join(summary),
                  time.monotonic() - started, proc.returncode, will_run, junit_dir / JUNIT,
                  told, bug_events)


def cluster_options(mode: str) -> dict:
    """Cluster's options for the suite's cluster in `mode`: the demo's, as
    Charmed Kubernetes deploys it, with the e2e images."""
    return {"workers": 2, "worker_generation": "ops", "control_plane": True,
            "kubernetes": True, "containerd": "2", "e2e_images": True,
            "control_plane_config": MODES[mode].control_plane or None}


def run(charm_dir: Path, resource: Path, mode: str, *, focus: str | None = None,
        junit_dir: Path | None = None, after_remove_add: bool = False,
        old_charm: bool = False, say: Callable[[str], None] = print) -> Report:
    say("Kubernetes v1.37, its e2e network tests, agnhost and CoreDNS: built from the Go "
        "module proxy on first use (minutes), then cached")
    kubernetes_paths(progress=lambda line: say(f"   {line}"))
    e2e_paths(progress=lambda line: say(f"   {line}"))
    options = ({**cluster_options(mode), **OLD_CHARM_CLUSTER, "containerd": "1.6"}
               if old_charm else cluster_options(mode))
    if old_charm and focus is None:
        # each spec that cannot start its pods fails after the framework's
        # 5 minutes: the everyday five, not all 47, unless --focus says
        focus = FAST_FOCUS
        say("the negative control runs the everyday five specs (--focus for others)")
    with tempfile.TemporaryDirectory(prefix="flannel-conformance.") as tmp:
        # the reports are kept: --junit DIR, else a directory of their own
        junit_dir = Path(junit_dir or tempfile.mkdtemp(prefix=f"flannel-conformance-{mode}.",
                                                       dir="/tmp")).resolve()
        with Cluster(charm_dir, resource, label=f"conformance-{mode}", say=say,
                     **options) as cluster:
            if old_charm:
                deploy_old_charm(cluster, Path(tmp), say)
                if not prepare_dns(cluster, say):
                    raise ClusterError("a pod cannot resolve kubernetes.default")
            else:
                prepare(cluster, mode, say)
            if after_remove_add:
                remove_and_add(cluster, say)
            with cluster.timings.phase(f"e2e: {mode}", say):
                # the old charm's control plane node has no network: not Ready
                report = run_suite(cluster, mode, focus, junit_dir, say,
                                   not_ready_nodes=1 if old_charm else 0)
            say(cluster.timings.table())
    return report


def main(argv: list[str]) -> int:
    parser = charm_parser("conformance", __doc__)
    parser.add_argument("--mode", choices=sorted(MODES), default="etcd")
    parser.add_argument("--focus", help="a ginkgo focus regex instead of the mode's selection")
    parser.add_argument("--junit", type=Path, help="where the JUnit report and e2e.log go")
    parser.add_argument("--after-remove-add", action="store_true",
                        help="run after `juju remove-relation kubernetes-worker flannel` "
                             "and add-relation")
    parser.add_argument("--old-charm", action="store_true",
                        help="with --after-remove-add: the charm this one replaces (the "
                             "negative control)")
    args = parser.parse_args(argv)
    if args.old_charm and not (args.after_remove_add and args.mode == "etcd"):
        parser.error("--old-charm is the negative control: with --after-remove-add, in etcd "
                     "mode (the only one charm-flannel f79f180 had)")
    resource = resource_for(args)

    def conformance() -> int:
        report = run(args.charm, resource, args.mode, focus=args.focus, junit_dir=args.junit,
                     after_remove_add=args.after_remove_add, old_charm=args.old_charm)
        print(report.table())
        print(report.summary)
        print(f"reports: {report.junit} and {report.junit.parent / REPORT}; log: "
              f"{report.junit.parent / 'e2e.log'}")
        return 0 if report.passed else 1

    return run_with_cluster("conformance", conformance)
