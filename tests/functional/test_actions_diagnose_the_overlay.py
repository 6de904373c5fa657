"""On Juju 4.0 (the sandbox's 4.0 mode) and Ubuntu 26.04 machines: the user's
remove/add scenario, a refresh and the operator's actions on a real
two-node overlay: `juju run flannel/0
check-network` says ok on a healthy cluster and on one that loses a share
of its packets and, for each fault operators meet (vxlan's port dropped by
the network, a path narrower than the MTU, a route gone, a lease gone from
etcd), fails naming the node and the cause; a removed node's lease is
gone, no failure; list-leases shows every lease; debug hands over a
tarball without the etcd client key. The faults are made on m2 and checked
from m1 (and m2), each undone before the next."""
from __future__ import annotations

import io
import re
import tarfile

import pytest
from functional_kit import (assert_hooks_run_with_the_base_python, delete_pods, deploy_and_wait,
                            play_remove_add)

from sandbox.cluster import CNI_RELATION, FLANNEL
from sandbox.juju.versions import JUJU_4

pytestmark = [pytest.mark.functional, pytest.mark.xdist_group("actions")]


@pytest.fixture(scope="module")
def cluster(open_cluster):
    # Juju 4.0 (sandbox/juju/versions.py: the packed charm deployed and
    # refreshed, no leader-get/leader-set, no private-address) on Ubuntu 26.04
    # machines, whose hooks run on its python3 (CPython 3.14, sandbox/cpython.py)
    with open_cluster("actions", workers=2, juju=JUJU_4, series="resolute") as opened:
        opened.plugins_before = deploy_and_wait(opened)
        opened.controller.update_status()   # where a unit names itself beside its lease
        opened.settle()
        yield opened


def test_hooks_run_with_the_python3_of_the_base_the_machines_claim(cluster):
    assert_hooks_run_with_the_base_python(cluster)


def test_the_user_scenario_on_juju_4(cluster):
    """LP #1866869's remove/add on Juju 4.0, deployed from the packed charm:
    what the bug broke (the worker's plugins, new pods) holds, flannel
    leaves nothing, and no hook relied on what 4.0 took away."""
    assert cluster.controller.rules.major == 4
    assert str(cluster.controller.model().app(FLANNEL)["charm-dir"]).startswith(
        str(cluster.workdir)), "not deployed from the packed charm"
    rid = cluster.controller.relation_id(*CNI_RELATION)
    assert "private-address" not in cluster.controller.relation_data(rid, cluster.unit_on("m1"))
    run = play_remove_add(cluster, cluster.plugins_before, cluster.say, label="juju 4: ")
    assert run.units_after_remove == [] and run.flanneld_after_remove == {"m1": [], "m2": []}
    assert run.leftovers_after_remove == {"m1": [], "m2": []}, run.leftovers_after_remove
    assert run.files_after_remove == {"m1": [], "m2": []}, run.files_after_remove
    assert not run.readd_status, run.readd_status
    assert all(p.address for p in run.new_pods), "; ".join(map(str, run.new_pods))
    assert run.all_plugin_changes() == [], run.all_plugin_changes()
    assert cluster.failed_hooks() == []
    delete_pods(cluster)
    cluster.controller.update_status()   # the new units name themselves
    cluster.settle()


def test_a_refresh_to_the_packed_charm_on_juju_4(cluster, built_charm, resource):
    """`juju refresh flannel --path ./flannel.charm`: the same flanneld and
    inputs, so it is not restarted, and every unit is active again."""
    pids = {m: cluster.flanneld_pids(m) for m in ("m1", "m2")}
    with cluster.timings.phase("juju 4: refresh --path ./flannel.charm", cluster.say):
        cluster.upgrade_flannel(resource, charm_dir=built_charm)
    assert {m: cluster.flanneld_pids(m) for m in ("m1", "m2")} == pids
    assert cluster.wait_for_flannel(timeout=60)
    assert [h for h in cluster.controller.hook_log if h.hook == "upgrade-charm" and h.ok]


def lease_of(cluster, machine: str) -> str:
    subnet = cluster.subnet_env(machine)["FLANNEL_SUBNET"]
    address, length = subnet.split("/")
    return address.rsplit(".", 1)[0] + ".0/" + length


def check(cluster, machine: str = "m1"):
    return cluster.run_action(cluster.unit_on(machine), "check-network", timeout=0.5)


