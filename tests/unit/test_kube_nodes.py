"""Nodes as flanneld's kube subnet manager sees them, and root's kubeconfig
read the two ways Charmed Kubernetes' principals and the sandbox write it
(a token and the CA as data; client certificates as files or data)."""
import base64
import ipaddress

import pytest

from charms.flannel.adapters.kube_api import read_kubeconfig
from charms.flannel.facts.kube_nodes import (AmbiguousNode, KubeRefused, KubeUnavailable, Node,
                                             allocation_advice, lease_of, node_of,
                                             pod_cidr_problem)

PREFIX = "flannel.alpha.coreos.com/"


def api_node(name, addresses, cidrs=None, annotations=None):
    return {"metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"podCIDRs": cidrs} if cidrs else {},
            "status": {"addresses": [{"type": "InternalIP", "address": a}
                                     for a in addresses] + [{"type": "Hostname",
                                                             "address": name}]}}


def test_this_machine_s_node_is_the_one_with_one_of_its_addresses():
    nodes = [Node.from_api(api_node("ip-10-0-0-4.ec2.internal", ["10.0.0.4"])),
             Node.from_api(api_node("m1", ["172.31.254.12", "fd00::12"]))]
    assert node_of(nodes, ["10.9.9.9", "fd00:0:0::12"]).name == "m1"
    assert node_of(nodes, ["10.0.0.4"]).name == "ip-10-0-0-4.ec2.internal"
    assert node_of(nodes, ["10.0.0.5"]) is None


def test_of_two_nodes_with_this_machine_s_address_the_one_kubelet_registered_is_this_one():
    """A stale Node of a replaced machine whose address was reused: the first
    listed won, and flanneld leased and annotated the wrong Node."""
    stale = Node.from_api(api_node("old-m1", ["172.31.254.12"], ["10.1.9.0/24"]))
    mine = Node.from_api(api_node("m1", ["172.31.254.12"], ["10.1.1.0/24"]))
    assert node_of([stale, mine], ["172.31.254.12"], hostname="m1").name == "m1"
    assert node_of([stale, mine], ["172.31.254.12"], hostname="M1.maas").name == "m1"
    aws = Node.from_api(api_node("ip-10-0-0-5.ec2.internal", ["172.31.254.12"]))
    assert node_of([stale, aws], ["172.31.254.12"], hostname="ip-10-0-0-5") is aws
    # the Node this machine was found to be before, while it is there
    assert node_of([stale, mine], ["172.31.254.12"], name="m1").name == "m1"
    with pytest.raises(AmbiguousNode) as ambiguous:
        node_of([stale, mine], ["172.31.254.12"], hostname="juju-1234-7")
    assert str(ambiguous.value) == (
        "Nodes old-m1 and m1 both have this machine's address 172.31.254.12 and neither is "
        "named juju-1234-7: delete the stale one (kubectl delete node NAME)")


def test_a_node_s_pod_cidrs_come_from_spec_pod_cidrs_or_the_older_pod_cidr():
    item = api_node("m1", ["10.0.0.4"])
    item["spec"] = {"podCIDR": "10.1.7.0/24"}
    assert Node.from_api(item).pod_cidrs == ("10.1.7.0/24",)
    assert Node.from_api(api_node("m1", [], ["10.1.7.0/24", "fd10:1:0:7::/64"])).pod_cidrs \
        == ("10.1.7.0/24", "fd10:1:0:7::/64")


def test_only_what_flanneld_writes_is_flanneld_s_to_take_away():
    node = Node.from_api(api_node("m1", [], annotations={
        PREFIX + "backend-data": "{}", PREFIX + "kube-subnet-manager": "true",
        PREFIX + "public-ip": "10.0.0.4",
        # the operator's: flanneld only reads them
        PREFIX + "node-public-ip": "192.0.2.4", PREFIX + "public-ip-overwrite": "192.0.2.4",
        "node.alpha.kubernetes.io/ttl": "0"}))
    assert sorted(node.flanneld_annotations) == [
        PREFIX + "backend-data", PREFIX + "kube-subnet-manager", PREFIX + "public-ip"]


