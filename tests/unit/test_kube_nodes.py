"""Nodes as flanneld's kube subnet manager sees them, and root's kubeconfig
read the two ways Charmed Kubernetes' principals and the sandbox write it
(a token and the CA as data; client certificates as files or data)."""
import base64
import ipaddress

import pytest

from charms.flannel.adapters.kube_api import read_kubeconfig
from charms.flannel.facts.kube_nodes import (KubeUnavailable, Node, allocation_advice,
                                             lease_of, node_of, pod_cidr_problem)

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


@pytest.mark.parametrize("text, reason", [
    ("{", "the kubeconfig cannot be read"),
    ("clusters: []", "the kubeconfig cannot be read"),
    ("""clusters: [{name: k, cluster: {server: 'http://10.0.0.2:8080'}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: k, user: u}}]""",
     "the kubeconfig's server 'http://10.0.0.2:8080' is not an https address"),
    ("""clusters: [{name: k, cluster: {server: 'https://10.0.0.2'}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: k, user: u}}]""",
     "the kubeconfig gives neither a token nor a client certificate"),
    ("""clusters: [{name: k, cluster: 'https://10.0.0.2'}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: k, user: u}}]""",
     "the kubeconfig cannot be read (no cluster mapping in 'k')"),
    ("""clusters: [{name: k, cluster: {server: 'https://10.0.0.2'}}]
users: [{name: u, user: [t]}]
contexts: [{name: x, context: {cluster: k, user: u}}]""",
     "the kubeconfig cannot be read (no user mapping in 'u')"),
    ("""clusters: [{name: k, cluster: {server: 'https://10.0.0.2:api'}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: k, user: u}}]""",
     "the kubeconfig's server 'https://10.0.0.2:api' is not an https address"),
])
def test_a_kubeconfig_the_charm_cannot_use_says_why(text, reason):
    with pytest.raises(KubeUnavailable) as error:
        read_kubeconfig(text)
    assert error.value.reason.startswith(reason)


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
"""
    with pytest.raises(KubeUnavailable) as error:
        KubeApi(read_kubeconfig(text))
    assert error.value.reason.startswith("the kubeconfig's CA or client certificate cannot be "
                                         "loaded")
    with pytest.raises(KubeUnavailable) as error:
        read_kubeconfig(text.replace(ca, "abc"))   # (not base64: bad padding)
    assert error.value.reason.startswith("the kubeconfig's certificates cannot be read")
