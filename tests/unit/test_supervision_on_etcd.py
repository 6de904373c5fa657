"""update-status's supervision of a flanneld on etcd (steps/supervision.py
and the etcd mode's look, steps/subnets/etcd.py), against the session's
real TLS etcd, a real subnet.env and, where routes matter, a real network
namespace: what an idle hook must act on."""
from __future__ import annotations

import json
import socket

import pytest
from unitkit import etcd_client
import stepkit

from charms.flannel.adapters.credentials import write_client_credentials
from charms.flannel.adapters.machine import Machine
from charms.flannel.facts.etcd_keys import DEFAULT_PREFIX, lease_key
from charms.flannel.facts.status import Problem
from charms.flannel.steps import supervision
from charms.flannel.steps.context import EtcdRelation
from charms.flannel.steps.outcome import Outcome
from charms.flannel.steps.subnets import LeaseLook
from charms.flannel.steps.subnets.etcd import EtcdSubnets, own_lease
from charms.flannel.steps.flags import NETWORK_CONFIGURED, SERVICE_RUNNING
from sandbox.etcd import EtcdServer

NETWORK = {"Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan"}}
SUBNET_ENV = ("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.52.1/24\n"
              "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n")
DUAL = {**NETWORK, "EnableIPv6": True, "IPv6Network": "fd10:1::/56", "IPv6SubnetLen": 64}
DUAL_ENV = SUBNET_ENV + "FLANNEL_IPV6_NETWORK=fd10:1::/56\nFLANNEL_IPV6_SUBNET=fd10:1:0:5::1/64\n"


def put(etcd, key: str, value) -> None:
    etcd_client(etcd).put(f"{DEFAULT_PREFIX}/{key}",
                          value if isinstance(value, str) else json.dumps(value))


def put_lease(etcd, subnet: str) -> None:
    etcd_client(etcd).put(lease_key(subnet), "{}")


def unit(tmp_path, etcd, pki, *, confirmed=NETWORK, env=SUBNET_ENV, machine=None, state=None):
    """An update-status hook's context on a unit whose flanneld runs the
    `confirmed` network and wrote `env` (None: no subnet.env), with the
    etcd client files on disk where the charm writes them."""
    relation = EtcdRelation(etcd.connection_string, pki.ca_cert.read_text(),
                            pki.client_cert.read_text(), pki.client_key.read_text())
    tmp_path.mkdir(exist_ok=True)
    ctx = stepkit.context(tmp_path, machine=machine or Machine(), hook="update-status",
                          etcd=relation, kv=state)
    ctx.state.confirmed_network = confirmed
    ctx.state.subnet_manager = "etcd"
    write_client_credentials(ctx.record, ctx.paths, relation.ca, relation.cert, relation.key)
    if env is not None:
        ctx.paths.subnet_env.parent.mkdir(parents=True, exist_ok=True)
        ctx.paths.subnet_env.write_text(env)
    return ctx


# --- this node's lease, as flanneld keys it ------------------------------------------------

@pytest.mark.parametrize("confirmed, env, lease", [
    (NETWORK, SUBNET_ENV, "10.1.52.0/24"),
    (DUAL, DUAL_ENV, "10.1.52.0/24&fd10:1:0:5::/64"),   # both subnets, as flanneld keys it
    ({**NETWORK, "Network": "10.2.0.0/16"}, SUBNET_ENV, None),   # another network: re-leasing
    (DUAL, SUBNET_ENV, None),                  # IPv6 just turned on: flanneld leases anew
    (NETWORK, DUAL_ENV, None),                 # IPv6 just turned off
    (NETWORK, "FLANNEL_SUBNET=what\n", None),   # garbled: flanneld's to rewrite
    (NETWORK, None, None),                     # no subnet.env yet
    (None, SUBNET_ENV, None),                  # no network confirmed yet
])
def test_own_lease_is_the_lease_subnet_env_names_if_it_is_of_the_confirmed_network(
        confirmed, env, lease, etcd, pki, tmp_path):
    assert own_lease(unit(tmp_path, etcd, pki, confirmed=confirmed, env=env)) == lease


# --- look ------------------------------------------------------------------------------------

def look(ctx) -> tuple[LeaseLook, Outcome]:
    """The etcd mode's look, and what it found on the way."""
    out = Outcome()
    return EtcdSubnets(ctx).look(out, flanneld_started=True), out


