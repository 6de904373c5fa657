"""update-status: what flanneld does not notice by itself, found in the
idle hook and mended in the same hook, whatever the options say."""
import json

from harness import NETWORK, configure, deployed

from charms.flannel.facts.restarts import FIRST_WAIT, GRACE

LATER = GRACE + 1   # flanneld is past its grace: routes and lease are its to have made


def test_an_etcd_rebuilt_empty_gets_the_network_and_the_lease_back(unit):
    deployed(unit)
    unit.now += LATER
    unit.etcd().delete_prefix(NETWORK)
    unit.hook("update-status")
    assert json.loads(unit.etcd_values()[f"{NETWORK}/config"])["Network"] == "10.1.0.0/16"
    assert unit.machine.started() == 2      # flanneld leased its subnet again
    assert f"{NETWORK}/subnets/10.1.52.0-24" in unit.etcd_values()
    assert "etcd holds no flannel network config (rebuilt?)" in unit.log


def test_update_status_asks_nothing_of_the_relations_and_their_hooks_bring_changes(unit):
    """Juju runs a relation hook for every change of a relation's data:
    update-status takes what the last other hook saw of etcd's and the
    principal's (two calls to the controller fewer, per unit, every five
    minutes), and a change reaches etcd in the relation hook that brings it."""
    etcd, cni = deployed(unit)
    unit.now += LATER
    unit.juju.calls.clear()
    unit.hook("update-status")
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")
    assert [call for call in unit.juju.calls if call[0] == "relation-get"] == []
    unit.juju.relations[cni].units["kubernetes-worker/0"]["service-cidr"] = "10.152.183.0/24"
    unit.hook("cni-relation-changed", cni, "kubernetes-worker/0")
    assert unit.etcd_values()[f"{NETWORK}/service-cidr"] == "10.152.183.0/24"
    unit.juju.calls.clear()
    log = len(unit.log)
    unit.hook("update-status")   # (the new service-cidr is what it remembers)
    assert [call for call in unit.juju.calls if call[0] == "relation-get"] == []
    assert "again:" not in unit.log[log:]   # no step's inputs changed
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")
    assert unit.machine.started() == 1


def test_a_unit_blocked_on_an_option_still_gets_its_network_back(unit):
    """The network flanneld runs is what etcd must hold: a mistyped mtu
    does not leave a rebuilt etcd empty and the node without its lease."""
    deployed(unit)
    configure(unit, mtu=100000)
    assert unit.status[0] == "blocked"
    unit.now += LATER
    unit.etcd().delete_prefix(NETWORK)
    unit.hook("update-status")
    config = json.loads(unit.etcd_values()[f"{NETWORK}/config"])
    assert config == {"Network": "10.1.0.0/16", "SubnetLen": 24,
                      "Backend": {"Type": "vxlan", "VNI": 1}}
    assert unit.machine.started() == 2
    assert unit.status[0] == "blocked" and unit.status[1].startswith("Invalid mtu: 100000")


def test_a_lost_lease_restarts_flanneld(unit):
    deployed(unit)
    unit.now += LATER
    unit.etcd().delete_prefix(f"{NETWORK}/subnets/")
    unit.hook("update-status")
    assert unit.machine.started() == 2
    assert "etcd lost this node's lease of 10.1.52.0/24" in unit.log


def test_a_lease_this_node_has_no_route_to_restarts_flanneld_once_past_its_grace(unit):
    """Seconds after its start flanneld may still be routing what it
    listed: no restart then."""
    deployed(unit)
    unit.put_lease("10.1.7.0/24", "172.31.254.12")
    unit.now += 5
    unit.hook("update-status")
    assert unit.machine.started() == 1
    unit.now += LATER
    unit.hook("update-status")
    assert unit.machine.started() == 2
    assert "flanneld has no route to 10.1.7.0/24" in unit.log
    unit.machine.routes.append({"dst": "10.1.7.0/24", "dev": "flannel.1", "gateway": "10.1.7.0"})
    unit.hook("update-status")
    assert unit.machine.started() == 2


