"""flannel v0.11's network in etcd's v2 keyspace, carried into v3 before a
node's first flanneld start (steps/subnets/etcd.py's _carry_v2_leases) and
forgotten by update-status once every node has moved (its
finish_v2_move); the decisions are
facts/v2_network.py's. Against the session's real etcd with its v2 API on."""
from __future__ import annotations

import json
import time

import etcd3gw
import pytest
from unitkit import etcd_client, wipe_flannel
import stepkit

from charms.flannel.adapters.credentials import write_client_credentials
from charms.flannel.adapters.etcd import EtcdClientSettings, NetworkStore
from charms.flannel.facts.etcd_keys import DEFAULT_PREFIX, Lease
from charms.flannel.facts.netconfig import NetworkConfig
from charms.flannel.facts.v2_network import (V2Lease, V2Network, carried_ttl, copies, fits,
                                             leases_to_carry, moved)
from charms.flannel.steps.context import EtcdRelation
from charms.flannel.steps.subnets.etcd import _carry_v2_leases, finish_v2_move
from charms.flannel.steps.outcome import Outcome
from sandbox.etcd import EtcdServer

CONFIG = {"Network": "10.1.0.0/16", "Backend": {"Type": "vxlan"}}
NETWORK = NetworkConfig.from_json(CONFIG)
# where flanneld and the charm keep flannel's network (the steps use no other)
PREFIX = DEFAULT_PREFIX


def v011_lease(address: str, mac: str = "5e:c6:6b:91:9e:78") -> str:
    """A lease's value as flannel v0.11 writes it (subnet.LeaseAttrs)."""
    return json.dumps({"PublicIP": address, "BackendType": "vxlan",
                       "BackendData": {"VtepMAC": mac}}, separators=(",", ":"))


def v018_lease(address: str, mac: str = "5e:c6:6b:91:9e:78") -> str:
    """The same node's lease as flanneld >= 0.18 rewrites it (PublicIPv6, VNI)."""
    return json.dumps({"PublicIP": address, "PublicIPv6": None, "BackendType": "vxlan",
                       "BackendData": {"VNI": 1, "VtepMAC": mac}})


def v2_put(etcd: EtcdServer, key: str, value: str, ttl: int | None = None) -> None:
    """What flannel v0.11 (and etcdctl v2's `set`) does: PUT /v2/keys/..."""
    data = {"value": value}
    if ttl is not None:
        data["ttl"] = str(ttl)
    with etcd.session() as session:
        reply = session.put(f"{etcd.endpoint}/v2/keys{key}", data=data, timeout=5)
    assert reply.status_code in (200, 201), reply.text


def v2_keys(etcd: EtcdServer, prefix: str = PREFIX) -> dict:
    with etcd.session() as session:
        reply = session.get(f"{etcd.endpoint}/v2/keys{prefix}", params={"recursive": "true"},
                            timeout=5)
    if reply.status_code == 404:
        return {}
    found = {}

    def walk(node):
        for child in node.get("nodes") or []:
            if child.get("dir"):
                walk(child)
            else:
                found[child["key"]] = child.get("value")
    walk(reply.json()["node"])
    return found


def time_to_live(etcd, key: str) -> int:
    """The TTL left on the v3 lease `key` is attached to."""
    client = etcd_client(etcd)
    [(_, meta)] = client.get(key, metadata=True)
    return etcd3gw.Lease(int(meta["lease"]), client).ttl()


@pytest.fixture
def clean(etcd):
    """Nothing of flannel's in etcd, v2 or v3, for this test alone."""
    wipe_flannel(etcd, PREFIX)
    yield etcd
    wipe_flannel(etcd, PREFIX)


@pytest.fixture
def v2_cluster(clean):
    """The bug report's cluster as etcd holds it: charm-flannel f79f180's
    config and two flannel v0.11 leases, in v2 only."""
    v2_put(clean, f"{PREFIX}/config", json.dumps(CONFIG))
    v2_put(clean, f"{PREFIX}/subnets/10.1.52.0-24", v011_lease("172.31.254.11"), ttl=86400)
    v2_put(clean, f"{PREFIX}/subnets/10.1.88.0-24", v011_lease("172.31.254.12"), ttl=600)
    return PREFIX


