"""What kubectl shows, with a real control plane, kubelets on containerd 2
and kube-proxies (sandbox.kubernetes) on one cluster: a control plane and
two workers.

- A Deployment on every node behind a ClusterIP Service, asked every 0.2 s
  by a client pod through `juju refresh flannel` (flanneld v0.27.4 -> the
  charm's resource), an `mtu` change and a flanneld kill: requests lost
  counted (none for the refresh), each node's Ready condition printed (it
  stays True through the refresh).
- Kubernetes' own e2e tests (sandbox.conformance): the four "Networking
  Granular Checks: Pods" and a Service serving its pods, with CoreDNS
  (the cluster's images include the e2e tests' and CoreDNS's).
- A worker's reboot: Ready again, its pod run again by kubelet on flannel's
  network, the timeline printed.
- `juju remove-relation kubernetes-worker flannel` kept longer than a pod
  tolerates its node being not-ready: that pod is evicted and its
  replacement waits Pending until flannel is back; a pod with Kubernetes'
  default toleration (300 s) runs on, the same pod.
- Dual-stack: kube-controller-manager and kube-proxy run with the "v4,v6"
  flannel publishes, kubelet reports both families of every pod, and an
  IPv6 Service answers.
- kube-proxy in nftables mode (the principals' proxy-extra-config) beside
  flannel in iptables mode, through a remove/add, and in nftables mode:
  ClusterIP, NodePort and the pods' masqueraded way out, measured.
- The hooks run with the python3 of the machines' Ubuntu release.

The bug report itself through kubectl (busybox.yaml Running, a pod made
while flannel is away waiting in ContainerCreating and run by kubelet's
retries, the same pod, after add-relation; each node's Ready condition
through the cycle) is the demo's (sandbox.demo.play), which
test_the_charmcraft_packed_charm.py plays with every check asserted.

Marked `kubernetes` (tests/functional/conftest.py): `-m "not kubernetes"` skips it.
"""
from __future__ import annotations

import ipaddress
import json
import time

import pytest
from functional_kit import (assert_hooks_run_with_the_base_python, deploy_and_wait, pings,
                            pod_ip, wait_past_restart_grace)

from sandbox.cluster import IPV6_CIDR
from sandbox.kubernetes import IPV6_SERVICE_CIDR, SERVICE_CIDR, UNITS, ReadyWatch, busybox_pod
from sandbox.waiting import wait_for

pytestmark = [pytest.mark.functional, pytest.mark.kubernetes,
              pytest.mark.xdist_group("kubernetes")]

NODES = ("cp", "m1", "m2")
# seconds kubelet may take to run a pod once its node's network is back: its
# pod worker retries a failed sandbox with a back-off (10 s, doubling to 5 min)
RUNNING_WITHIN = 120


@pytest.fixture(scope="module")
def cluster(open_cluster, previous_resource):
    # kubelet on containerd 2 (sandbox.cri): kubelet 1.38 stops working with 1.x
    # with the images of Kubernetes' e2e checks and CoreDNS: they judge it too
    from sandbox.conformance import FAST_IMAGES
    with open_cluster("kubernetes", workers=2, worker_generation="ops", control_plane=True,
                      kubernetes=True, containerd="2", e2e_images=FAST_IMAGES) as opened:
        # the resource of this charm's earlier releases, so that a refresh
        # replaces flanneld (test_a_service_answers_through_a_refresh)
        deploy_and_wait(opened, resource=previous_resource)
        k8s = opened.kubernetes
        k8s.wait_nodes_ready(NODES, timeout=180)
        k8s.wait_default_service_account()
        yield opened


def test_hooks_run_with_the_python3_of_the_base_the_machines_claim(cluster):
    assert_hooks_run_with_the_base_python(cluster)


def test_every_kubelet_runs_on_containerd_2(cluster):
    """What `kubectl get nodes -o wide` shows as CONTAINER-RUNTIME."""
    from sandbox.resource import CONTAINERD2_VERSION
    runtimes = {n["metadata"]["name"]: n["status"]["nodeInfo"]["containerRuntimeVersion"]
                for n in cluster.kubernetes.get("nodes")["items"]}
    wanted = f"containerd://{CONTAINERD2_VERSION.lstrip('v')}"
    assert runtimes == {m: wanted for m in NODES}, runtimes