def test_a_route_flanneld_never_makes_backs_off_and_says_so(unit):
    """A route no restart brings (flanneld fails to add it every time):
    restarted once at once, then after 10 min, 20, 40...; meanwhile the
    status names the cause and when the next restart comes."""
    deployed(unit)
    unit.put_lease("10.1.7.0/24", "172.31.254.12")
    unit.now += LATER
    unit.hook("update-status")
    assert unit.machine.started() == 2
    waits = []
    for _ in range(12):   # every 5 minutes for an hour
        unit.now += 300
        before = unit.machine.started()
        unit.hook("update-status")
        if unit.machine.started() > before:
            waits.append(unit.now)
        else:
            state, message = unit.status
            assert state == "waiting" and message.startswith(
                "flanneld has no route to 10.1.7.0/24 that etcd leases: restarted it "), message
            assert message.endswith("(journalctl -u flannel says why)")
    # restarts at 10 and 30 minutes after the first (waits of 10, then 20 min)
    assert len(waits) == 2 and waits[1] - waits[0] == 2 * FIRST_WAIT
    unit.machine.routes.append({"dst": "10.1.7.0/24", "dev": "flannel.1", "gateway": "10.1.7.0"})
    unit.now += 300
    unit.hook("update-status")
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")


def test_the_back_off_holds_through_etcd_away_and_other_leases_coming(unit):
    """A look that cannot see etcd is no sign the cause went; a lease more
    without a route is the same cause: neither restarts flanneld early."""
    deployed(unit)
    unit.put_lease("10.1.7.0/24", "172.31.254.12")
    unit.now += LATER
    unit.hook("update-status")
    assert unit.machine.started() == 2
    unit.etcd_server.stop()
    try:
        unit.now += 120
        unit.hook("update-status")
    finally:
        unit.etcd_server.start()
    unit.put_lease("10.1.8.0/24", "172.31.254.13")
    unit.now += 120
    unit.hook("update-status")
    assert unit.machine.started() == 2
    assert unit.status[1].startswith("flanneld has no route to 10.1.7.0/24, 10.1.8.0/24 that "
                                     "etcd leases: restarted it once, again in 6 min")


def test_a_host_gw_node_off_this_network_is_named_and_never_restarted_for(unit):
    """host-gw routes through the other node's own address: a node behind
    a router cannot be routed (the docs call it unsupported), and restarts
    change nothing."""
    configure(unit, backend="host-gw")
    deployed(unit)
    unit.put_lease("10.1.7.0/24", "192.168.7.3")
    for _ in range(3):
        unit.now += 300
        unit.hook("update-status")
    assert unit.machine.started() == 1
    assert unit.status == (
        "blocked", "host-gw cannot route 10.1.7.0/24 (node 192.168.7.3): not on this node's "
                   "network (host-gw routes pods through each node's own address, so every node "
                   "must share one layer-2 network); set backend=vxlan, with direct-routing=true "
                   "to keep host-gw's routes where nodes share one")


def test_a_network_out_of_subnets_is_named_and_flanneld_left_to_systemd(unit):
    """Every subnet leased by other nodes: flanneld exits "out of subnets"
    and systemd starts it again every five seconds; restarting it changes
    nothing, and the status says what an operator can change."""
    configure(unit, cidr="10.1.0.0/22")   # a /24 each: 10.1.1.0 to 10.1.3.0
    for n in (1, 2, 3):
        unit.put_lease(f"10.1.{n}.0/24", f"172.31.254.{20 + n}")
    unit.hook("install")
    unit.hook("etcd-relation-changed", unit.relate_etcd(), "etcd/0")
    unit.hook("cni-relation-changed", unit.relate_cni(), "kubernetes-worker/0")
    for _ in range(3):
        unit.now += 300
        unit.hook("update-status")
    assert unit.machine.started() == 1
    assert unit.status == (
        "blocked", "Out of subnets: 3 leases hold every /24 flanneld hands out of 10.1.0.0/22 "
                   "(a removed node's lease lives 24 h: list-leases names them); set a longer "
                   "subnet-len or a larger cidr")
    # a removed node's lease expires; systemd's next start of flanneld takes it
    unit.etcd().delete(f"{NETWORK}/subnets/10.1.3.0-24")
    unit.machine.restarted_by_systemd()
    unit.put_lease("10.1.3.0/24", "172.31.254.11")
    unit.lease("10.1.3.1/24")
    unit.hook("update-status")
    assert unit.status == ("active", "Flannel subnet 10.1.3.1/24")


