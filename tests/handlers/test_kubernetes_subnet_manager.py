"""subnet-manager=kubernetes, hook by hook, up to the Kubernetes API: no
etcd needed, the principal's kubeconfig waited for, the principal told of
the network before flanneld runs (its kube-controller-manager allocates
the pod CIDRs flanneld leases), and an API that does not answer is a
waiting status with flanneld not started. Against a real API server:
tests/functional/test_kubernetes_sees_the_overlay.py."""
import json
import socket

import pytest
from harness import ADDRESS, KUBE_ANNOTATION, NETWORK, configure, deployed

# (on a cold cache the first test waits for setup-host's build of kube-apiserver)
pytestmark = pytest.mark.timeout(1500)


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


# --- against a real API server (sandbox.api_server) -----------------------------------------

def on_kubernetes(unit, api, **node) -> str:
    """A unit deployed on the Kubernetes API, flanneld on its Node's lease."""
    unit.on_the_api(api, **node)
    cni = kube_mode(unit)
    assert unit.status[0] == "active", unit.status
    return cni


def annotations(api, node: str = "m1") -> dict:
    return {key: value for key, value in
            (api.nodes()[node]["metadata"].get("annotations") or {}).items()
            if key.startswith(KUBE_ANNOTATION)}


def later(unit, seconds: float = 60) -> None:
    """Time passes: flanneld is past its restart grace."""
    unit.now += seconds


def test_a_node_deleted_and_registered_again_gets_flanneld_back_on_it(unit, fresh_api):
    """`kubectl delete node m1` and a kubelet restart: flanneld's annotations
    are gone (the other nodes drop their routes to m1), kube-controller-manager
    gives the Node a new pod CIDR, and flanneld, which annotates only as it
    starts, runs on. update-status notices and restarts it."""
    on_kubernetes(unit, fresh_api)
    assert unit.status == ("active", "Flannel subnet 10.1.1.1/24")
    assert annotations(fresh_api)[KUBE_ANNOTATION + "kube-subnet-manager"] == "true"
    unit.machine.bridge("10.1.1.1/24", ports=1)   # a pod runs here
    started = unit.machine.started()
    fresh_api.delete_node("m1")
    later(unit)
    unit.hook("update-status")
    assert unit.status == ("waiting", "Node m1 is gone from the Kubernetes API: waiting for its "
                                      "kubelet to register it again")
    assert unit.machine.started() == started
    fresh_api.node("m1", [ADDRESS], ["10.1.2.0/24"])   # registered again, a new pod CIDR
    unit.machine.on_start = lambda: None   # (flanneld leases a moment after it starts)
    unit.hook("update-status")
    assert unit.machine.started() == started + 1
    # the old lease's gateway is off cni0 already: the first new pod gets the new one
    assert unit.machine.links["cni0"].addresses == [] and not unit.paths.subnet_env.exists()
    assert "Node m1's pod CIDR is 10.1.2.0/24, not the 10.1.1.0/24 flanneld runs on" in unit.log
    unit._fake_flanneld()   # flanneld done starting: its Node annotated, subnet.env written
    unit.hook("update-status")
    assert annotations(fresh_api)[KUBE_ANNOTATION + "public-ip"] == ADDRESS
    assert unit.status == ("active", "Flannel subnet 10.1.2.1/24")
    assert unit.machine.started() == started + 1


def test_the_switch_from_etcd_takes_the_old_gateway_off_cni0_at_once(unit, fresh_api):
    """flanneld leases on the API a moment after it starts: the old lease's
    gateway must be off cni0 by then, or the bridge plugin refuses every
    new pod until a later hook takes it off (up to five minutes)."""
    deployed(unit)
    unit.machine.bridge("10.1.52.1/24", ports=1)
    unit.on_the_api(fresh_api)
    unit.machine.on_start = lambda: None   # (not leased by the end of this hook)
    configure(unit, subnet_manager="kubernetes")
    assert "10.1.52.1/24" not in unit.machine.links["cni0"].addresses
    assert not unit.paths.subnet_env.exists() and not unit.paths.etcd_tls_dir.exists()
    assert "flannel.service.running" in unit.flags


def test_while_a_switch_waits_flanneld_runs_on_etcd_and_is_supervised_there(unit, fresh_api):
    """Blocked on a Node without a pod CIDR: flanneld runs on etcd, an etcd
    rebuilt empty gets its network back, a lost lease restarts flanneld (on
    etcd), and the actions read etcd's leases."""
    deployed(unit)
    unit.on_the_api(fresh_api, pod_cidrs=())
    configure(unit, subnet_manager="kubernetes")
    state, message = unit.status
    assert state == "blocked" and message.startswith("Node m1 has no pod CIDR"), unit.status
    assert "flannel.service.running" in unit.flags
    assert "-etcd-endpoints=" in unit.paths.service_file.read_text()
    started = unit.machine.started()
    unit.etcd().delete_prefix(NETWORK)   # etcd rebuilt empty
    later(unit)
    unit.hook("update-status")
    assert json.loads(unit.etcd_values()[f"{NETWORK}/config"])["Network"] == "10.1.0.0/16"
    assert unit.machine.started() == started + 1   # on etcd, which leases again
    assert f"{NETWORK}/subnets/10.1.52.0-24" in unit.etcd_values()
    assert "-etcd-endpoints=" in unit.paths.service_file.read_text()
    assert unit.status[1].startswith("Node m1 has no pod CIDR"), unit.status