def pod_manifest(name: str, node: str = "", command: str = "sleep 3600") -> str:
    return busybox_pod(name, node, command=("sh", "-c", command))


def kubectl_get_po(k8s, *names: str) -> str:
    return k8s.kubectl("get", "po", *names).stdout


def events_of(k8s, pod: str) -> list[dict]:
    out = k8s.kubectl("get", "events", "--field-selector", f"involvedObject.name={pod}",
                      "-o", "json").stdout
    return json.loads(out)["items"]


WEB = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
    "spec": {
        "replicas": len(NODES), "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                # one per node, the control plane's included
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "web"}},
                     "topologyKey": "kubernetes.io/hostname"}]}},
                "tolerations": [{"key": "node-role.kubernetes.io/control-plane",
                                 "operator": "Exists", "effect": "NoSchedule"}],
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "httpd", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", "mkdir -p /www && hostname > /www/index.html && "
                                "exec httpd -f -p 8080 -h /www"],
                    "ports": [{"containerPort": 8080}]}]}}}}
WEB_SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"selector": {"app": "web"},
                        "ports": [{"port": 80, "targetPort": 8080}]}}
# a request every 0.2 s, one line each: "ok <the pod that answered>" or "lost"
# (no cluster DNS here: the Service by the variable kubelet sets for it; an
# answer's last line is the page, the name of the pod that served it)
CLIENT_LOOP = ("while true; do answer=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | "
               "nc -w 2 $WEB_SERVICE_HOST 80 | tail -n 1); "
               "if [ -n \"$answer\" ]; then echo ok $answer; else echo lost; fi; sleep 0.2; done")


def answers(k8s, pod: str = "client") -> list[str]:
    return k8s.logs(pod).splitlines()


def requests_during(k8s, action) -> tuple[int, list[str]]:
    """Requests the client made while `action()` ran and 3 s after:
    (how many, those lost)."""
    mark = len(answers(k8s))
    action()
    time.sleep(3)
    during = answers(k8s)[mark:]
    return len(during), [line for line in during if not line.startswith("ok")]


def test_a_service_answers_through_a_refresh(cluster, resource):
    k8s = cluster.kubernetes
    k8s.kubectl("apply", "-f", "-", input=json.dumps(WEB))
    k8s.kubectl("apply", "-f", "-", input=json.dumps(WEB_SERVICE))
    k8s.kubectl("rollout", "status", "deployment/web", "--timeout=120s", timeout=130)
    web_nodes = {p["spec"]["nodeName"] for p in k8s.get("pods", "")["items"]
                 if p["metadata"]["labels"].get("app") == "web"}
    assert web_nodes == set(NODES), web_nodes
    cluster_ip = k8s.get("service", "web")["spec"]["clusterIP"]
    client = pod_manifest("client", node="m1", command=CLIENT_LOOP)
    k8s.kubectl("create", "-f", "-", input=client)
    k8s.wait_pod_running("client")
    # the Service answers from every node's pod, through kube-proxy's
    # rules and flannel's routes
    k8s.wait_for("answers from all three web pods",
                 lambda: len({line for line in answers(k8s) if line.startswith("ok")}) >= 3,
                 timeout=60)
    print(f"web's ClusterIP {cluster_ip}; the client's first answers: {answers(k8s)[:6]}")

    flanneld_before = {m: cluster.flanneld_pids(m) for m in NODES}
    with ReadyWatch(k8s) as refresh:
        sent, lost = requests_during(k8s, lambda: (cluster.upgrade_flannel(resource),
                                                   cluster.wait_for_flannel(timeout=120)))
    print(f"juju refresh flannel: {sent} requests, {len(lost)} lost; Ready:\n"
          f"{refresh.timeline()}")
    assert all(cluster.flanneld_pids(m) != flanneld_before[m] for m in NODES), \
        "the refresh did not restart flanneld"
    assert sent > 10 and lost == [], (sent, lost)
    # nothing was wrong with any node's network: none went NotReady
    assert all(refresh.not_ready_seconds(m) == 0 for m in NODES), refresh.timeline()

    flanneld_before = {m: cluster.flanneld_pids(m) for m in NODES}
    with ReadyWatch(k8s) as mtu:
        sent, lost = requests_during(k8s, lambda: (cluster.configure(mtu=1400),
                                                   cluster.wait_for_flannel(timeout=120)))
    print(f"juju config flannel mtu=1400: {sent} requests, {len(lost)} lost; Ready:\n"
          f"{mtu.timeline()}")
    assert all(cluster.flanneld_pids(m) != flanneld_before[m] for m in NODES), \
        "the mtu change did not restart flanneld"
    assert sent > 10

    m2 = cluster.machines["m2"]
    with ReadyWatch(k8s) as kill:
        sent, lost = requests_during(k8s, lambda: (
            m2.run(["kill", "-9", *map(str, cluster.flanneld_pids("m2"))]),
            k8s.wait_for("flanneld back on m2", lambda: cluster.flanneld_pids("m2"), 30)))
    print(f"flanneld killed on m2: {sent} requests, {len(lost)} lost; Ready:\n"
          f"{kill.timeline()}")
    assert sent > 10
    k8s.kubectl("delete", "pod", "client", "--wait=false")
    k8s.kubectl("delete", "-f", "-", input=json.dumps(WEB))