def test_an_annotated_node_is_a_lease_as_the_actions_list_and_probe_them():
    node = Node.from_api(api_node("m1", ["172.31.254.12"], ["10.1.1.0/24", "fd10:1:0:1::/64"], {
        PREFIX + "kube-subnet-manager": "true", PREFIX + "backend-type": "vxlan",
        PREFIX + "backend-data": '{"VNI":1,"VtepMAC":"c2:d3:ec:43:70:ae"}',
        PREFIX + "backend-v6-data": '{"VNI":1,"VtepMAC":"c2:d3:ec:43:70:af"}',
        PREFIX + "public-ip": "172.31.254.12", PREFIX + "public-ipv6": "fd00::12"}))
    lease = lease_of(node)
    assert (lease.subnet, lease.ipv6_subnet, lease.public_ip) == (
        "10.1.1.0/24", "fd10:1:0:1::/64", "172.31.254.12")
    assert lease.attributes["BackendData"]["VtepMAC"] == "c2:d3:ec:43:70:ae"
    assert lease.attributes["PublicIPv6"] == "fd00::12"
    # a Node flanneld has not annotated is not in the overlay
    assert lease_of(Node.from_api(api_node("m2", [], ["10.1.2.0/24"]))) is None


def test_an_ipv6_only_node_is_a_lease_keyed_by_its_ipv6_pod_cidr():
    """flanneld with EnableIPv4 false annotates only the IPv6 address and
    VTEP: the lease carries them where an IPv4 lease has its own, so the
    actions probe it as any other."""
    node = Node.from_api(api_node("m1", ["fd00::12"], ["fd10:1:0:1::/64"], {
        PREFIX + "kube-subnet-manager": "true", PREFIX + "backend-type": "vxlan",
        PREFIX + "backend-v6-data": '{"VNI":1,"VtepMAC":"c2:d3:ec:43:70:af"}',
        PREFIX + "public-ipv6": "fd00::12"}))
    lease = lease_of(node)
    assert (lease.subnet, lease.ipv6_subnet, lease.public_ip) == (
        "fd10:1:0:1::/64", None, "fd00::12")
    assert lease.attributes["BackendData"]["VtepMAC"] == "c2:d3:ec:43:70:af"


NETWORKS = [(ipaddress.ip_network("10.1.0.0/16"), 24), (ipaddress.ip_network("fd10:1::/56"), 64)]
ADVICE = allocation_advice(24, 64)


def test_a_node_without_a_pod_cidr_says_what_to_set_on_the_control_plane():
    problem = pod_cidr_problem(Node.from_api(api_node("m1", [])), NETWORKS, ADVICE)
    assert problem == (
        "Node m1 has no pod CIDR: kube-controller-manager must allocate them for "
        "subnet-manager=kubernetes: juju config kubernetes-control-plane "
        "controller-manager-extra-args='allocate-node-cidrs=true node-cidr-mask-size-ipv4=24 "
        "node-cidr-mask-size-ipv6=64'")
    assert "ipv6" not in allocation_advice(24, None)


def test_a_pod_cidr_outside_flannel_s_networks_names_the_cluster_cidr():
    problem = pod_cidr_problem(Node.from_api(api_node("m1", [], ["10.2.3.0/24"])), NETWORKS,
                               ADVICE)
    assert problem.startswith("Node m1's pod CIDR 10.2.3.0/24 is outside flannel's "
                              "10.1.0.0/16, fd10:1::/56: kube-controller-manager's "
                              "--cluster-cidr must be the cidr flannel publishes")


def test_a_pod_cidr_of_another_size_than_subnet_len_names_the_mask_size():
    problem = pod_cidr_problem(Node.from_api(api_node("m1", [], ["10.1.2.0/25"])), NETWORKS,
                               ADVICE)
    assert problem.startswith("Node m1's pod CIDR 10.1.2.0/25 is not a /24 (subnet-len): "
                              "kube-controller-manager's node-cidr-mask-size must match: juju "
                              "config kubernetes-control-plane"), problem