def test_a_backend_change_is_refused_while_nodes_hold_leases_on_the_api(unit, fresh_api):
    """config.yaml promises it: nodes on different backends cannot reach
    each other, and units change one by one."""
    on_kubernetes(unit, fresh_api)
    fresh_api.node("m2", ["172.31.254.12"], ["10.1.2.0/24"], annotations={
        KUBE_ANNOTATION + "kube-subnet-manager": "true",
        KUBE_ANNOTATION + "backend-type": "vxlan", KUBE_ANNOTATION + "public-ip": "172.31.254.12"})
    started = unit.machine.started()
    configure(unit, backend="host-gw")
    assert unit.status == ("blocked", (
        "Invalid backend: cannot change from vxlan to host-gw while 2 nodes hold leases; set "
        "backend back to vxlan, or remove flannel from every node (each unit releases its "
        "lease as it stops) and add it back"))
    assert json.loads(unit.paths.net_conf.read_text())["Backend"]["Type"] == "vxlan"
    assert unit.machine.started() == started
    configure(unit, backend="vxlan")
    assert unit.status == ("active", "Flannel subnet 10.1.1.1/24")


def test_a_user_the_api_refuses_blocks_naming_what_flanneld_needs(unit, fresh_api):
    """A 403 is no API that is away: it stays until someone grants it."""
    unit.on_the_api(fresh_api, user="nobody")
    kube_mode(unit)
    assert unit.status == ("blocked", (
        "Cannot use the Kubernetes API: the Kubernetes API refuses the kubeconfig's user GET "
        "/api/v1/nodes (403 Forbidden: nodes is forbidden: User \"nobody\" cannot list "
        "resource \"nodes\" in API group \"\" at the cluster scope); flanneld needs get, list "
        "and watch on nodes, and patch on nodes/status"))
    assert unit.machine.started() == 0
    unit.paths.kubeconfig.write_text(fresh_api.kubeconfig("admin"))   # granted
    unit.hook("config-changed")
    assert unit.status == ("active", "Flannel subnet 10.1.1.1/24")


def test_a_kubeconfig_flanneld_cannot_use_blocks_naming_the_field(unit, fresh_api):
    unit.on_the_api(fresh_api)
    unit.paths.kubeconfig.write_text(fresh_api.kubeconfig(
        user_entry="exec: {command: aws-iam-authenticator, apiVersion: "
                   "client.authentication.k8s.io/v1beta1}"))
    kube_mode(unit)
    state, message = unit.status
    assert state == "blocked" and message.startswith(
        "Cannot use the Kubernetes API: the kubeconfig's users[].user.exec cannot be used"), \
        unit.status


def test_a_fixed_service_cidr_no_longer_hides_that_the_api_is_away(unit, fresh_api):
    """Every problem of the network step is worked out afresh: one recorded
    before (the cidr over the service-cidr, a Node without a pod CIDR) does
    not stay in front of the reason the unit waits now."""
    unit.on_the_api(fresh_api)
    unit.juju.config["subnet-manager"] = "kubernetes"
    unit.hook("install")
    cni = unit.relate_cni("kubernetes-control-plane", **{"service-cidr": "10.1.0.0/24"})
    unit.hook("cni-relation-changed", cni, "kubernetes-control-plane/0")
    assert unit.status == ("blocked", "Invalid cidr: 10.1.0.0/16 overlaps the Kubernetes "
                                      "service-cidr 10.1.0.0/24 the control plane publishes; "
                                      "use a range outside it")
    unanswered_kubeconfig(unit)
    configure(unit, cidr="10.2.0.0/16")
    state, message = unit.status
    assert state == "waiting" and message.startswith("Cannot reach the Kubernetes API"), \
        unit.status


def test_a_node_s_missing_pod_cidr_no_longer_hides_that_the_api_is_away(unit, fresh_api):
    unit.on_the_api(fresh_api, pod_cidrs=())
    kube_mode(unit)
    assert unit.status[1].startswith("Node m1 has no pod CIDR"), unit.status
    unanswered_kubeconfig(unit)
    unit.hook("config-changed")
    state, message = unit.status
    assert state == "waiting" and message.startswith("Cannot reach the Kubernetes API"), \
        unit.status


