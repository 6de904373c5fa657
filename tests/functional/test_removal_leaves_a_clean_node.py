"""Removing flannel leaves each node as flannel found it (docs/explanation/
what-a-node-keeps.md): no iptables chain or jump, nor nft table, of
flanneld's, no route into the pod network, no vxlan device, no systemd unit
loaded or failed, no file; only what the pods still running use stays.

Each test guards a regression an operator met, or would:
- flanneld v0.27 cleans its iptables rules when it starts, not when it exits:
  a charm that left the cleanup to it left every node with FLANNEL-POSTRTG
  (masquerading the pod network), FLANNEL-FWD and their jumps after
  `remove-relation`, and with host-gw a route to the other node's pod subnet;
- Juju runs `stop` only for a unit that started: with all of the cleanup in
  `stop`, a unit removed between its install and its start (a quick remove
  after add, a failed start) kept flanneld and the plugin;
- moving to another CNI: with flannel's bridge left holding flannel's
  address, a next CNI that names its bridge cni0 (the bridge plugin's
  default) refused every pod (and on the reactive kubernetes-worker of 2020,
  its default link dangles until the next CNI charm publishes its conflist).
"""
from __future__ import annotations

import ipaddress
import json

import pytest
from functional_kit import charm_files_left, deploy_and_wait, plugin_bytes, plugin_differences

from sandbox.cluster import CNI_RELATION, ETCD_RELATION, FLANNEL
from sandbox.juju import EmulatedApp

# the single-node tests share one machine (fixture `node`), in this order:
# a removal before start, an edited unit file, then leaving flannel for good
pytestmark = [pytest.mark.functional, pytest.mark.xdist_group("removal_leaves_a_clean_node")]

POD_NETWORK = ipaddress.ip_network("10.1.0.0/16")


def flanneld_rules(cluster, machine: str) -> list[str]:
    out = cluster.machines[machine].run(["iptables-save"]).stdout
    return [line for line in out.splitlines() if "FLANNEL" in line]


def pod_network_routes(cluster, machine: str, *, bridge_too: bool = False) -> list[str]:
    routes = cluster.machines[machine].ip_json("-4", "route", "show")
    return [f"{r['dst']} dev {r.get('dev')}" for r in routes
            if r.get("dst", "default") != "default"
            and ipaddress.ip_network(r["dst"], strict=False).subnet_of(POD_NETWORK)
            and (bridge_too or r.get("dev") != "cni0")]


def nft_tables(cluster, machine: str) -> list[str]:
    out = cluster.machines[machine].run(["nft", "list", "tables"]).stdout
    return [line.strip() for line in out.splitlines() if "flannel" in line]


@pytest.fixture(scope="module")
def node(open_cluster):
    """One kubernetes-worker machine, flannel not yet deployed."""
    with open_cluster("removal, one node", workers=1) as cluster:
        yield cluster


def flannel_active(cluster) -> None:
    """flannel deployed, related and active on the node, from whatever a
    previous test of the module left: not deployed, or its cni relation gone."""
    if FLANNEL not in cluster.controller.model().data["applications"]:
        deploy_and_wait(cluster)
        return
    if not cluster.flannel_units():
        cluster.add_cni_relation()
    cluster.wait_for_flannel(timeout=120)


def test_host_gw_removal_takes_flanneld_rules_and_routes_from_every_node(open_cluster):
    """In nftables mode (enable-nftables): flanneld's tables flannel-ipv4 and
    flannel-ipv6 go with flannel, its routes too, and the node is as
    flannel found it, nft tables included (iptables mode's removal: every
    other removal in the suite). A charm that knew only iptables left both
    tables on every node."""
    with open_cluster("removal, host-gw", workers=2) as cluster:
        deploy_and_wait(cluster, config={"backend": "host-gw", "enable-nftables": True})
        pods = {m: cluster.start_pod(m) for m in ("m1", "m2")}
        assert pods["m1"].ping(pods["m2"].address), "no pod traffic over host-gw"
        for m in ("m1", "m2"):   # what flanneld made, so that its going means something
            assert nft_tables(cluster, m) == ["table ip flannel-ipv4", "table ip6 flannel-ipv6"]
            assert pod_network_routes(cluster, m), f"{m}: no host-gw route to the other node"
        cluster.remove_cni_relation()
        for m in ("m1", "m2"):
            assert nft_tables(cluster, m) == [], f"{m}: flanneld's nft tables stayed"
            assert flanneld_rules(cluster, m) == [], f"{m}: flanneld's rules stayed"
            assert pod_network_routes(cluster, m) == [], f"{m}: host-gw routes stayed"
            assert cluster.flannel_leftovers(m) == [], f"{m}: flannel left these"
            # the running pod keeps its address and its bridge
            assert pods[m].address in pods[m].run(["ip", "-4", "addr"]).stdout


