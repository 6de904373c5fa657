"""subnet-manager=kubernetes, hook by hook, up to the Kubernetes API: no
etcd needed, the principal's kubeconfig waited for, the principal told of
the network before flanneld runs (its kube-controller-manager allocates
the pod CIDRs flanneld leases), and an API that does not answer is a
waiting status with flanneld not started. Against a real API server:
tests/functional/test_kubernetes_sees_the_overlay.py."""
import socket

from harness import configure, deployed


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
    kube_mode(unit)
    unanswered_kubeconfig(unit)
    configure(unit)   # (any hook)
    state, message = unit.status
    assert state == "waiting", unit.status
    assert message.startswith("Cannot reach the Kubernetes API: the API server at "
                              "127.0.0.1:"), message
    assert "did not answer" in message, message
    assert "flannel.leases.reachable" in unit.flags
    assert "flannel.network.configured" not in unit.flags
    assert unit.machine.started() == 0
    assert not unit.paths.net_conf.exists()


def unanswered_kubeconfig(unit) -> None:
    """Root's kubeconfig, naming an API server that does not answer."""
    with socket.socket() as closed:   # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    unit.paths.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    unit.paths.kubeconfig.write_text(
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\ncurrent-context: c\n")


def test_a_unit_leaves_etcd_only_once_the_kubernetes_api_serves_its_node(unit):
    """A unit configured in etcd mode (by this revision, or by one before
    subnet-manager existed) set to kubernetes while the API does not
    answer: flanneld runs on in etcd mode, its lease, the etcd client files
    and subnet.env stay, and the unit waits for the API. (The switch itself,
    against a real API server: tests/functional/test_kubernetes_sees_the_overlay.py.)"""
    from charmhelpers.core import unitdata
    deployed(unit)
    before = unit.etcd_values()
    assert any("/subnets/" in key for key in before)
    kv = unitdata.Storage(str(unit.db))
    kv.unset("flannel.subnet-manager")   # (what a unit of the revision before has)
    kv.flush()
    kv.close()
    unanswered_kubeconfig(unit)
    stops = sum(1 for call in unit.machine.calls if call[:3] == ["systemctl", "stop", "flannel"])
    configure(unit, subnet_manager="kubernetes")
    state, message = unit.status
    assert state == "waiting" and message.startswith("Cannot reach the Kubernetes API"), \
        unit.status
    assert unit.etcd_values() == before
    assert unit.paths.etcd_tls_dir.exists() and unit.paths.subnet_env.exists()
    assert sum(1 for call in unit.machine.calls
               if call[:3] == ["systemctl", "stop", "flannel"]) == stops


def test_back_to_etcd_the_kubernetes_api_s_problem_is_no_longer_shown(unit):
    """A problem only kubernetes mode finds (recorded between hooks) goes
    with the mode: set back to etcd, the unit is active again."""
    deployed(unit)
    unanswered_kubeconfig(unit)
    configure(unit, subnet_manager="kubernetes")
    assert unit.status[1].startswith("Cannot reach the Kubernetes API"), unit.status
    configure(unit, subnet_manager="etcd")
    assert unit.status[0] == "active", unit.status
    assert unit.status[1].startswith("Flannel subnet 10.1."), unit.status
