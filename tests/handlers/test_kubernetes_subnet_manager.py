"""subnet-manager=kubernetes, hook by hook, up to the Kubernetes API: no
etcd needed, the principal's kubeconfig waited for, the principal told of
the network before flanneld runs (its kube-controller-manager allocates
the pod CIDRs flanneld leases), and an API that does not answer is a
waiting status with flanneld not started. Against a real API server:
tests/functional/test_kubernetes_sees_the_overlay.py."""
import socket

from harness import configure


def kube_mode(unit) -> str:
    unit.juju.config["subnet-manager"] = "kubernetes"
    unit.hook("install")
    cni = unit.relate_cni()
    unit.hook("cni-relation-changed", cni, "kubernetes-worker/0")
    return cni


def test_without_etcd_the_unit_waits_for_the_principal_s_kubeconfig(unit):
    cni = kube_mode(unit)
    assert unit.status == ("waiting", "Waiting for the principal's kubeconfig "
                                      "(/root/.kube/config) for subnet-manager=kubernetes.")
    assert "flannel.leases.reachable" not in unit.flags
    # the network and the CNI config reach the principal before flanneld runs
    assert unit.juju.relations[cni].local == {"cidr": "10.1.0.0/16",
                                              "cni-conf-file": "10-flannel.conflist"}
    assert unit.machine.started() == 0
    assert not unit.paths.etcd_tls_dir.exists()


def test_an_api_server_that_does_not_answer_is_waited_for_with_flanneld_stopped(unit):
    with socket.socket() as closed:   # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    kube_mode(unit)
    unit.paths.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    unit.paths.kubeconfig.write_text(
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\ncurrent-context: c\n")
    configure(unit)   # (any hook)
    state, message = unit.status
    assert state == "waiting", unit.status
    assert message.startswith(f"Cannot reach the Kubernetes API: the API server at "
                              f"127.0.0.1:{port} did not answer"), message
    assert "flannel.leases.reachable" in unit.flags
    assert "flannel.network.configured" not in unit.flags
    assert unit.machine.started() == 0
    assert not unit.paths.net_conf.exists()
