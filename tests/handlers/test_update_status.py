"""update-status: what flanneld does not notice by itself, found in the
idle hook and mended in the same hook, whatever the options say."""
import json

from harness import NETWORK, configure, deployed


def test_an_etcd_rebuilt_empty_gets_the_network_and_the_lease_back(unit):
    deployed(unit)
    unit.etcd().delete_prefix(NETWORK)
    unit.hook("update-status")
    assert json.loads(unit.etcd_values()[f"{NETWORK}/config"])["Network"] == "10.1.0.0/16"
    assert unit.machine.started() == 2      # flanneld leased its subnet again
    assert f"{NETWORK}/subnets/10.1.52.0-24" in unit.etcd_values()
    assert "etcd holds no flannel network config (rebuilt?)" in unit.log


def test_a_unit_blocked_on_an_option_still_gets_its_network_back(unit):
    """The network flanneld runs is what etcd must hold: a mistyped mtu
    does not leave a rebuilt etcd empty and the node without its lease."""
    deployed(unit)
    configure(unit, mtu=100000)
    assert unit.status[0] == "blocked"
    unit.etcd().delete_prefix(NETWORK)
    unit.hook("update-status")
    config = json.loads(unit.etcd_values()[f"{NETWORK}/config"])
    assert config == {"Network": "10.1.0.0/16", "SubnetLen": 24,
                      "Backend": {"Type": "vxlan", "VNI": 1}}
    assert unit.machine.started() == 2
    assert unit.status[0] == "blocked" and unit.status[1].startswith("Invalid mtu: 100000")


def test_a_lost_lease_restarts_flanneld(unit):
    deployed(unit)
    unit.etcd().delete_prefix(f"{NETWORK}/subnets/")
    unit.hook("update-status")
    assert unit.machine.started() == 2
    assert "etcd lost this node's lease of 10.1.52.0/24" in unit.log


def test_a_lease_this_node_has_no_route_to_restarts_flanneld(unit):
    deployed(unit)
    unit.put_lease("10.1.7.0/24", "172.31.254.12")
    unit.hook("update-status")
    assert unit.machine.started() == 2
    assert "flanneld has no route to 10.1.7.0/24" in unit.log
    unit.machine.routes.append({"dst": "10.1.7.0/24", "dev": "flannel.1", "gateway": "10.1.7.0"})
    unit.hook("update-status")
    assert unit.machine.started() == 2


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