def node_result(run, cluster, machine: str) -> dict:
    """The results of the lease of `machine` (named by its subnet)."""
    return run.results["nodes"][re.sub(r"[./]", "-", lease_of(cluster, machine))]


def test_check_network_on_a_healthy_cluster_says_ok(cluster):
    state = cluster.unit_kv(cluster.unit_on("m1"))
    for machine, other in (("m1", "m2"), ("m2", "m1")):
        run = check(cluster, machine)
        assert run.ok, (run.message, run.results)
        assert run.results["status"] == "ok" and run.results["nodes-checked"] == "1"
        node = node_result(run, cluster, other)
        assert node["status"] == "ok" and node["subnet"] == lease_of(cluster, other)
        assert node["largest-packet"] == cluster.subnet_env(machine)["FLANNEL_MTU"]
    # reading never writes: the unit's state is as it was
    assert cluster.unit_kv(cluster.unit_on("m1")) == state


def test_list_leases_shows_every_node_and_which_is_this_one(cluster):
    run = cluster.run_action(cluster.unit_on("m1"), "list-leases")
    assert run.ok, run.message
    rows = list(run.results["leases"].values())
    assert run.results["count"] == "2"
    assert (run.results["unanswered"], run.results["without-unit"],
            run.results["nodes-gone"]) == ("none", "none", "none")
    assert {row["subnet"] for row in rows} == {lease_of(cluster, m) for m in ("m1", "m2")}
    mine = [row for row in rows if row.get("this-node") == "yes"]
    assert [(row["address"], row["unit"]) for row in mine] == \
        [(cluster.machines["m1"].address, cluster.unit_on("m1"))]
    other = [row for row in rows if row not in mine][0]
    assert (other["address"], other["unit"], other["node-answers"]) == \
        (cluster.machines["m2"].address, cluster.unit_on("m2"), "yes")
    # flanneld's leases live 24 h
    assert all(0 < int(row["expires-in"]) <= 24 * 3600 for row in rows)


def test_debug_hands_over_a_tarball_without_the_client_key(cluster):
    unit = cluster.unit_on("m1")
    run = cluster.run_action(unit, "debug", journal_lines=50)
    assert run.ok, run.message
    m1 = cluster.machines["m1"]
    data = m1.read_file(run.results["path"])
    mode = m1.run(["stat", "-c", "%a %U", run.results["path"]]).stdout.split()
    assert mode == ["600", "root"]
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        files = {member.name.split("/", 1)[1]: tar.extractfile(member).read().decode()
                 for member in tar.getmembers()}
    assert {"subnet.env", "flannel.service", "journal.txt", "links.txt", "routes.txt",
            "fdb-and-neighbours.txt", "iptables.txt", "offload.txt", "leases.json",
            "unit-state.json"} <= set(files)
    assert files["subnet.env"] == m1.read_file("/run/flannel/subnet.env").decode()
    assert "flannel.1" in files["links.txt"] and "FLANNEL-" in files["iptables.txt"]
    assert lease_of(cluster, "m2") in files["leases.json"]
    key = m1.read_file("/etc/ssl/flannel/client-key.pem").decode()
    body = "".join(line for line in key.splitlines() if "-----" not in line)
    everything = "".join(files.values())
    assert "PRIVATE KEY" not in everything and body[:40] not in everything


def test_vxlan_port_dropped_by_the_network_is_named(cluster):
    m2 = cluster.machines["m2"]
    rule = ["INPUT", "-p", "udp", "--dport", "8472", "-j", "DROP"]
    m2.run(["iptables", "-I", *rule])
    try:
        run = check(cluster)
    finally:
        m2.run(["iptables", "-D", *rule])
    assert run.status == "failed"
    node = node_result(run, cluster, "m2")
    assert node["status"] == "broken" and "UDP 8472" in node["cause"]
    assert node["unit"] == cluster.unit_on("m2")
    assert "is dropped while the node answers on the underlay" in node["cause"]
    assert m2.address in run.message
    assert check(cluster).ok