def test_kubernetes_own_e2e_checks_of_pods_and_a_service_pass(cluster, tmp_path):
    """Kubernetes' e2e suite (k8s.io/kubernetes v1.37.2 test/e2e, unchanged)
    judges the overlay once the charm's own flanneld runs (after the
    refresh): the four "Networking Granular Checks: Pods" (pod to pod and
    node to pod, HTTP and UDP, across the nodes) and a Service serving its
    pods, with CoreDNS answering kubernetes.default first. The whole
    [sig-network] [Conformance] selection in every mode runs under
    scripts/test --full (tests/functional/test_conformance.py)."""
    from sandbox.conformance import FAST_FOCUS, FAST_PROCESSES, prepare_dns, run_suite
    assert prepare_dns(cluster, print), "a pod cannot resolve kubernetes.default"
    report = run_suite(cluster, "etcd", FAST_FOCUS, tmp_path, print, processes=FAST_PROCESSES)
    print(report.table())
    passed = sorted(s.name for s in report.specs if s.state == "passed")
    assert len(passed) == 5 and report.passed, report.table()
    assert sum("Granular Checks: Pods" in name for name in passed) == 4, passed


def test_a_rebooted_worker_is_ready_again_and_runs_its_pod(cluster):
    """m2 loses power: its flanneld and kubelet start at boot (their units
    are enabled), kubelet runs its pod again (the same pod, a new sandbox on
    flannel's network) and the node is Ready; the timeline is printed."""
    k8s = cluster.kubernetes
    k8s.kubectl("create", "-f", "-", input=pod_manifest("on-m2", node="m2"))
    k8s.wait_pod_running("on-m2")
    before = k8s.get("pod", "on-m2")

    def restarted():
        pod = k8s.get("pod", "on-m2")
        statuses = pod["status"].get("containerStatuses") or [{}]
        return (pod["status"]["phase"] == "Running" and statuses[0].get("ready")
                and statuses[0].get("restartCount", 0) >= 1 and pod)

    with ReadyWatch(k8s) as watch:
        started = time.monotonic()
        cluster.reboot("m2")
        after = k8s.wait_for("on-m2 running again after m2's reboot", restarted, 120)
        running_after = time.monotonic() - started
        k8s.wait_nodes_ready(NODES, timeout=60)
    print(f"Ready through m2's reboot:\n{watch.timeline()}\n"
          f"on-m2 running again {running_after:.1f}s after the power cut, at "
          f"{after['status']['podIP']} (was {before['status']['podIP']})")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    subnet = cluster.subnet_env("m2")["FLANNEL_SUBNET"].rsplit(".", 1)[0]
    assert after["status"]["podIP"].startswith(subnet + "."), (after["status"], subnet)
    k8s.kubectl("delete", "pod", "on-m2", "--wait=false")


# the control plane's service-cidr, both families (as operators set it for dual-stack)
DUAL_SERVICE_CIDR = f"{SERVICE_CIDR},{IPV6_SERVICE_CIDR}"
WEB6_SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web6"},
                "spec": {"selector": {"app": "web"}, "ipFamilies": ["IPv6"],
                         "ipFamilyPolicy": "SingleStack",
                         "ports": [{"port": 80, "targetPort": 8080}]}}


def command_line(machine, name: str) -> str:
    [argv] = machine.command_lines(name)
    return " ".join(argv)