def test_a_node_without_a_pod_cidr_of_a_family_flannel_serves_says_how_to_get_one():
    """A Node keeps the pod CIDRs it was first given: one registered before
    ipv6-cidr was set never gets an IPv6 one, and flanneld (dual-stack)
    would exit on it."""
    problem = pod_cidr_problem(Node.from_api(api_node("m1", [], ["10.1.7.0/24"])), NETWORKS,
                               ADVICE)
    assert problem == (
        "Node m1 has no IPv6 pod CIDR for ipv6-cidr fd10:1::/56: a Node keeps the pod CIDRs it "
        "was first given, so kube-controller-manager must allocate every family before it "
        f"registers ({ADVICE}); set ipv6-cidr back, or delete the Node and restart its kubelet")
    assert pod_cidr_problem(Node.from_api(api_node("m1", [], ["10.1.7.0/24"])), NETWORKS[:1],
                            ADVICE) is None


def test_a_dual_stack_node_under_ipv6_only_flannel_is_leased_its_ipv6_pod_cidr():
    """Such Nodes exist after a switch from dual-stack (a Node keeps its pod
    CIDRs): flanneld with EnableIPv4 false leases the IPv6 one and runs."""
    node = Node.from_api(api_node("m1", ["fd00::12"], ["10.1.1.0/24", "fd10:1:0:1::/64"]))
    assert pod_cidr_problem(node, NETWORKS[1:], allocation_advice(None, 64)) is None
    annotated = Node.from_api(api_node("m1", ["fd00::12"], ["10.1.1.0/24", "fd10:1:0:1::/64"], {
        PREFIX + "kube-subnet-manager": "true", PREFIX + "backend-type": "vxlan",
        PREFIX + "backend-v6-data": '{"VNI":1,"VtepMAC":"c2:d3:ec:43:70:af"}',
        PREFIX + "public-ipv6": "fd00::12"}))
    lease = lease_of(annotated)
    assert (lease.subnet, lease.ipv6_subnet, lease.public_ip) == (
        "fd10:1:0:1::/64", None, "fd00::12")


def test_the_families_flannel_serves_say_which_pod_cidrs_are_the_lease():
    """flanneld leaves the IPv4 annotations it wrote while dual-stack (and
    writes public-ip 0.0.0.0 for IPv6-only host-gw): keyed by them, an
    IPv6-only node's own lease read as lost at every update-status."""
    node = Node.from_api(api_node("m1", ["fd00::12"], ["10.1.1.0/24", "fd10:1:0:1::/64"], {
        PREFIX + "kube-subnet-manager": "true", PREFIX + "backend-type": "host-gw",
        PREFIX + "public-ip": "0.0.0.0", PREFIX + "public-ipv6": "fd00::12"}))
    assert lease_of(node).subnet == "fd10:1:0:1::/64"
    stale = Node.from_api(api_node("m1", ["fd00::12"], ["10.1.1.0/24", "fd10:1:0:1::/64"], {
        PREFIX + "kube-subnet-manager": "true", PREFIX + "public-ip": "172.31.254.12",
        PREFIX + "public-ipv6": "fd00::12"}))
    assert lease_of(stale, {6}).subnet == "fd10:1:0:1::/64"
    assert lease_of(stale, {4, 6}).subnet == "10.1.1.0/24"
    assert lease_of(stale, {4, 6}).ipv6_subnet == "fd10:1:0:1::/64"


def test_pod_cidrs_inside_flannel_s_networks_are_leased_as_they_are():
    node = Node.from_api(api_node("m1", [], ["10.1.7.0/24", "fd10:1:0:7::/64"]))
    assert pod_cidr_problem(node, NETWORKS, ADVICE) is None


# -- root's kubeconfig ------------------------------------------------------------------

def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_the_principal_s_kubeconfig_gives_a_token_and_the_ca_as_data():
    """What charm-lib-kubernetes-snaps' create_kubeconfig writes."""
    access = read_kubeconfig(f"""
apiVersion: v1
clusters:
- cluster: {{certificate-authority-data: {b64(b"CA PEM")}, server: 'https://10.0.0.2:6443'}}
  name: juju-cluster
contexts:
- context: {{cluster: juju-cluster, user: root}}
  name: juju-context
current-context: juju-context
kind: Config
preferences: {{}}
users:
- name: root
  user: {{token: secret-token}}
""")
    assert (access.host, access.port, access.ca, access.token, access.cert) == (
        "10.0.0.2", 6443, b"CA PEM", "secret-token", None)


