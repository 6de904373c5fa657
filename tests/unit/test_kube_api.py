"""The Kubernetes API as the charm asks it (adapters/kube_api.py), against a
real kube-apiserver v1.37 on loopback (sandbox/api_server.py): a kubeconfig
read as flanneld's client-go reads it works where client-go works, and
what cannot work is refused naming the field, never taken for an API that
is away. And every lease, where flanneld runs (steps/subnets)."""
from __future__ import annotations

import base64

import pytest
import stepkit

from charms.flannel.adapters.kube_api import KubeApi, read_kubeconfig
from charms.flannel.facts.kube_nodes import KubeRefused
from charms.flannel.steps import subnets
from charms.flannel.steps.context import EtcdRelation
from sandbox.api_server import TOKEN, ApiServer

# (on a cold cache the first test waits for setup-host's build of kube-apiserver)
pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def api(etcd, pki, tmp_path_factory):
    with ApiServer(tmp_path_factory.mktemp("kube-apiserver"), pki, etcd) as started:
        if "m1" not in started.nodes():
            started.node("m1", ["172.31.254.11"], ["10.1.1.0/24"])
        yield started


def names(text: str, directory: str = "/") -> list[str]:
    with KubeApi(read_kubeconfig(text, directory)) as api:
        return [node.name for node in api.nodes()]


def ca_data(api) -> str:
    return base64.b64encode(api.pki.ca_cert.read_bytes()).decode()


def test_a_token_file_and_a_ca_file_relative_to_the_kubeconfig(api, tmp_path):
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(api.pki.ca_cert.read_bytes())
    (tmp_path / "token").write_text(f"{TOKEN}\n")
    text = api.kubeconfig(cluster=f"server: '{api.url}', certificate-authority: pki/ca.crt",
                          user_entry="token: revoked, tokenFile: token")
    assert names(text, str(tmp_path)) == ["m1"]


def test_tls_server_name_is_the_name_the_certificate_is_checked_against(api):
    """The API server's certificate names 127.0.0.1 and `kubernetes`: reached
    as localhost it fails unless tls-server-name says which name to expect."""
    server = f"https://localhost:{api.port}"
    without = api.kubeconfig(cluster=f"server: '{server}', certificate-authority-data: "
                                     f"{ca_data(api)}")
    with pytest.raises(KubeRefused) as error:   # (no retry mends it: blocked, not waiting)
        names(without)
    assert error.value.reason.startswith(
        f"the API server at localhost:{api.port} is not the one the kubeconfig trusts ("), \
        error.value.reason
    assert "match" in error.value.reason
    assert names(without.replace("server: ", "tls-server-name: kubernetes, server: ")) == ["m1"]


def test_insecure_skip_tls_verify_asks_the_server_unchecked(api):
    text = api.kubeconfig(cluster=f"server: '{api.url}', insecure-skip-tls-verify: true")
    assert names(text) == ["m1"]
    with pytest.raises(KubeRefused):   # (and without it, no CA: the system's CAs)
        names(api.kubeconfig(cluster=f"server: '{api.url}'"))


def test_a_server_url_with_a_path_is_asked_below_it_and_404_is_no_api(api):
    """A proxy (Rancher's /k8s/clusters/<id>) serves the API below a path:
    the path was dropped, and a 404 read as "no Nodes"."""
    text = api.kubeconfig(server=f"{api.url}/k8s/clusters/c-xyz")
    with pytest.raises(KubeRefused) as error:
        names(text)
    assert error.value.reason == (
        f"the kubeconfig's server https://127.0.0.1:{api.port}/k8s/clusters/c-xyz serves no "
        "Kubernetes API (GET /k8s/clusters/c-xyz/api/v1/nodes: 404)")


def test_a_user_without_the_permission_is_refused_naming_what_flanneld_needs(api):
    with pytest.raises(KubeRefused) as error:
        names(api.kubeconfig("nobody"))
    assert error.value.status == 403
    assert error.value.reason.endswith(
        "flanneld needs get, list and watch on nodes, and patch on nodes/status")


def test_a_token_the_api_does_not_know_is_refused(api):
    with pytest.raises(KubeRefused) as error:
        names(api.kubeconfig(user_entry="token: not-a-token"))
    assert error.value.status == 401
    assert error.value.reason.startswith("the Kubernetes API does not accept the kubeconfig's "
                                         "credentials (401 Unauthorized")


def test_while_a_switch_to_the_api_waits_the_actions_read_etcd(api, etcd, pki, tmp_path,
                                                               flannels_prefix):
    """flanneld runs on etcd until the switch happens: its leases are
    etcd's, and a lease found gone is gone from etcd."""
    relation = EtcdRelation(etcd.connection_string, pki.ca_cert.read_text(),
                            pki.client_cert.read_text(), pki.client_key.read_text())
    ctx = stepkit.context(tmp_path, config={"subnet-manager": "kubernetes"}, etcd=relation)
    from charms.flannel.adapters.credentials import write_client_credentials
    write_client_credentials(ctx.record, ctx.paths, relation.ca, relation.cert, relation.key)
    ctx.state.subnet_manager, ctx.state.etcd_endpoints = "etcd", etcd.connection_string
    ctx.paths.kubeconfig.parent.mkdir(parents=True)
    ctx.paths.kubeconfig.write_text(api.kubeconfig())
    with ctx.etcd_store(etcd.connection_string) as store:
        store.create_lease("10.1.52.0-24", b'{"PublicIP": "172.31.254.11"}', 600)
    [(lease, ttl)] = subnets.leases_of(ctx).lifetimes
    assert lease.subnet == "10.1.52.0/24" and 0 < ttl <= 600
    assert subnets.lease_home(ctx) == "etcd"
    ctx.state.subnet_manager = "kubernetes"   # once it happened: the Nodes
    assert [lease.key for lease, _ in subnets.leases_of(ctx).lifetimes] == []   # unannotated
    assert subnets.lease_home(ctx) == "its Node's annotations"