def test_dual_stack_reaches_kubelet_kube_proxy_and_a_service(cluster):
    """`juju config kubernetes-control-plane service-cidr=v4,v6` and `juju
    config flannel ipv6-cidr=...`: the control plane runs with the "v4,v6"
    flannel publishes, pods have both families as kubelet sees them, and an
    IPv6 Service answers."""
    from sandbox.cluster import CONTROL_PLANE
    k8s = cluster.kubernetes
    cluster.controller.config(CONTROL_PLANE, **{"service-cidr": DUAL_SERVICE_CIDR})
    cluster.settle()
    with ReadyWatch(k8s) as ready:
        cluster.configure(**{"ipv6-cidr": IPV6_CIDR})
        cluster.wait_for_flannel(timeout=120)
        k8s.wait_nodes_ready(NODES, timeout=60)
    print(f"Ready through turning IPv6 on:\n{ready.timeline()}")
    published = f"{cluster.network_config()['Network']},{IPV6_CIDR}"
    cp = cluster.machines["cp"]
    k8s.wait_for("kube-controller-manager restarted with both families", lambda: (
        f"--cluster-cidr={published}" in command_line(cp, "kube-controller-manager")), 60)
    for m in NODES:
        proxy = json.loads(cluster.machines[m].read_file(
            "/etc/kubernetes/kube-proxy-config.yaml"))
        assert proxy["clusterCIDR"] == published, (m, proxy)
    k8s.kubectl("apply", "-f", "-", input=json.dumps(WEB))
    k8s.kubectl("apply", "-f", "-", input=json.dumps(WEB6_SERVICE))
    k8s.kubectl("rollout", "status", "deployment/web", "--timeout=120s", timeout=130)
    pods = [p for p in k8s.get("pods", "")["items"] if p["metadata"]["labels"].get("app") == "web"]
    families = {p["spec"]["nodeName"]: sorted(":" in ip["ip"] for ip in p["status"]["podIPs"])
                for p in pods}
    # kubelet reports an address of each family for every pod
    assert families == {m: [False, True] for m in NODES}, families
    service_ip = k8s.get("service", "web6")["spec"]["clusterIP"]
    assert ":" in service_ip, service_ip
    client = pod_manifest("client6", node="m1", command=CLIENT_LOOP.replace(
        "$WEB_SERVICE_HOST", "$WEB6_SERVICE_HOST"))
    k8s.kubectl("create", "-f", "-", input=client)
    k8s.wait_pod_running("client6")
    k8s.wait_for("answers over IPv6 from all three web pods",
                 lambda: len({line for line in answers(k8s, "client6")
                              if line.startswith("ok")}) >= 3, timeout=60)
    print(f"web6's ClusterIP {service_ip}: {answers(k8s, 'client6')[:6]}")


def set_proxy_mode(cluster, mode: str) -> None:
    """`juju config kubernetes-worker proxy-extra-config="{mode: nftables}"`
    and the same on the control plane ("" : the charms' default, iptables);
    then until every node's kube-proxy runs in that mode."""
    from sandbox.cluster import CONTROL_PLANE, WORKER
    extra = f"{{mode: {mode}}}" if mode != "iptables" else "{}"
    for app in (WORKER, CONTROL_PLANE):
        cluster.controller.config(app, **{"proxy-extra-config": extra})
    cluster.settle()

    def in_mode() -> bool:
        tables = [cluster.machines[m].run(["nft", "list", "tables"]).stdout for m in NODES]
        return all(("table ip kube-proxy" in t) == (mode == "nftables") for t in tables)
    cluster.kubernetes.wait_for(f"kube-proxy in {mode} mode on every node", in_mode, 60)