def test_a_kubeconfig_s_client_certificate_may_be_files(tmp_path):
    (tmp_path / "c.crt").write_bytes(b"CERT")
    (tmp_path / "c.key").write_bytes(b"KEY")
    crt, key = tmp_path / "c.crt", tmp_path / "c.key"
    access = read_kubeconfig(f"""
clusters: [{{name: k, cluster: {{server: 'https://[fd00::2]', certificate-authority: {crt}}}}}]
users: [{{name: u, user: {{client-certificate: {crt}, client-key: {key}}}}}]
contexts: [{{name: x, context: {{cluster: k, user: u}}}}]
current-context: x
""")
    assert (access.host, access.port, access.cert, access.key) == ("fd00::2", 443, b"CERT",
                                                                   b"KEY")


def kubeconfig(cluster: str = "{server: 'https://10.0.0.2'}", user: str = "{token: t}",
               current: str = "current-context: x\n") -> str:
    return (f"clusters: [{{name: k, cluster: {cluster}}}]\n"
            f"users: [{{name: u, user: {user}}}]\n"
            f"contexts: [{{name: x, context: {{cluster: k, user: u}}}}]\n{current}")


@pytest.mark.parametrize("text, reason", [
    ("{", "the kubeconfig cannot be read (not YAML"),
    ("clusters: []", "the kubeconfig has no current-context"),
    # client-go takes no first context: "no configuration has been provided"
    (kubeconfig(current=""), "the kubeconfig has no current-context"),
    (kubeconfig(current="current-context: y\n"), "the kubeconfig has no context named 'y'"),
    (kubeconfig(cluster="{server: 'http://10.0.0.2:8080'}"),
     "the kubeconfig's clusters[].cluster.server 'http://10.0.0.2:8080' is not an https "
     "address"),
    (kubeconfig(cluster="{server: '10.0.0.2:6443'}"),
     "the kubeconfig's clusters[].cluster.server '10.0.0.2:6443' is not an https address"),
    (kubeconfig(cluster="{server: 'https://10.0.0.2:api'}"),
     "the kubeconfig's clusters[].cluster.server 'https://10.0.0.2:api' is not an https"),
    # (a broken IPv6 literal: an UnboundLocalError escaped into every hook)
    (kubeconfig(cluster="{server: 'https://[fd00::1:6443'}"),
     "the kubeconfig's clusters[].cluster.server 'https://[fd00::1:6443' is not an https"),
    (kubeconfig(user="{}"), "the kubeconfig gives neither a token nor a client certificate"),
    (kubeconfig(cluster="'https://10.0.0.2'"), "the kubeconfig's cluster 'k' is not a mapping"),
    (kubeconfig(user="[t]"), "the kubeconfig's user 'u' is not a mapping"),
    (kubeconfig(user="{exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}}"),
     "the kubeconfig's users[].user.exec cannot be used: a credential plugin cannot run"),
    (kubeconfig(user="{auth-provider: {name: oidc}}"),
     "the kubeconfig's users[].user.auth-provider cannot be used"),
    (kubeconfig(user="{username: admin, password: secret}"),
     "the kubeconfig's users[].user.username is not supported"),
    (kubeconfig(user="{client-certificate-data: Q0VSVA==}"),
     "the kubeconfig's users[].user has a client-certificate without its client-key"),
    (kubeconfig(cluster="{server: 'https://10.0.0.2', certificate-authority-data: Q0E=, "
                        "insecure-skip-tls-verify: true}"),
     "the kubeconfig sets clusters[].cluster.insecure-skip-tls-verify and a "
     "certificate-authority"),
    (kubeconfig(cluster="{server: 'https://10.0.0.2', certificate-authority-data: Q0E=, "
                        "certificate-authority: /ca.pem}"),
     "the kubeconfig gives both clusters[].cluster.certificate-authority and "
     "certificate-authority-data"),
    (kubeconfig(cluster="{server: 'https://10.0.0.2', proxy-url: 'http://proxy:3128'}"),
     "the kubeconfig's clusters[].cluster.proxy-url is not supported"),
    (kubeconfig(user="{tokenFile: /nonexistent/token}"),
     "the kubeconfig's users[].user.tokenFile cannot be read (No such file or directory"),
    (kubeconfig(user="{token: \"secret-token\\n\"}"),
     "the kubeconfig's users[].user.token is not one line of printable ASCII"),
    # (a YAML timestamp out of range: a ValueError escaped into every hook)
    ("current-context: 2024-13-45\n", "the kubeconfig cannot be read (ValueError)"),
])
def test_a_kubeconfig_the_charm_cannot_use_says_why(text, reason):
    with pytest.raises(KubeRefused) as error:
        read_kubeconfig(text)
    assert error.value.reason.startswith(reason), error.value.reason


