"""IPv6-only pods: flannel on the Kubernetes API (`subnet-manager=kubernetes`,
`cidr=""`, `ipv6-cidr` set) on a cluster that is IPv6-only from its first
start, as an operator deploys one: the control plane's `service-cidr` an IPv6
range and kube-controller-manager allocating each Node an IPv6 pod CIDR
(`controller-manager-extra-args`), kubelets on the machines' IPv6 addresses.

flanneld's etcd subnet manager cannot lease IPv6-only nodes (the charm
refuses it there: tests/sandbox/test_sb_flanneld_config_rules.py shows why);
on the Kubernetes API each Node's IPv6 pod CIDR is its lease. What a user
checks: every pod has one IPv6 address, in its Node's pod CIDR; pods on the
two nodes ping each other; a Service answers a pod on the other node; the
units are active naming their IPv6 subnet and hold no etcd key; check-network
probes the other node over IPv6; the bug report's remove/add on m1 leaves
nothing of flannel on the node and its Node, and the pods reach each other
again after add-relation.

Its own cluster (a control plane and one worker): the shared one in
test_kubernetes_sees_the_overlay.py is dual-stack, and a Node's pod CIDRs
are set once.
"""
from __future__ import annotations

import ipaddress
import json

import pytest
from functional_kit import deploy_and_wait, pings, pod_ip

from sandbox.kubernetes import IPV6_SERVICE_CIDR as SERVICE_CIDR, busybox_pod

pytestmark = [pytest.mark.functional, pytest.mark.kubernetes,
              pytest.mark.xdist_group("kubernetes-ipv6")]

NODES = ("cp", "m1")
IPV6_CIDR = "fd10:6::/56"
# what the unit's status tells an operator to set (facts/kube_nodes.py)
ALLOCATION = "allocate-node-cidrs=true node-cidr-mask-size-ipv6=64"
HTTPD = "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"
SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
           "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}


@pytest.fixture(scope="module")
def cluster(open_cluster):
    with open_cluster("kubernetes-ipv6", workers=1, worker_generation="ops",
                      control_plane=True, kubernetes=True, containerd="2",
                      control_plane_config={"service-cidr": SERVICE_CIDR,
                                            "controller-manager-extra-args": ALLOCATION},
                      ) as opened:
        deploy_and_wait(opened, config={"subnet-manager": "kubernetes", "cidr": "",
                                        "ipv6-cidr": IPV6_CIDR})
        k8s = opened.kubernetes
        k8s.wait_nodes_ready(NODES, timeout=180)
        k8s.wait_default_service_account()
        yield opened


def test_ipv6_only_pods_reach_each_other_and_a_service(cluster):
    k8s = cluster.kubernetes
    for m in NODES:
        [pod_cidr] = k8s.get("node", m)["spec"]["podCIDRs"]
        pod_network = ipaddress.ip_network(pod_cidr)
        assert pod_network.subnet_of(ipaddress.ip_network(IPV6_CIDR)), (m, pod_cidr)
        assert pod_network.prefixlen == 64, (m, pod_cidr)
        env = cluster.subnet_env(m)
        # flanneld (EnableIPv4 false) leases the Node's pod CIDR, and only it
        assert "FLANNEL_SUBNET" not in env, (m, env)
        assert ipaddress.ip_interface(env["FLANNEL_IPV6_SUBNET"]).network == pod_network
        assert cluster.workload(cluster.unit_on(m)) == (
            "active", f"Flannel subnet {env['FLANNEL_IPV6_SUBNET']}")
        assert not cluster.machines[m].exists("/etc/ssl/flannel"), m
        assert cluster.machines[m].read_file("/etc/flannel/net-conf.json") is not None, m
    assert cluster.etcd_values() == {}
    assert json.loads(cluster.machines["m1"].read_file("/etc/flannel/net-conf.json"))[
        "EnableIPv4"] is False

    web = busybox_pod("web", node="m1", command=("sh", "-c", HTTPD))
    k8s.kubectl("create", "-f", "-", input=web)
    k8s.kubectl("create", "-f", "-", input=busybox_pod("client", node="cp"))
    k8s.kubectl("apply", "-f", "-", input=json.dumps(SERVICE))
    for name in ("web", "client"):
        k8s.wait_pod_running(name)
    for name, node in (("web", "m1"), ("client", "cp")):
        [address] = [ip["ip"] for ip in k8s.get("pod", name)["status"]["podIPs"]]
        assert ipaddress.ip_address(address) in ipaddress.ip_network(
            k8s.get("node", node)["spec"]["podCIDRs"][0]), (name, address)
    assert pings(k8s, "client", pod_ip(k8s, "web", 6))
    assert pings(k8s, "web", pod_ip(k8s, "client", 6))
    service_ip = k8s.get("service", "web")["spec"]["clusterIP"]
    assert ipaddress.ip_address(service_ip) in ipaddress.ip_network(SERVICE_CIDR)
    request = f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {service_ip} 80 | tail -n 1"
    answered = k8s.wait_for("the Service answering the client on cp", lambda: k8s.kubectl(
        "exec", "client", "--", "sh", "-c", request, check=False).stdout.strip(), 30)
    assert answered == "web", answered

    # the operator's diagnosis, over IPv6
    checked = cluster.run_action(cluster.unit_on("cp"), "check-network", timeout=0.5)
    assert checked.ok and checked.results["nodes-checked"] == "1", (checked.message,
                                                                    checked.results)
    listed = cluster.run_action(cluster.unit_on("cp"), "list-leases")
    assert listed.ok, listed.message
    rows = {row["unit"]: row["subnet"] for row in listed.results["leases"].values()}
    assert rows == {m: k8s.get("node", m)["spec"]["podCIDRs"][0] for m in NODES}, rows

    # the bug report's cycle, IPv6-only: m1 left as flannel found it
    m1 = cluster.machines["m1"]
    assert set(cluster.vxlan_links("m1")) == {"flannel-v6.1"}
    assert "FLANNEL" in m1.run(["ip6tables-save"]).stdout   # flanneld's masquerade
    cluster.remove_cni_relation()
    annotations = k8s.get("node", "m1")["metadata"].get("annotations", {})
    assert not [key for key in annotations if key.startswith("flannel.alpha.coreos.com/")]
    assert cluster.vxlan_links("m1") == {}
    assert "FLANNEL" not in m1.run(["ip6tables-save"]).stdout
    assert not m1.exists("/etc/flannel") and not m1.exists("/run/flannel/subnet.env")
    cluster.add_cni_relation()
    cluster.wait_for_flannel(timeout=120)
    k8s.wait_for("the pods reaching each other again", lambda: pings(
        k8s, "client", pod_ip(k8s, "web", 6)), 60)