def test_back_to_etcd_with_a_kubeconfig_that_does_not_parse(unit, fresh_api, etcd_tls):
    """A YAML date out of range in the kubeconfig ended every hook with a
    ValueError, and the switch back to etcd left flanneld stopped."""
    on_kubernetes(unit, fresh_api)
    unit.paths.kubeconfig.write_text("current-context: 2024-13-45\n")
    unit.flanneld_leases()
    etcd = unit.relate_etcd()
    unit.hook("etcd-relation-changed", etcd, "etcd/0")
    configure(unit, subnet_manager="etcd")
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")
    assert "-etcd-endpoints=" in unit.paths.service_file.read_text()
    assert "Could not take flanneld's annotations off this machine's Node: the kubeconfig " \
           "cannot be read (ValueError)" in unit.log


def test_flanneld_moving_to_another_interface_on_the_api_asks_nothing_of_etcd(unit, fresh_api):
    """The lease is the Node's pod CIDR, whatever flanneld's address: an
    etcd relation left over has nothing to give back (it timed out, and
    warned, on an etcd away)."""
    from fake_machine import Link
    on_kubernetes(unit, fresh_api)
    etcd = unit.relate_etcd("https://127.0.0.1:9")
    unit.hook("etcd-relation-changed", etcd, "etcd/0")
    unit.machine.links["eth1"] = Link("eth1", addresses=["172.31.253.11/24"])
    configure(unit, iface="eth1")
    assert "-iface=eth1" in unit.paths.service_file.read_text()
    assert "give the lease" not in unit.log and "gave the lease" not in unit.log
    assert unit.status[0] == "active", unit.status


def test_a_deleted_flannel_v6_device_is_mended_at_the_next_update_status(unit):
    """flanneld v0.28.10 watches flannel.<VNI> alone: a deleted
    flannel-v6.<VNI> stayed gone, and IPv6 pod traffic with it."""
    deployed(unit)
    unit.machine.links["eth0"].addresses.append("fd00::11/64")
    configure(unit, ipv6_cidr="fd10:1::/56")
    assert "flannel-v6.1" in unit.machine.links
    started = unit.machine.started()
    del unit.machine.links["flannel-v6.1"]
    (unit.paths.sys_class_net / "flannel-v6.1").rmdir()
    unit.hook("update-status")   # (within its grace: flanneld may still be making it)
    assert unit.machine.started() == started
    later(unit)
    unit.hook("update-status")
    assert unit.machine.started() == started + 1
    assert "flannel-v6.1" in unit.machine.links
    assert "flanneld's flannel-v6.1 is gone (flanneld makes it only as it starts): " \
           "restarting flanneld" in unit.log


def test_no_byte_of_the_etcd_client_key_is_left_once_the_relation_is_gone(unit, fresh_api):
    """etcd mode, then subnet-manager=kubernetes, then `juju remove-relation
    flannel etcd`: /etc/ssl/flannel went, but charms.reactive kept the
    departed etcd unit's whole databag, the key among it, in the unit's
    .unit-state.db (for whoever reads a backup of /var/lib/juju). Every
    file the unit has is searched for one line of the key's PEM body."""
    etcd, _ = deployed(unit)
    key_line = unit.pki.client_key.read_text().splitlines()[1].encode()
    assert unit.files_holding(key_line) == [str(unit.paths.etcd_key)]
    unit.on_the_api(fresh_api)
    configure(unit, subnet_manager="kubernetes")
    assert unit.status[0] == "active", unit.status
    assert unit.files_holding(key_line) == []   # (the relation is still there)
    unit.unrelate(etcd)
    unit.hook("update-status")
    assert unit.files_holding(key_line) == []
    assert unit.status[0] == "active", unit.status


def test_a_switch_that_flanneld_could_not_start_after_is_not_made(unit, fresh_api):
    """The switch stops flanneld and gives its lease up: with what flanneld
    needs to start again in the new mode missing (nft, asked for in the
    same change), it would have stayed stopped. The unit is blocked naming
    it, and flanneld runs on, on etcd."""
    deployed(unit)
    unit.on_the_api(fresh_api)
    unit.machine.missing.add("nft")
    stops = sum(1 for call in unit.machine.calls if call[:3] == ["systemctl", "stop", "flannel"])
    configure(unit, subnet_manager="kubernetes", enable_nftables=True)
    state, message = unit.status
    assert state == "blocked" and message.startswith("enable-nftables needs nft"), unit.status
    assert sum(1 for call in unit.machine.calls
               if call[:3] == ["systemctl", "stop", "flannel"]) == stops
    assert "-etcd-endpoints=" in unit.paths.service_file.read_text()
    assert unit.paths.etcd_tls_dir.exists() and unit.paths.subnet_env.exists()
    unit.machine.missing.discard("nft")   # installed: the next hook switches
    unit.hook("update-status")
    assert unit.status == ("active", "Flannel subnet 10.1.1.1/24")
    assert "-kube-subnet-mgr" in unit.paths.service_file.read_text()