def unit(tmp_path, etcd, pki):
    """A hook's context on a unit with the etcd client files on disk (no
    command runs: a plain Machine)."""
    relation = EtcdRelation(etcd.connection_string, pki.ca_cert.read_text(),
                            pki.client_cert.read_text(), pki.client_key.read_text())
    ctx = stepkit.context(tmp_path, hook="update-status", etcd=relation)
    write_client_credentials(ctx.record, ctx.paths, relation.ca, relation.cert, relation.key)
    return ctx


def carry(ctx, store, network: NetworkConfig = NETWORK) -> Outcome:
    out = Outcome()
    _carry_v2_leases(ctx, store, network, out)
    return out


def finish(ctx) -> Outcome:
    out = Outcome()
    finish_v2_move(ctx, ctx.juju.etcd().connection_string, out)
    return out


CARRIED = ("Carried flannel v0.11's leases of {} from etcd's v2 keyspace into v3; the v2 keys "
           "stay until every node runs flanneld >= 0.18")
FORGOTTEN = ("Every node runs flanneld >= 0.18: deleted flannel v0.11's network from etcd's v2 "
             "keyspace")


# --- the carry, before a node's first flanneld start -------------------------------------

def test_the_v2_network_is_invisible_to_v3_until_carried(etcd, pki, settings, v2_cluster,
                                                         tmp_path):
    ctx = unit(tmp_path, etcd, pki)
    store = NetworkStore(settings, v2_cluster)
    assert store.leases() == [] and store.read_config() == (None, None)
    assert store.v2_network().config == json.dumps(CONFIG).encode()
    out = carry(ctx, store)
    assert out.log == [(CARRIED.format("10.1.52.0/24, 10.1.88.0/24"), False)]
    assert ctx.state.v2_network_seen is True   # update-status finishes the move
    leases = {lease.subnet: lease for lease in store.leases()}
    assert leases["10.1.52.0/24"].public_ip == "172.31.254.11"
    # byte for byte, as flanneld v0.11 wrote it
    raw = etcd_client(etcd).get(f"{v2_cluster}/subnets/10.1.88.0-24")[0]
    assert raw == v011_lease("172.31.254.12").encode()


def test_a_carried_lease_expires_when_its_v2_lease_would(
        etcd, pki, settings, v2_cluster, tmp_path):
    carry(unit(tmp_path, etcd, pki), NetworkStore(settings, v2_cluster))
    assert 590 <= time_to_live(etcd, f"{v2_cluster}/subnets/10.1.88.0-24") <= 600
    assert 86000 < time_to_live(etcd, f"{v2_cluster}/subnets/10.1.52.0-24") <= 86400


def test_a_subnet_held_in_v3_is_never_overwritten_and_a_second_carry_is_a_no_op(
        etcd, pki, settings, v2_cluster, tmp_path):
    """A node that already leased its subnet in v3 (flanneld v0.27 reused
    subnet.env) keeps its own lease."""
    own = v018_lease("172.31.254.11")
    etcd_client(etcd).put(f"{v2_cluster}/subnets/10.1.52.0-24", own)
    ctx, store = unit(tmp_path, etcd, pki), NetworkStore(settings, v2_cluster)
    assert carry(ctx, store).log == [(CARRIED.format("10.1.88.0/24"), False)]
    assert carry(ctx, store).log == []
    assert etcd_client(etcd).get(f"{v2_cluster}/subnets/10.1.52.0-24")[0] == own.encode()
    assert sorted(lease.subnet for lease in store.leases()) == ["10.1.52.0/24", "10.1.88.0/24"]


def test_a_node_that_holds_a_v3_lease_gets_no_copy_of_its_old_v2_one(
        etcd, pki, settings, clean, tmp_path):
    """A node that moved (flanneld >= 0.18 leased 10.1.7.0/24) and left a v2
    lease behind: the v2 lease is not brought back as a second lease of its
    address."""
    v2_put(etcd, f"{PREFIX}/subnets/10.1.52.0-24", v011_lease("172.31.254.11"), ttl=600)
    etcd_client(etcd).put(f"{PREFIX}/subnets/10.1.7.0-24", v018_lease("172.31.254.11"))
    store = NetworkStore(settings, PREFIX)
    assert carry(unit(tmp_path, etcd, pki), store).log == []
    assert [lease.subnet for lease in store.leases()] == ["10.1.7.0/24"]