def test_a_path_narrower_than_the_mtu_is_named_a_black_hole_with_its_size(cluster):
    cluster.narrow_path_to("m2", 1400)
    try:
        run = check(cluster)
    finally:
        cluster.narrow_path_to("m2", 1500)
    assert run.status == "failed"
    node = node_result(run, cluster, "m2")
    # 1400 bytes on the wire carry 1350 of a pod's packet inside vxlan (the
    # sandbox's bridge lets a VLAN tag's 4 bytes more through)
    largest = int(node["largest-packet"])
    assert 1350 <= largest <= 1354, node
    assert "MTU black hole" in node["cause"] and \
        f"set the mtu option to {largest + 50} or less" in node["cause"]
    assert check(cluster).ok


def test_a_deleted_route_is_named(cluster):
    m1 = cluster.machines["m1"]
    subnet = lease_of(cluster, "m2")
    [route] = m1.ip_json("route", "show", subnet)
    m1.run(["ip", "route", "del", subnet])
    try:
        run = check(cluster)
    finally:
        m1.run(["ip", "route", "add", subnet, "via", route["gateway"], "dev", route["dev"],
                "onlink"])
    assert run.status == "failed"
    assert f"this node has no route to {subnet}" in node_result(run, cluster, "m2")["cause"]
    assert check(cluster).ok


def test_a_path_losing_a_share_of_its_packets_is_never_given_a_cause(cluster):
    """A third of what m1 sends m2 dropped at random (underlay echoes and
    vxlan's packets alike): check-network says ok, or that it cannot tell,
    and names no cause (one lost echo once read "MTU black hole")."""
    m2 = cluster.machines["m2"]
    lossy = ["INPUT", "-s", cluster.machines["m1"].address, "-m", "statistic", "--mode",
             "random", "--probability", "0.33", "-j", "DROP"]
    m2.run(["iptables", "-I", *lossy])
    try:
        runs = [check(cluster) for _ in range(2)]
    finally:
        m2.run(["iptables", "-D", *lossy])
    for run in runs:
        assert run.ok, (run.message, run.results)
        node = node_result(run, cluster, "m2")
        assert node["status"] in ("ok", "unsure"), node
        assert "cause" not in node or node["cause"].startswith("cannot tell"), node
        # how sure: the echoes sent and answered, a third of them lost
        assert re.search(r"underlay \d+/\d+", node["echoes"]), node


def test_a_lease_deleted_from_etcd_is_named_on_its_node(cluster):
    subnet = lease_of(cluster, "m2")
    assert cluster.expire_leases(subnet)
    run = check(cluster, "m2")
    assert run.status == "failed"
    assert f"this node's lease of {subnet} is gone from etcd" in run.message
    leases = cluster.run_action(cluster.unit_on("m1"), "list-leases")
    assert leases.results["count"] == "1"


def test_a_removed_nodes_lease_is_held_by_no_unit_and_gone_once_it_stops_answering(cluster):
    """After the lease test, update-status gets m2 its lease back; then m2's
    worker unit (and so its flannel) goes: its lease stays its 24 h, named by
    no unit; with the machine silent too, list-leases calls its node gone."""
    cluster.controller.update_status()
    cluster.settle()
    subnet = lease_of(cluster, "m2")
    unit = cluster.unit_on("m2")
    cluster.controller.remove_unit(cluster.controller.unit(unit)["principal"])
    cluster.settle()
    assert unit not in cluster.flannel_units()
    assert not [key for key in cluster.etcd_values() if key.endswith("/units/" +
                                                                     unit.replace("/", "-"))]
    leases = cluster.run_action(cluster.unit_on("m1"), "list-leases")
    assert (leases.results["without-unit"], leases.results["nodes-gone"]) == (subnet, "none")
    silent = ["INPUT", "-p", "icmp", "-j", "DROP"]
    cluster.machines["m2"].run(["iptables", "-I", *silent])
    try:
        leases = cluster.run_action(cluster.unit_on("m1"), "list-leases")
    finally:
        cluster.machines["m2"].run(["iptables", "-D", *silent])
    assert leases.results["nodes-gone"] == subnet
    # check-network agrees: that node's lease is gone, not broken, and no failure
    run = check(cluster)
    assert run.ok, (run.message, run.results)
    node = run.results["nodes"][re.sub(r"[./]", "-", subnet)]
    assert node["status"] == "gone" and "unit" not in node, node
    assert 0 < int(node["expires-in"]) <= 24 * 3600
    assert "a node removed, whose lease lives on; etcd drops it in 2" in node["cause"]
    assert f"a lease of nodes gone, held by no unit: {subnet} (etcd drops it in" in \
        run.results["summary"]