def services_work(cluster, cluster_ip: str, node_port: int) -> dict:
    """What a user checks of Services and the pods' way out: a ClusterIP
    from a pod (m1), a NodePort of m1 from m2 and from outside the cluster
    (etcd's namespace), a pod reaching etcd's address, which has no route
    back to the pod network (flannel's masquerade must take it)."""
    import subprocess
    k8s, m1 = cluster.kubernetes, cluster.machines["m1"]
    request = f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {cluster_ip} 80 | tail -n 1"
    seen = {"clusterip": sum(bool(k8s.kubectl("exec", "probe", "--", "sh", "-c", request,
                                              check=False).stdout.strip()) for _ in range(3))}
    url = f"http://{m1.address}:{node_port}/"
    seen["nodeport-from-m2"] = bool(cluster.machines["m2"].run(
        ["curl", "-s", "-m", "3", url], check=False).stdout.strip())
    seen["nodeport-from-outside"] = bool(subprocess.run(
        ["ip", "netns", "exec", cluster.etcd.netns, "curl", "-s", "-m", "3", url],
        capture_output=True, text=True).stdout.strip())
    seen["pod-to-outside"] = k8s.kubectl("exec", "probe", "--", "ping", "-c", "2", "-W", "1",
                                         cluster.etcd.host, check=False).returncode == 0
    return seen


def test_kube_proxy_in_nftables_mode_beside_flannel_in_either_mode(cluster):
    """kube-proxy's nftables mode (GA since Kubernetes 1.33) beside flannel's
    iptables rules (the mixed case no one had measured), through a remove/add
    of flannel, then beside flannel's own nftables mode: Services (ClusterIP,
    NodePort from a node and from outside) and pods' masqueraded way out
    work in each. kube-proxy's mark for "masquerade this" is 0x4000 in both
    of its modes, and flannel's masquerade rules return on it (iptables:
    --mark 0x4000/0x4000; nftables: meta mark 0x4000), so kube-proxy's own
    rules do that masquerade; the charm leaves enable-nftables to the
    operator (docs/reference/configuration.md)."""
    k8s = cluster.kubernetes
    node_port_service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-np"},
                         "spec": {"type": "NodePort", "selector": {"app": "web"},
                                  "ports": [{"port": 80, "targetPort": 8080}]}}
    k8s.kubectl("apply", "-f", "-", input=json.dumps(WEB))
    k8s.kubectl("apply", "-f", "-", input=json.dumps(node_port_service))
    k8s.kubectl("rollout", "status", "deployment/web", "--timeout=120s", timeout=130)
    k8s.kubectl("create", "-f", "-", input=pod_manifest("probe", node="m1"))
    k8s.wait_pod_running("probe")
    spec = k8s.get("service", "web-np")["spec"]
    cluster_ip, node_port = spec["clusterIP"], spec["ports"][0]["nodePort"]
    every = {"clusterip": 3, "nodeport-from-m2": True, "nodeport-from-outside": True,
             "pod-to-outside": True}
    measured = {}
    try:
        set_proxy_mode(cluster, "nftables")
        measured["kube-proxy nftables, flannel iptables"] = services_work(
            cluster, cluster_ip, node_port)
        cluster.remove_cni_relation()
        cluster.add_cni_relation()
        cluster.wait_for_flannel(timeout=120)
        measured["... after remove/add"] = services_work(cluster, cluster_ip, node_port)
        cluster.configure(enable_nftables=True)
        cluster.wait_for_flannel(timeout=120)
        measured["kube-proxy nftables, flannel nftables"] = services_work(
            cluster, cluster_ip, node_port)
    finally:
        print("\n".join(f"{mode}: {seen}" for mode, seen in measured.items()))
        set_proxy_mode(cluster, "iptables")
        cluster.configure(enable_nftables=False)
        cluster.wait_for_flannel(timeout=120)
        k8s.kubectl("delete", "pod", "probe", "--wait=false")
        k8s.kubectl("delete", "-f", "-", input=json.dumps(node_port_service))
    assert measured == {mode: every for mode in (
        "kube-proxy nftables, flannel iptables", "... after remove/add",
        "kube-proxy nftables, flannel nftables")}, measured


# How long the "short" pods tolerate their node being not-ready: short enough
# for a test to outlast. Pods that say nothing get 300 s (the API server's
# DefaultTolerationSeconds admission), as most pods of a real cluster do.
SHORT_TOLERATION = 15
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def short_lived(name: str, node: str) -> str:
    """A Deployment of one pod on `node` that tolerates its node being
    not-ready for SHORT_TOLERATION s only."""
    return json.dumps({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {
                     "nodeSelector": {"kubernetes.io/hostname": node},
                     "tolerations": [{"key": NOT_READY_TAINT, "operator": "Exists",
                                      "effect": "NoExecute",
                                      "tolerationSeconds": SHORT_TOLERATION}],
                     "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "busybox", "image": "busybox",
                                     "imagePullPolicy": "IfNotPresent",
                                     "command": ["sh", "-c", "sleep 3600"]}]}}}})