def test_leases_that_do_not_fit_the_network_stay_behind(etcd, pki, settings, clean, tmp_path):
    v2_put(etcd, f"{PREFIX}/subnets/10.9.3.0-24", v011_lease("172.31.254.13"), ttl=600)
    v2_put(etcd, f"{PREFIX}/subnets/10.1.3.0-26", v011_lease("172.31.254.14"), ttl=600)
    v2_put(etcd, f"{PREFIX}/subnets/10.1.0.0-24", v011_lease("172.31.254.15"), ttl=600)
    store = NetworkStore(settings, PREFIX)
    assert carry(unit(tmp_path, etcd, pki), store).log == []
    assert store.leases() == []


def test_only_v2_leases_that_fit_and_whose_subnet_and_address_are_free_are_carried():
    v2 = V2Network(config=None, leases=(
        V2Lease("10.1.52.0-24", v011_lease("172.31.254.11").encode(), 600),
        V2Lease("10.1.53.0-24", v011_lease("172.31.254.12").encode(), 600),
        V2Lease("10.1.54.0-24", v011_lease("172.31.254.13").encode(), 600),
        V2Lease("10.9.3.0-24", v011_lease("172.31.254.14").encode(), 600)))
    v3 = [Lease.from_etcd("/p/subnets/10.1.53.0-24", v018_lease("172.31.254.99").encode()),
          Lease.from_etcd("/p/subnets/10.1.7.0-24", v018_lease("172.31.254.13").encode())]
    assert [lease.name for lease in leases_to_carry(v2, v3, NETWORK)] == ["10.1.52.0-24"]


@pytest.mark.parametrize("lease, config, fit", [
    ("10.1.52.0-24", CONFIG, True),
    ("10.1.52.0-24", {**CONFIG, "SubnetLen": 26}, False),           # another subnet length
    ("10.1.52.64-26", {"Network": "10.1.52.0/24"}, True),           # /24 network: prefix + 2
    ("10.2.52.0-24", CONFIG, False),                                # outside the network
    ("10.1.0.0-24", CONFIG, False),                                 # the network's first
    ("10.1.52.0-24", {**CONFIG, "EnableIPv6": True, "IPv6Network": "fd10::/56"}, False),
    ("garbage", CONFIG, False),
])
def test_a_lease_fits_where_flanneld_would_take_it(lease, config, fit):
    assert fits(V2Lease(lease, b"{}", 10), NetworkConfig.from_json(config)) is fit


def test_a_copy_never_outlives_its_lease():
    assert carried_ttl(V2Lease("10.1.52.0-24", b"{}", 0)) == 1
    assert carried_ttl(V2Lease("10.1.52.0-24", b"{}", 3600)) == 3600
    assert carried_ttl(V2Lease("10.1.52.0-24", b"{}", None)) == 24 * 3600


# --- the finish, at update-status --------------------------------------------------------

def test_the_v2_keys_go_once_flanneld_0_18_or_later_holds_every_subnet(
        etcd, pki, settings, v2_cluster, tmp_path):
    """While a node still runs flannel v0.11 its v2 lease is what the other
    v0.11 nodes route by, and the v2 config what it restarts on: the keys
    stay until every v3 copy was rewritten by flanneld >= 0.18."""
    ctx, store = unit(tmp_path, etcd, pki), NetworkStore(settings, v2_cluster)
    carry(ctx, store)
    assert finish(ctx).log == [] and ctx.state.v2_network_seen is True
    client = etcd_client(etcd)
    # m1's flanneld v0.27 takes its copy over (it writes its own attributes)
    client.put(f"{v2_cluster}/subnets/10.1.52.0-24", v018_lease("172.31.254.11"))
    assert finish(ctx).log == [], "m2 still runs flannel v0.11"
    assert len(v2_keys(etcd)) == 3 and ctx.state.v2_network_seen is True
    client.put(f"{v2_cluster}/subnets/10.1.88.0-24",
               v018_lease("172.31.254.12", mac="aa:c6:6b:91:9e:78"))
    assert finish(ctx).log == [(FORGOTTEN, False)]
    assert v2_keys(etcd) == {}
    assert ctx.state.v2_network_seen is None   # update-status looks no more
    assert len(store.leases()) == 2, "the v3 network is left as it is"


def test_a_unit_that_saw_the_v2_network_gone_stops_looking(etcd, pki, clean, tmp_path):
    """Another unit deleted the v2 keys: nothing to log, nothing more to look at."""
    ctx = unit(tmp_path, etcd, pki)
    ctx.state.v2_network_seen = True
    assert finish(ctx).log == []
    assert ctx.state.v2_network_seen is None