def test_a_kubeconfig_is_read_as_flanneld_s_client_go_reads_it(tmp_path):
    """Relative paths from the kubeconfig's directory, tokenFile preferred to
    token (and stripped), the server's path kept for every request, an
    IPv6 server, tls-server-name, insecure-skip-tls-verify."""
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.pem").write_bytes(b"CA")
    (tmp_path / "token").write_text("file-token\n")
    access = read_kubeconfig(kubeconfig(
        cluster="{server: 'https://[fd00::2]:6443/k8s/clusters/c-xyz/', "
                "certificate-authority: pki/ca.pem, tls-server-name: kubernetes}",
        user="{token: inline, tokenFile: token}"), str(tmp_path))
    assert (access.host, access.port, access.path_prefix, access.ca, access.token,
            access.server_name, access.verify) == (
        "fd00::2", 6443, "/k8s/clusters/c-xyz", b"CA", "file-token", "kubernetes", True)
    assert access.server == "[fd00::2]:6443/k8s/clusters/c-xyz"
    wrapped = read_kubeconfig(kubeconfig(
        cluster="{server: 'https://10.0.0.2', certificate-authority-data: \"Q0\\nE=\"}"))
    assert wrapped.ca == b"CA"   # (base64 over lines, as Go decodes it)
    insecure = read_kubeconfig(kubeconfig(
        cluster="{server: 'https://10.0.0.2', insecure-skip-tls-verify: true}"))
    assert (insecure.verify, insecure.ca, insecure.port) == (False, None, 443)


@pytest.mark.parametrize("text", [
    "", "[]", "42", "current-context: [a, b]\n", "contexts: {a: b}\ncurrent-context: a\n",
    "contexts: [1, 2]\ncurrent-context: a\n", "!!python/object:os.system {}",
    "contexts: [{name: a, context: [x]}]\ncurrent-context: a\n",
    "clusters: [{name: k, cluster: {server: !!binary AAAA}}]\n" + "current-context: x\n",
    "\x00\xff", "users: &a [*a]\n",
])
def test_whatever_a_kubeconfig_holds_reading_it_raises_only_a_reason(text):
    """Every hook reads it (config-changed, update-status, stop): nothing in
    it may end a hook with a traceback."""
    with pytest.raises(KubeRefused):
        read_kubeconfig(text)


def test_a_kubeconfig_that_is_not_yaml_is_named_without_quoting_it():
    """The YAML error would quote the line it broke on: a token there must
    not reach the status or the log."""
    with pytest.raises(KubeUnavailable) as error:
        read_kubeconfig("users:\n- name: u\n  user: {token: s3cret-token: x}\n")
    assert "s3cret" not in error.value.reason
    assert error.value.reason.startswith("the kubeconfig cannot be read (not YAML at line 3")


def test_a_kubeconfig_whose_certificates_do_not_load_says_why(tmp_path):
    """Garbage where the CA or key should be is a reason, not a traceback."""
    from charms.flannel.adapters.kube_api import KubeApi
    ca = b64(b"not a PEM")
    text = f"""
clusters: [{{name: k, cluster: {{server: 'https://10.0.0.2', certificate-authority-data: {ca}}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: k, user: u}}}}]
current-context: x
"""
    with pytest.raises(KubeUnavailable) as error:
        KubeApi(read_kubeconfig(text))
    assert error.value.reason.startswith("the kubeconfig's CA or client certificate cannot be "
                                         "loaded")
    with pytest.raises(KubeUnavailable) as error:
        read_kubeconfig(text.replace(ca, "abc"))   # (not base64: bad padding)
    assert error.value.reason.startswith(
        "the kubeconfig's clusters[].cluster.certificate-authority-data is not base64")