def test_a_node_etcd_knows_is_healthy(etcd, pki, flannels_prefix, netns_machine, tmp_path):
    put(etcd, "config", NETWORK)
    put_lease(etcd, "10.1.52.0/24")
    ctx = unit(tmp_path, etcd, pki, machine=netns_machine)
    seen, out = look(ctx)
    # (a lease of no address: no unit can be named its holder, nothing to write)
    assert seen == LeaseLook(others=())
    assert out.problems == {Problem.ETCD: None, Problem.OUT_OF_SUBNETS: None}
    assert out.clear_flags == [] and ctx.state.etcd_answered == etcd.endpoint
    # the list is remembered: the next look reads only its fingerprint
    assert ctx.state.lease_list["subnets"] == ["10.1.52.0/24"]
    assert supervision.run(ctx, flanneld_started=True).clear_flags == []


def test_a_unit_names_itself_beside_its_lease_once(etcd, pki, flannels_prefix, netns_machine,
                                                   tmp_path):
    """list-leases' "unit": written by the look that finds the lease, not
    again while it holds; not written while the lease is lost (flanneld
    leases again first)."""
    put(etcd, "config", NETWORK)
    client = etcd_client(etcd)
    client.put(lease_key("10.1.52.0/24"), json.dumps({"PublicIP": "172.31.254.11"}))
    ctx = unit(tmp_path, etcd, pki, machine=netns_machine)
    for _ in range(2):
        supervision.run(ctx, flanneld_started=True)
        [(value, meta)] = client.get(f"{DEFAULT_PREFIX}/units/flannel-0", metadata=True)
        assert json.loads(value) == {"unit": "flannel/0", "lease": "10.1.52.0/24",
                                     "public-ip": "172.31.254.11"}
        assert int(meta["version"]) == 1
    assert ctx.state.registered_lease == "10.1.52.0/24"
    with ctx.etcd_store(etcd.connection_string) as store:
        assert store.unit_names() == {("10.1.52.0/24", "172.31.254.11"): "flannel/0"}
        # the subnet leased by another node since: the name does not stick to it
        client.put(lease_key("10.1.52.0/24"), json.dumps({"PublicIP": "172.31.254.99"}))
        assert [lease.public_ip for lease, _ in store.lease_lifetimes()] == ["172.31.254.99"]
        assert ("10.1.52.0/24", "172.31.254.99") not in store.unit_names()
    client.delete_prefix(f"{DEFAULT_PREFIX}/")
    supervision.run(ctx, flanneld_started=True)
    assert client.get(f"{DEFAULT_PREFIX}/units/flannel-0") == []


def test_an_etcd_rebuilt_empty_asks_for_the_config_and_the_lease_again(etcd, pki,
                                                                       flannels_prefix,
                                                                       tmp_path):
    ctx = unit(tmp_path, etcd, pki)
    ctx.state.flanneld_inputs = "what flanneld was started with"
    seen, found = look(ctx)
    assert (seen.unreachable, seen.lost) == (False, "etcd lost this node's lease of 10.1.52.0/24")
    assert NETWORK_CONFIGURED in found.clear_flags
    out = supervision.run(ctx, flanneld_started=True)
    assert NETWORK_CONFIGURED in out.clear_flags   # the network is written again
    assert SERVICE_RUNNING in out.clear_flags and ctx.state.flanneld_inputs is None
    assert ("etcd lost this node's lease of 10.1.52.0/24: restarting flanneld", True) in out.log
    assert out.problems[Problem.ETCD] is None
    assert ctx.state.etcd_answered == etcd.endpoint


def test_a_lease_of_another_network_is_not_this_nodes_to_miss(etcd, pki, flannels_prefix,
                                                              tmp_path):
    """Mid cidr change subnet.env still names the old network's subnet:
    flanneld is leasing anew, and no restart is asked for."""
    put(etcd, "config", {**NETWORK, "Network": "10.2.0.0/16"})
    ctx = unit(tmp_path / "a", etcd, pki, confirmed={**NETWORK, "Network": "10.2.0.0/16"})
    seen, found = look(ctx)
    assert (found.clear_flags, seen.lost) == ([], None)
    assert supervision.run(ctx, flanneld_started=True).clear_flags == []
    garbled, found = look(unit(tmp_path / "b", etcd, pki, env="FLANNEL_SUBNET=what\n"))
    assert found.problems[Problem.ETCD] is None and garbled.lost is None