def test_a_copy_lives_as_long_as_the_v2_lease_its_node_renews(
        etcd, pki, settings, v2_cluster, tmp_path):
    """A node left on flannel v0.11 (its unit in error through the refresh)
    renews its v2 lease; update-status gives its copy as long: the nodes on
    flanneld >= 0.18 keep their route to it."""
    ctx = unit(tmp_path, etcd, pki)
    carry(ctx, NetworkStore(settings, v2_cluster))
    key = f"{v2_cluster}/subnets/10.1.88.0-24"
    assert time_to_live(etcd, key) <= 600
    finish(ctx)
    assert time_to_live(etcd, key) <= 600, "extended with nothing renewed"
    v2_put(etcd, key, v011_lease("172.31.254.12"), ttl=86400)   # v0.11 renews its lease
    finish(ctx)
    assert time_to_live(etcd, key) > 86000
    assert etcd_client(etcd).get(key)[0] == v011_lease("172.31.254.12").encode()
    assert len(v2_keys(etcd)) == 3


def test_a_subnet_taken_by_another_address_is_no_move(
        etcd, pki, settings, v2_cluster, tmp_path):
    """m2 still runs v0.11 while its copy ran out and another node leased
    its subnet: that is no sign m2 moved, and the v2 keys stay."""
    ctx = unit(tmp_path, etcd, pki)
    carry(ctx, NetworkStore(settings, v2_cluster))
    client = etcd_client(etcd)
    client.put(f"{v2_cluster}/subnets/10.1.52.0-24", v018_lease("172.31.254.11"))
    client.put(f"{v2_cluster}/subnets/10.1.88.0-24", v018_lease("172.31.254.99"))
    assert finish(ctx).log == []
    assert len(v2_keys(etcd)) == 3 and ctx.state.v2_network_seen is True


def test_a_v2_network_whose_leases_ran_out_is_forgotten(etcd, pki, clean, tmp_path):
    v2_put(etcd, f"{PREFIX}/config", json.dumps(CONFIG))
    v2_put(etcd, f"{PREFIX}/subnets/10.1.52.0-24", v011_lease("172.31.254.11"), ttl=1)
    time.sleep(2.2)
    ctx = unit(tmp_path, etcd, pki)
    ctx.state.v2_network_seen = True
    assert finish(ctx).log == [(FORGOTTEN, False)]
    assert v2_keys(etcd) == {}


def test_moved_compares_the_lease_not_its_key_fields():
    lease = V2Lease("10.1.52.0-24", v011_lease("1.2.3.4").encode(), 100)
    v2 = V2Network(config=None, leases=(lease,))

    def v3(**changes) -> Lease:
        value = {**json.loads(v011_lease("1.2.3.4")), **changes}
        return Lease.from_etcd("/p/subnets/10.1.52.0-24", json.dumps(value).encode())
    assert moved(v2, [v3()]) is False and copies(v2, [v3()]) == [lease]
    assert moved(v2, []) is False
    assert moved(v2, [v3(PublicIPv6=None)]) is True and copies(v2, [v3(PublicIPv6=None)]) == []
    assert moved(v2, [v3(PublicIPv6=None, PublicIP="1.2.3.5")]) is False
    assert moved(V2Network(config=b"{}", leases=()), []) is True


# --- an etcd without the v2 API ---------------------------------------------------------

@pytest.fixture(scope="module")
def etcd_without_v2(tmp_path_factory, pki):
    with EtcdServer(tmp_path_factory.mktemp("etcd-v3-only"), pki, host="127.0.0.1") as server:
        yield server


def test_an_etcd_without_the_v2_api_has_nothing_to_carry(etcd_without_v2, pki, tmp_path):
    """etcd 3.4's default, and the etcd charm's: the look costs one request."""
    settings = EtcdClientSettings.from_connection_string(
        etcd_without_v2.endpoint, str(pki.ca_cert), str(pki.client_cert), str(pki.client_key))
    ctx = unit(tmp_path, etcd_without_v2, pki)
    store = NetworkStore(settings, PREFIX)
    assert not store.v2_network()
    assert carry(ctx, store).log == []
    assert ctx.state.v2_network_seen is None and store.leases() == []
    ctx.state.v2_network_seen = True
    assert finish(ctx).log == []
    assert ctx.state.v2_network_seen is None