def pods_of(k8s, app: str) -> list[dict]:
    return [p for p in k8s.get("pods")["items"] if p["metadata"]["labels"].get("app") == app]


def not_ready_toleration(pod: dict) -> int | None:
    return next((t.get("tolerationSeconds") for t in pod["spec"].get("tolerations", [])
                 if t.get("key") == NOT_READY_TAINT and t.get("effect") == "NoExecute"), None)


def test_a_removal_outlasting_a_pods_toleration_evicts_that_pod_only(cluster):
    """`juju remove-relation kubernetes-worker flannel` kept longer than a
    pod tolerates its node being not-ready: the node controller evicts that
    pod, its Deployment's replacement waits Pending (no worker is Ready),
    and runs once flannel is back; a pod with Kubernetes' default 300 s
    keeps running throughout, the same pod. The timeline is printed."""
    k8s = cluster.kubernetes
    k8s.kubectl("create", "-f", "-", input=short_lived("short", "m1"))
    k8s.kubectl("create", "-f", "-", input=pod_manifest("patient", node="m1"))
    k8s.kubectl("rollout", "status", "deployment/short", "--timeout=120s", timeout=130)
    k8s.wait_pod_running("patient")
    [short] = pods_of(k8s, "short")
    patient = k8s.get("pod", "patient")
    assert not_ready_toleration(patient) == 300, patient["spec"]["tolerations"]

    def evicted():
        """The first pod marked for deletion, or gone."""
        proc = k8s.kubectl("get", "pod", short["metadata"]["name"], "-o", "json", check=False)
        return proc.returncode != 0 or "deletionTimestamp" in json.loads(proc.stdout)["metadata"]

    def gone() -> bool:
        return k8s.kubectl("get", "pod", short["metadata"]["name"], check=False).returncode != 0

    def replacement_waits():
        """The Deployment's new pod, once the scheduler said it cannot place it."""
        for pod in pods_of(k8s, "short"):
            if pod["metadata"]["uid"] != short["metadata"]["uid"] and any(
                    c["type"] == "PodScheduled" and c["status"] == "False"
                    for c in pod["status"].get("conditions", [])):
                return pod
        return None

    with ReadyWatch(k8s) as watch:
        cluster.remove_cni_relation()
        k8s.wait_for("m1 NotReady", lambda: k8s.node_ready("m1")[0] == "False", 60)
        k8s.wait_for(f"{short['metadata']['name']} evicted", evicted, 90, interval=1)
        evicted_at = watch.elapsed()
        gone_while_away = gone()
        waiting = k8s.wait_for("short's replacement unschedulable", replacement_waits, 30)
        unschedulable = [c for c in waiting["status"].get("conditions", [])
                         if c["type"] == "PodScheduled"]
        assert k8s.pod_phase("patient") == "Running"
        taints_away = [{k: t[k] for k in ("key", "effect")}
                       for t in k8s.get("node", "m1")["spec"].get("taints", [])]
        cluster.add_cni_relation()
        cluster.wait_for_flannel(timeout=120)
        k8s.wait_nodes_ready(NODES, timeout=60)
        k8s.wait_pod_running(waiting["metadata"]["name"], timeout=RUNNING_WITHIN)
        running_at = watch.elapsed()
        k8s.wait_for(f"{short['metadata']['name']} gone", gone, 60, interval=1)
    not_ready_from = next(at for at, node, status, _ in watch.changes
                          if node == "m1" and status != "True")
    print(f"remove-relation kept {watch.ended:.0f}s; Ready:\n{watch.timeline()}\n"
          f"short (tolerates {SHORT_TOLERATION}s) evicted {evicted_at - not_ready_from:.1f}s "
          f"after m1 went NotReady ({'gone' if gone_while_away else 'Terminating'} while "
          f"flannel was away); its replacement scheduled "
          f"{unschedulable[0]['status']} ({unschedulable[0].get('message', '')}), "
          f"Running {running_at:.1f}s after the removal; m1's taints while away: {taints_away}")
    eviction = [e for e in events_of(k8s, short["metadata"]["name"])
                if e.get("reason") == "TaintManagerEviction"]
    assert eviction, events_of(k8s, short["metadata"]["name"])
    assert "untolerated taint" in unschedulable[0].get("message", ""), unschedulable
    assert {"key": NOT_READY_TAINT, "effect": "NoExecute"} in taints_away, taints_away
    # not evicted before its toleration ran out
    # (the taint follows the NotReady this watch saw by at most one poll)
    assert evicted_at - not_ready_from >= SHORT_TOLERATION - 1, watch.timeline()
    after = k8s.get("pod", "patient")
    assert after["metadata"]["uid"] == patient["metadata"]["uid"]
    assert after["status"]["phase"] == "Running"
    k8s.kubectl("delete", "deployment", "short", "--wait=false")
    k8s.kubectl("delete", "pod", "patient", "--wait=false")