def test_etcd_away_is_a_problem_naming_it_and_nothing_else(etcd, pki, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ctx = unit(tmp_path, etcd, pki)
    ctx.juju.etcd_relation = ctx.juju.etcd_relation._replace(
        connection_string=f"https://127.0.0.1:{port}")
    seen, found = look(ctx)
    assert found.problems[Problem.ETCD].startswith("cannot reach etcd: https://127.0.0.1:%d" % port)
    assert (found.clear_flags, seen.lost, seen.unreachable) == ([], None, True)
    assert ctx.state.etcd_answered is None


def test_a_dual_stack_lease_is_found_under_flanneld_s_key_for_both_subnets(
        etcd, pki, flannels_prefix, netns_machine, tmp_path):
    """Looked for under "10.1.52.0-24" alone, it was lost at every update-status
    (and flanneld restarted)."""
    put(etcd, "config", DUAL)
    key = f"{DEFAULT_PREFIX}/subnets/10.1.52.0-24&fd10:1:0:5::-64"
    etcd_client(etcd).put(key, "{}")
    ctx = unit(tmp_path, etcd, pki, confirmed=DUAL, env=DUAL_ENV, machine=netns_machine)
    assert look(ctx)[0].lost is None
    etcd_client(etcd).delete(key)
    assert look(ctx)[0].lost == "etcd lost this node's lease of 10.1.52.0/24&fd10:1:0:5::/64"


def test_a_lease_of_the_other_ipv6_shape_is_being_re_leased_not_lost(
        etcd, pki, flannels_prefix, tmp_path):
    put(etcd, "config", DUAL)
    v4_only = unit(tmp_path, etcd, pki, confirmed=DUAL)   # IPv6 just turned on: leasing anew
    assert look(v4_only)[0].lost is None


def test_another_nodes_lease_without_a_route_here_restarts_flanneld(
        etcd, pki, flannels_prefix, netns_machine, tmp_path):
    """flanneld v0.27.4 can miss lease events after a lease of the other IPv6
    shape goes (IPv6 turned on or off): this node then keeps no route to the
    other node's new subnet, and its pods cannot reach that node's."""
    put(etcd, "config", NETWORK)
    for subnet in ("10.1.52.0/24", "10.1.7.0/24", "10.1.9.0/24"):
        put_lease(etcd, subnet)
    ip = netns_machine.netns
    ip(["ip", "link", "add", "cni0", "type", "bridge"])
    ip(["ip", "link", "add", "flannel.1", "type", "vxlan", "id", "1", "dstport", "8472"])
    ip(["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"])
    for device in ("cni0", "flannel.1", "eth0", "eth0-peer"):
        ip(["ip", "link", "set", device, "up"])
    ip(["ip", "addr", "add", "10.1.52.1/24", "dev", "cni0"])   # this node's own subnet
    ip(["ip", "addr", "add", "10.1.52.0/32", "dev", "flannel.1"])
    ip(["ip", "addr", "add", "172.31.254.10/24", "dev", "eth0"])
    # vxlan routes as flanneld makes them: one lease's, one of an old lease, gone
    for subnet in ("10.1.7.0/24", "10.1.200.0/24"):
        gateway = subnet.split("/")[0]
        ip(["ip", "route", "add", subnet, "via", gateway, "dev", "flannel.1", "onlink"])
    ctx = unit(tmp_path, etcd, pki, machine=netns_machine)
    ctx.state.flanneld_inputs = "what flanneld was started with"
    seen, _ = look(ctx)
    assert seen.others == ("10.1.7.0/24", "10.1.9.0/24") and seen.lost is None
    out = supervision.run(ctx, flanneld_started=True)
    assert SERVICE_RUNNING in out.clear_flags and ctx.state.flanneld_inputs is None
    assert ("flanneld has no route to 10.1.9.0/24 that etcd leases: restarting flanneld",
            True) in out.log
    # a host-gw (or direct-routing) route counts as well
    ip(["ip", "route", "add", "10.1.9.0/24", "via", "172.31.254.13", "dev", "eth0"])
    later = unit(tmp_path, etcd, pki, machine=netns_machine, state=ctx.state.kv)
    assert supervision.run(later, flanneld_started=True).clear_flags == []


# --- the unit's name beside its lease, whatever took it away -----------------------------

def named(etcd) -> dict | None:
    found = etcd_client(etcd).get(f"{DEFAULT_PREFIX}/units/flannel-0")
    return json.loads(found[0]) if found else None


def registered_unit(etcd, pki, netns_machine, tmp_path, public_ip="172.31.254.11"):
    put(etcd, "config", NETWORK)
    etcd_client(etcd).put(lease_key("10.1.52.0/24"), json.dumps({"PublicIP": public_ip}))
    ctx = unit(tmp_path, etcd, pki, machine=netns_machine)
    supervision.run(ctx, flanneld_started=True)
    assert named(etcd) == {"unit": "flannel/0", "lease": "10.1.52.0/24", "public-ip": public_ip}
    return ctx


def test_a_rebuild_a_peer_noticed_first_gets_the_unit_named_again(etcd, pki, flannels_prefix,
                                                                  netns_machine, tmp_path):
    """etcd rebuilt empty, a peer's update-status wrote the network back and
    this node's flanneld leased its subnet again before this unit looked:
    this unit never sees the config missing, and its name must return."""
    ctx = registered_unit(etcd, pki, netns_machine, tmp_path)
    etcd_client(etcd).delete_prefix(f"{DEFAULT_PREFIX}/")
    put(etcd, "config", NETWORK)   # the peer
    etcd_client(etcd).put(lease_key("10.1.52.0/24"), json.dumps({"PublicIP": "172.31.254.11"}))
    later = unit(tmp_path, etcd, pki, machine=netns_machine, state=ctx.state.kv)
    supervision.run(later, flanneld_started=True)
    assert named(etcd) == {"unit": "flannel/0", "lease": "10.1.52.0/24",
                           "public-ip": "172.31.254.11"}


def test_a_new_address_keeping_the_subnet_is_named_anew(etcd, pki, flannels_prefix,
                                                        netns_machine, tmp_path):
    """A public-IP change keeps the subnet (flanneld leases it again under
    the new address): list-leases matches a name by subnet and address."""
    ctx = registered_unit(etcd, pki, netns_machine, tmp_path)
    etcd_client(etcd).put(lease_key("10.1.52.0/24"), json.dumps({"PublicIP": "172.31.254.21"}))
    later = unit(tmp_path, etcd, pki, machine=netns_machine, state=ctx.state.kv)
    supervision.run(later, flanneld_started=True)
    assert named(etcd)["public-ip"] == "172.31.254.21"
    with later.etcd_store(etcd.connection_string) as store:
        assert store.unit_names() == {("10.1.52.0/24", "172.31.254.21"): "flannel/0"}


def test_the_etcd_relation_moved_to_another_etcd_gets_the_unit_named_there(
        etcd, pki, flannels_prefix, netns_machine, tmp_path):
    ctx = registered_unit(etcd, pki, netns_machine, tmp_path)
    with EtcdServer(tmp_path / "other-etcd", pki, host="127.0.0.1") as other:
        put(other, "config", NETWORK)
        etcd_client(other).put(lease_key("10.1.52.0/24"),
                               json.dumps({"PublicIP": "172.31.254.11"}))
        moved = unit(tmp_path, other, pki, machine=netns_machine, state=ctx.state.kv)
        supervision.run(moved, flanneld_started=True)
        assert named(other) == {"unit": "flannel/0", "lease": "10.1.52.0/24",
                                "public-ip": "172.31.254.11"}


def test_a_unit_removed_takes_its_name_away_and_keeps_its_lease(
        etcd, pki, flannels_prefix, netns_machine, tmp_path):
    """The stop hook of a unit removed: list-leases shows its lease (kept
    its 24 h for a unit added back) held by no unit."""
    ctx = registered_unit(etcd, pki, netns_machine, tmp_path)
    ctx.state.etcd_endpoints = etcd.connection_string   # (as serving the network left it)
    out = Outcome()
    EtcdSubnets(ctx).leave(out, keep_lease=True)
    assert named(etcd) is None and out.log == []
    assert etcd_client(etcd).get(lease_key("10.1.52.0/24")) != []
    assert ctx.state.registered_lease is None


def test_a_name_that_holds_is_not_written_again(etcd, pki, flannels_prefix, netns_machine,
                                                tmp_path):
    ctx = registered_unit(etcd, pki, netns_machine, tmp_path)
    for _ in range(2):
        later = unit(tmp_path, etcd, pki, machine=netns_machine, state=ctx.state.kv)
        supervision.run(later, flanneld_started=True)
    [(_, meta)] = etcd_client(etcd).get(f"{DEFAULT_PREFIX}/units/flannel-0", metadata=True)
    assert int(meta["version"]) == 1


def test_a_flanneld_the_charm_has_not_started_is_not_restarted_and_keeps_its_back_off(
        etcd, pki, flannels_prefix, tmp_path):
    """Not started with its inputs (the flanneld step has yet to start
    it): a restart asked for would change nothing, and would spend the
    back-off. (The etcd relation gone and a blocked option: the handler
    tier's test_update_status.py.)"""
    put(etcd, "config", NETWORK)   # (this node's lease is not there: lost)
    ctx = unit(tmp_path, etcd, pki)
    out = supervision.run(ctx, flanneld_started=False)
    assert out.clear_flags == [] and ctx.state.flanneld_restarts is None
    assert not [line for line, _ in out.log if "restarting" in line]
    assert SERVICE_RUNNING in supervision.run(ctx, flanneld_started=True).clear_flags