def test_a_unit_removed_between_install_and_start_gets_remove_alone_and_leaves_nothing(node):
    cluster = node
    before = {"m1": plugin_bytes(cluster, "m1")}
    machine = cluster.machines["m1"]
    controller = cluster.controller
    controller.deploy(FLANNEL, cluster.charm_dir,
                      resources={cluster.resource_name: cluster.resource})
    controller.add_relation(*ETCD_RELATION)
    controller.add_relation(*CNI_RELATION)
    controller.settle(stop_before=lambda e: e.get("hook") == "start"
                      and e["unit"].startswith(f"{FLANNEL}/"))
    (unit,) = cluster.flannel_units()
    assert "install" in controller.hooks(unit) and "start" not in controller.hooks(unit)
    assert machine.exists("/usr/local/bin/flanneld"), "install put no flanneld in place"
    cluster.remove_cni_relation()
    hooks = controller.hooks(unit)
    assert "stop" not in hooks and hooks[-1] == "remove", hooks   # Juju's rule
    assert cluster.flannel_units() == []
    left = charm_files_left(cluster, "m1")
    assert left == [], f"files of flannel's left after remove alone: {left}"
    assert cluster.flannel_leftovers("m1", pods_stay=False) == []
    assert plugin_differences(before, {"m1": plugin_bytes(cluster, "m1")}) == []


OTHER_CNI = {
    "cniVersion": "0.3.1", "name": "next-cni",
    "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.99.0.0/24"}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}}]}


class NextCni(EmulatedApp):
    """The CNI an operator moves to (Calico, Cilium), as a CNI charm
    behaves towards its principal: a subordinate on `cni` that writes its
    conflist on the machine and publishes `cidr` and `cni-conf-file`."""
    subordinate = True
    endpoints = {"cni": {"interface": "kubernetes-cni", "role": "requires",
                         "scope": "container"}}
    conf_file = "20-next.conflist"

    def __init__(self):
        super().__init__("next-cni")

    def on_install(self, ctx):
        ctx.run(["/bin/sh", "-c", 'cat > "$1"', "sh",
                 ctx.executor.machine_path(f"/etc/cni/net.d/{self.conf_file}")],
                input=json.dumps(OTHER_CNI).encode())

    def on_cni_relation_joined(self, ctx):
        ctx.relation_set(cidr="10.99.0.0/24", **{"cni-conf-file": self.conf_file})


UNIT_FILE = "/lib/systemd/system/flannel.service"


def test_a_unit_file_edited_since_is_rendered_again_and_never_put_back(node):
    """flannel.service is a file only this charm writes: a hook renders an
    edited one again, and stop removes it, edited or not. A charm whose hook
    skipped rendering it whenever its inputs were unchanged, whatever the
    file on disk said, and whose stop left an edited one behind (or kept it
    as an "original" to put back) failed this test: a disabled unit pointing
    at a flanneld that stop had just deleted."""
    cluster = node
    flannel_active(cluster)
    machine, unit = cluster.machines["m1"], cluster.unit_on("m1")
    ours = machine.read_file(UNIT_FILE)
    machine.write_file(UNIT_FILE, ours + b"# edited by hand\n")
    cluster.controller.fire(unit, "config-changed")
    cluster.settle()
    assert machine.read_file(UNIT_FILE) == ours, "the edited unit file was not rendered again"
    machine.write_file(UNIT_FILE, ours.replace(b" -ip-masq", b" -ip-masq -v=10"))
    cluster.remove_cni_relation()
    assert not machine.exists(UNIT_FILE), "an edited flannel.service stayed after removal"
    assert cluster.flannel_leftovers("m1") == []


def test_leaving_flannel_for_another_cni_leaves_no_trace_and_new_pods_work(node):
    """The path operators take to Calico or Cilium: drain the node, remove
    flannel (its relations, which destroys its units), relate the next CNI
    to the worker, and new pods work with nothing of flannel's left. The
    05-default.conflist of the reactive kubernetes-worker of 2020, left
    dangling when flannel went, makes libcni fail ("error reading
    /etc/cni/net.d/05-default.conflist") until the worker links it to the
    next CNI's conflist, which it does as soon as that CNI publishes it."""
    cluster = node
    flannel_active(cluster)
    machine = cluster.machines["m1"]
    old = cluster.start_pod("m1")
    assert old.delete() == "", "the drained pod's CNI DEL failed"
    cluster.remove_cni_relation()
    cluster.remove_etcd_relation()
    assert cluster.flannel_units() == []
    # drained: not even the pods' bridge or address table of flannel's stays
    assert cluster.flannel_leftovers("m1", pods_stay=False) == []
    assert "CDK-flannel-network" not in (machine.ls("/var/lib/cni/networks") or [])
    dangling, error = cluster.try_pod("m1")
    assert dangling is None and "05-default.conflist" in error, error
    cluster.controller.deploy(NextCni())
    cluster.controller.add_relation("next-cni:cni", "kubernetes-worker:cni")
    cluster.settle()
    assert cluster.default_conflist_link("m1", stem="05-default") == NextCni.conf_file
    pod, error = cluster.try_pod("m1")
    assert pod is not None, f"a pod of the next CNI got no address: {error}"
    assert ipaddress.ip_address(pod.address) in ipaddress.ip_network("10.99.0.0/24")
    assert pod.ping("10.99.0.1"), "the pod cannot reach its gateway"
    assert pod.ping(machine.address), "the pod cannot reach its node"