def test_no_subnet_env_a_minute_after_the_start_restarts_flanneld(unit):
    deployed(unit)
    unit.paths.subnet_env.unlink()
    unit.now += 30
    unit.hook("update-status")
    assert unit.machine.started() == 1
    assert unit.status == ("waiting", "Negotiating flannel network subnet.")
    unit.now += 31
    unit.hook("update-status")
    assert unit.machine.started() == 2
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")


def test_etcd_away_is_waiting_and_flanneld_runs_on(unit):
    etcd, _ = deployed(unit)
    unit.etcd_server.stop()
    try:
        unit.hook("update-status")
        state, message = unit.status
        assert state == "waiting" and message.startswith("cannot reach etcd: https://127.0.0.1:")
        assert "connection refused" in message
        assert unit.machine.started() == 1
    finally:
        unit.etcd_server.start()
    unit.hook("update-status")
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")


def test_flanneld_found_dead_is_started_again(unit):
    deployed(unit)
    unit.machine.units["flannel"]["active"] = False
    unit.hook("update-status")
    assert unit.machine.started() == 2
    assert unit.status[0] == "active"


def test_a_hook_asks_systemd_only_once_flanneld_s_process_is_gone(unit):
    """While the main process systemd named in the last hook runs, the
    unit is active: update-status (or a config-changed that changes
    nothing) asks systemd nothing (a `systemctl` was the dearest call of an
    idle hook). A flanneld systemd restarted (a new process) is asked about
    again, and its age counted afresh."""
    deployed(unit)
    unit.hook("update-status")
    asked = lambda: [c for c in unit.machine.calls if c[0] == "systemctl"]  # noqa: E731
    unit.machine.calls.clear()
    unit.hook("update-status")
    assert asked() == [] and unit.status[0] == "active"
    unit.hook("config-changed")
    assert [c for c in asked() if c[1] == "show"] == [] and unit.status[0] == "active"
    unit.machine.restarted_by_systemd()
    unit.machine.calls.clear()
    unit.hook("update-status")
    assert [c[:2] for c in asked()] == [["systemctl", "show"]]   # not restarted by the charm
    unit.machine.calls.clear()
    unit.hook("update-status")
    assert asked() == [] and unit.status[0] == "active"


def test_a_blocked_unit_never_replaces_the_network_etcd_holds(unit):
    """A unit blocked on an option keeps its hands off a network etcd holds
    (another unit may have written the cluster's since): it writes only to
    an etcd that lost its network."""
    deployed(unit)
    moved = json.loads(unit.etcd_values()[f"{NETWORK}/config"])
    moved["Network"] = "10.9.0.0/16"
    unit.etcd().put(f"{NETWORK}/config", json.dumps(moved))
    configure(unit, vni=0)
    unit.hook("update-status")
    assert json.loads(unit.etcd_values()[f"{NETWORK}/config"])["Network"] == "10.9.0.0/16"
    assert unit.status[0] == "blocked" and unit.status[1].startswith("Invalid vni: 0")


def test_a_flanneld_the_charm_cannot_start_again_is_not_restarted_for(unit):
    """The etcd relation gone, or an option this machine refuses (the
    flanneld step would not start flanneld): a restart asked for would
    never happen, and the back-off spent on it would hold the next one."""
    etcd, _ = deployed(unit)
    del unit.machine.links["flannel.1"]   # what only a restart brings back
    (unit.paths.sys_class_net / "flannel.1").rmdir()
    unit.now += LATER
    configure(unit, mtu=9000)   # more than eth0's 1500: blocked
    unit.hook("update-status")
    assert "restarting flanneld" not in unit.log
    assert unit.kv("flannel.flanneld-restarts") is None
    configure(unit, mtu=0)
    unit.unrelate(etcd)
    unit.hook("update-status")
    assert "restarting flanneld" not in unit.log
    assert unit.kv("flannel.flanneld-restarts") is None
    # the control: once the charm can start it again, the device gone is mended
    etcd = unit.relate_etcd()
    unit.hook("etcd-relation-changed", etcd, "etcd/0")
    unit.now += LATER
    unit.hook("update-status")
    assert "flannel.1 is gone (flanneld makes it only as it starts): restarting flanneld" \
        in unit.log