KUBE_ALLOCATION = ("allocate-node-cidrs=true node-cidr-mask-size-ipv4=24 "
                   "node-cidr-mask-size-ipv6=64")
FLANNEL_ANNOTATION = "flannel.alpha.coreos.com/"


def flannel_annotations(k8s) -> dict:
    return {n["metadata"]["name"]: sorted(k for k in n["metadata"].get("annotations", {})
                                          if k.startswith(FLANNEL_ANNOTATION))
            for n in k8s.get("nodes")["items"]}


def test_flannel_moves_to_the_kubernetes_api_and_back(cluster):
    """On the running (dual-stack) cluster, as the docs tell an operator:
    `juju config kubernetes-control-plane controller-manager-extra-args=
    'allocate-node-cidrs=true ...'`, then `juju config flannel
    subnet-manager=kubernetes`. Every node leases its Node's pod CIDRs, no
    unit keeps an etcd key on disk and etcd keeps no flannel key; a pod from
    before runs on (the status counts it) and new pods reach each other
    across nodes. The bug report's remove/add through kubectl in this mode:
    m1's Node loses flanneld's annotations, a pod made meanwhile waits in
    ContainerCreating and runs after add-relation. Back to etcd: no flannel
    annotation on any Node, new pods work."""
    from sandbox.cluster import CONTROL_PLANE
    k8s = cluster.kubernetes
    k8s.kubectl("create", "-f", "-", input=pod_manifest("before", node="m1"))
    k8s.wait_pod_running("before")
    cluster.controller.config(CONTROL_PLANE, **{"controller-manager-extra-args":
                                                KUBE_ALLOCATION})
    cluster.settle()
    with ReadyWatch(k8s) as ready:
        cluster.configure(**{"subnet-manager": "kubernetes"})
        # a new pod on m1 starts in the same settle, no update-status between:
        # the old lease's gateway is off cni0 (else the bridge plugin refuses
        # every pod until a later hook takes it off)
        k8s.kubectl("create", "-f", "-", input=pod_manifest("switched", node="m1"))
        k8s.wait_pod_running("switched", timeout=RUNNING_WITHIN)
        cluster.wait_for_flannel(timeout=120)
        k8s.wait_nodes_ready(NODES, timeout=60)
    print(f"Ready through the move to the Kubernetes API:\n{ready.timeline()}")
    for m in NODES:
        node = k8s.get("node", m)
        env = cluster.subnet_env(m)
        leased = sorted(str(ipaddress.ip_interface(s).network) for s in (
            env["FLANNEL_SUBNET"], env["FLANNEL_IPV6_SUBNET"]))
        assert leased == sorted(node["spec"]["podCIDRs"]), (m, env, node["spec"])
        assert node["metadata"]["annotations"][
            FLANNEL_ANNOTATION + "kube-subnet-manager"] == "true"
        # no etcd client key (nor any etcd client file) on any unit
        assert not cluster.machines[m].exists("/etc/ssl/flannel"), m
    assert cluster.etcd_values() == {}
    status = cluster.workload(cluster.unit_on("m1"))
    # ("before", and the other tests' pods still running on m1)
    assert status[1].endswith("from before subnet-manager=etcd: recreate them"), status
    for name, node in (("k1", "m1"), ("k2", "m2")):
        k8s.kubectl("create", "-f", "-", input=pod_manifest(name, node=node))
    for name in ("k1", "k2"):
        k8s.wait_pod_running(name)
    for family in (4, 6):
        assert pings(k8s, "k1", pod_ip(k8s, "k2", family)), family
    assert k8s.pod_phase("before") == "Running"
    # the actions read the leases where this mode keeps them: the Nodes
    listed = cluster.run_action(cluster.unit_on("m1"), "list-leases")
    assert listed.ok, listed.message
    rows = {row["unit"]: row for row in listed.results["leases"].values()}
    assert {name: (row["subnet"], row["ipv6-subnet"]) for name, row in rows.items()} == {
        m: tuple(k8s.get("node", m)["spec"]["podCIDRs"]) for m in NODES}, rows
    assert rows["m1"]["this-node"] == "yes" and rows["m2"]["node-answers"] == "yes"
    checked = cluster.run_action(cluster.unit_on("m1"), "check-network", timeout=0.5)
    # the two other nodes, in both families
    assert checked.ok and checked.results["nodes-checked"] == "4", (checked.message,
                                                                    checked.results)

    # the bug report's cycle, in this mode
    cluster.remove_cni_relation()
    assert flannel_annotations(k8s)["m1"] == []
    unavailable = [c for c in k8s.get("node", "m1")["status"]["conditions"]
                   if c["type"] == "NetworkUnavailable"]
    assert unavailable == [], unavailable
    k8s.kubectl("create", "-f", "-", input=pod_manifest("made-while-away", node="m1"))
    k8s.wait_for("made-while-away's sandbox failing", lambda: k8s.kubectl(
        "get", "events", "--field-selector", "involvedObject.name=made-while-away",
        "-o", "name").stdout.strip(), 60)
    assert "ContainerCreating" in k8s.kubectl("get", "po", "made-while-away").stdout
    cluster.add_cni_relation()
    cluster.wait_for_flannel(timeout=120)
    k8s.wait_pod_running("made-while-away", timeout=RUNNING_WITHIN)
    assert pings(k8s, "made-while-away", pod_ip(k8s, "k2"))

    # a Node deleted and registered again (`kubectl delete node m1`, its kubelet
    # restarted): a new Node, none of flanneld's annotations on it, the other
    # nodes' routes to m1 gone; one update-status restarts flanneld there
    k8s.kubectl("delete", "node", "m1")
    cluster.machines["m1"].run(["systemctl", "restart", UNITS["kubelet"]])
    k8s.wait_for("m1 registered again with a pod CIDR", lambda: k8s.kubectl(
        "get", "node", "m1", "-o", "jsonpath={.spec.podCIDRs}", check=False).stdout.strip(), 90)
    assert flannel_annotations(k8s)["m1"] == []
    wait_past_restart_grace(cluster, "m1")
    cluster.controller.update_status("flannel")
    cluster.settle()
    # (flanneld annotates its Node as it starts, after the hook that restarted it)
    annotated = wait_for(lambda: (
        FLANNEL_ANNOTATION + "kube-subnet-manager" in flannel_annotations(k8s)["m1"]), 30)
    log = cluster.controller.unit_log(cluster.unit_on("m1")).splitlines()
    assert annotated, "m1's Node not annotated again; the unit's last log lines:\n" + \
        "\n".join(log[-40:])
    k8s.wait_nodes_ready(NODES, timeout=60)
    for name, node in (("r1", "m1"), ("r2", "m2")):
        k8s.kubectl("create", "-f", "-", input=pod_manifest(name, node=node))
    for name in ("r1", "r2"):
        k8s.wait_pod_running(name, timeout=RUNNING_WITHIN)
    assert pings(k8s, "r2", pod_ip(k8s, "r1")), "m2's pod cannot reach m1's new pod"

    cluster.configure(**{"subnet-manager": "etcd"})
    cluster.wait_for_flannel(timeout=120)
    assert flannel_annotations(k8s) == {m: [] for m in NODES}
    assert any("/subnets/" in key for key in cluster.etcd_values())
    k8s.kubectl("create", "-f", "-", input=pod_manifest("e1", node="m1"))
    k8s.wait_pod_running("e1")
    k8s.kubectl("create", "-f", "-", input=pod_manifest("e2", node="m2"))
    k8s.wait_pod_running("e2")
    assert pings(k8s, "e1", pod_ip(k8s, "e2"))
    cluster.controller.config(CONTROL_PLANE, **{"controller-manager-extra-args": ""})
    k8s.kubectl("delete", "pod", "before", "switched", "k1", "k2", "made-while-away", "r1", "r2",
                "e1", "e2", "--wait=false", check=False)
