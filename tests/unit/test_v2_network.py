"""flannel v0.11's network in etcd's v2 keyspace, carried into v3 and
forgotten once every node has moved (charms.flannel.v2_network), against
the session's real etcd with its v2 API on."""
from __future__ import annotations

import json
import time

import etcd3gw
import pytest

from charms.flannel.network import EtcdClientSettings, NetworkStore
from charms.flannel.v2_network import (V2Lease, V2Network, carried_ttl, carry_leases,
                                       finish_move, fits, moved)
from sandbox.etcd import EtcdServer

CONFIG = {"Network": "10.1.0.0/16", "Backend": {"Type": "vxlan"}}


def v011_lease(address: str, mac: str = "5e:c6:6b:91:9e:78") -> str:
    """A lease's value as flannel v0.11 writes it (subnet.LeaseAttrs)."""
    return json.dumps({"PublicIP": address, "BackendType": "vxlan",
                       "BackendData": {"VtepMAC": mac}}, separators=(",", ":"))


def v2_put(etcd: EtcdServer, key: str, value: str, ttl: int | None = None) -> None:
    """What flannel v0.11 (and etcdctl v2's `set`) does: PUT /v2/keys/..."""
    data = {"value": value}
    if ttl is not None:
        data["ttl"] = str(ttl)
    with etcd.session() as session:
        reply = session.put(f"{etcd.endpoint}/v2/keys{key}", data=data, timeout=5)
    assert reply.status_code in (200, 201), reply.text


def v2_keys(etcd: EtcdServer, prefix: str) -> dict:
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


def v3_client(etcd):
    return etcd3gw.Etcd3Client(host=etcd.host, port=etcd.port, protocol="https",
                               timeout=5, session=etcd.session())


def time_to_live(etcd, key: str) -> int:
    """The TTL left on the v3 lease `key` is attached to."""
    client = v3_client(etcd)
    [(_, meta)] = client.get(key, metadata=True)
    return etcd3gw.Lease(int(meta["lease"]), client).ttl()


@pytest.fixture
def v2_cluster(etcd, prefix):
    """The bug report's cluster as etcd holds it: charm-flannel f79f180's
    config and two flannel v0.11 leases, in v2 only."""
    v2_put(etcd, f"{prefix}/config", json.dumps(CONFIG))
    v2_put(etcd, f"{prefix}/subnets/10.1.52.0-24", v011_lease("172.31.254.11"), ttl=86400)
    v2_put(etcd, f"{prefix}/subnets/10.1.88.0-24", v011_lease("172.31.254.12"), ttl=600)
    return prefix


def test_the_v2_network_is_invisible_to_v3_until_carried(etcd, settings, v2_cluster):
    store = NetworkStore(settings, v2_cluster)
    assert store.leases() == [] and store.read_config() is None
    v2, carried = carry_leases(store, CONFIG)
    assert v2.config == json.dumps(CONFIG).encode()
    assert carried == ["10.1.52.0/24", "10.1.88.0/24"]
    leases = {lease["Subnet"]: lease for lease in store.leases()}
    assert leases["10.1.52.0/24"]["PublicIP"] == "172.31.254.11"
    # byte for byte, as flanneld v0.11 wrote it
    raw = v3_client(etcd).get(f"{v2_cluster}/subnets/10.1.88.0-24")[0]
    assert raw == v011_lease("172.31.254.12").encode()


def test_a_carried_lease_expires_when_its_v2_lease_would(etcd, settings, v2_cluster):
    carry_leases(NetworkStore(settings, v2_cluster), CONFIG)
    assert 590 <= time_to_live(etcd, f"{v2_cluster}/subnets/10.1.88.0-24") <= 600
    assert 86000 < time_to_live(etcd, f"{v2_cluster}/subnets/10.1.52.0-24") <= 86400


def test_a_subnet_held_in_v3_is_never_overwritten_and_a_second_carry_is_a_no_op(
        etcd, settings, v2_cluster):
    """A node that already leased its subnet in v3 (flanneld v0.27 reused
    subnet.env) keeps its own lease."""
    today = json.dumps({"PublicIP": "172.31.254.11", "PublicIPv6": None})
    v3_client(etcd).put(f"{v2_cluster}/subnets/10.1.52.0-24", today)
    store = NetworkStore(settings, v2_cluster)
    assert carry_leases(store, CONFIG)[1] == ["10.1.88.0/24"]
    assert carry_leases(store, CONFIG)[1] == []
    assert v3_client(etcd).get(f"{v2_cluster}/subnets/10.1.52.0-24")[0] == today.encode()


def test_a_node_that_holds_a_v3_lease_gets_no_copy_of_its_old_v2_one(etcd, settings, prefix):
    """A node that moved (today's flanneld leased 10.1.7.0/24) and left a v2
    lease behind: the v2 lease is not brought back as a second lease of its
    address."""
    v2_put(etcd, f"{prefix}/subnets/10.1.52.0-24", v011_lease("172.31.254.11"), ttl=600)
    v3_client(etcd).put(f"{prefix}/subnets/10.1.7.0-24",
                        json.dumps({"PublicIP": "172.31.254.11", "PublicIPv6": None}))
    store = NetworkStore(settings, prefix)
    assert carry_leases(store, CONFIG)[1] == []
    assert [lease["Subnet"] for lease in store.leases()] == ["10.1.7.0/24"]


def test_leases_that_do_not_fit_the_network_stay_behind(etcd, settings, prefix):
    v2_put(etcd, f"{prefix}/subnets/10.9.3.0-24", v011_lease("172.31.254.13"), ttl=600)
    v2_put(etcd, f"{prefix}/subnets/10.1.3.0-26", v011_lease("172.31.254.14"), ttl=600)
    v2_put(etcd, f"{prefix}/subnets/10.1.0.0-24", v011_lease("172.31.254.15"), ttl=600)
    store = NetworkStore(settings, prefix)
    assert carry_leases(store, CONFIG)[1] == []
    assert store.leases() == []


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
    assert fits(V2Lease(lease, b"{}", 10), config) is fit


def test_a_copy_never_outlives_its_lease():
    assert carried_ttl(V2Lease("10.1.52.0-24", b"{}", 0)) == 1
    assert carried_ttl(V2Lease("10.1.52.0-24", b"{}", 3600)) == 3600
    assert carried_ttl(V2Lease("10.1.52.0-24", b"{}", None)) == 24 * 3600


def test_the_v2_keys_go_once_todays_flanneld_holds_every_subnet(etcd, settings, v2_cluster):
    """While a node still runs flannel v0.11 its v2 lease is what the other
    v0.11 nodes route by, and the v2 config what it restarts on: the keys
    stay until every v3 copy was rewritten by a flanneld of today."""
    store = NetworkStore(settings, v2_cluster)
    carry_leases(store, CONFIG)
    assert finish_move(store) is False
    client = v3_client(etcd)
    # m1's flanneld v0.27 takes its copy over (it writes its own attributes)
    client.put(f"{v2_cluster}/subnets/10.1.52.0-24", json.dumps(
        {"PublicIP": "172.31.254.11", "PublicIPv6": None, "BackendType": "vxlan",
         "BackendData": {"VNI": 1, "VtepMAC": "5e:c6:6b:91:9e:78"}}))
    assert finish_move(store) is False, "m2 still runs flannel v0.11"
    assert len(v2_keys(etcd, v2_cluster)) == 3
    client.put(f"{v2_cluster}/subnets/10.1.88.0-24", json.dumps(
        {"PublicIP": "172.31.254.12", "PublicIPv6": None, "BackendType": "vxlan",
         "BackendData": {"VNI": 1, "VtepMAC": "aa:c6:6b:91:9e:78"}}))
    assert finish_move(store) is True
    assert v2_keys(etcd, v2_cluster) == {}
    assert finish_move(store) is None
    assert len(store.leases()) == 2, "the v3 network is left as it is"


def test_a_copy_lives_as_long_as_the_v2_lease_its_node_renews(etcd, settings, v2_cluster):
    """A node left on flannel v0.11 (its unit in error through the refresh)
    renews its v2 lease; update-status gives its copy as long: the nodes of
    today keep their route to it."""
    store = NetworkStore(settings, v2_cluster)
    carry_leases(store, CONFIG)
    key = f"{v2_cluster}/subnets/10.1.88.0-24"
    assert time_to_live(etcd, key) <= 600
    assert finish_move(store) is False
    assert time_to_live(etcd, key) <= 600, "extended with nothing renewed"
    v2_put(etcd, key, v011_lease("172.31.254.12"), ttl=86400)   # v0.11 renews its lease
    assert finish_move(store) is False
    assert time_to_live(etcd, key) > 86000
    assert v3_client(etcd).get(key)[0] == v011_lease("172.31.254.12").encode()


def test_a_subnet_taken_by_another_address_is_no_move(etcd, settings, v2_cluster):
    """m2 still runs v0.11 while its copy ran out and another node leased
    its subnet: that is no sign m2 moved, and the v2 keys stay."""
    store = NetworkStore(settings, v2_cluster)
    carry_leases(store, CONFIG)
    client = v3_client(etcd)
    client.put(f"{v2_cluster}/subnets/10.1.52.0-24", json.dumps(
        {"PublicIP": "172.31.254.11", "PublicIPv6": None}))
    client.put(f"{v2_cluster}/subnets/10.1.88.0-24", json.dumps(
        {"PublicIP": "172.31.254.99", "PublicIPv6": None}))
    assert finish_move(store) is False
    assert len(v2_keys(etcd, v2_cluster)) == 3


def test_a_v2_network_whose_leases_ran_out_is_forgotten(etcd, settings, prefix):
    v2_put(etcd, f"{prefix}/config", json.dumps(CONFIG))
    v2_put(etcd, f"{prefix}/subnets/10.1.52.0-24", v011_lease("172.31.254.11"), ttl=1)
    time.sleep(2.2)
    assert finish_move(NetworkStore(settings, prefix)) is True
    assert v2_keys(etcd, prefix) == {}


def test_moved_compares_the_lease_not_its_key_fields():
    lease = V2Lease("10.1.52.0-24", v011_lease("1.2.3.4").encode(), 100)
    v2 = V2Network(config=None, leases=(lease,))
    copy = {"Subnet": "10.1.52.0/24", "Key": "/p/subnets/10.1.52.0-24",
            **json.loads(v011_lease("1.2.3.4"))}
    assert moved(v2, [copy]) is False
    assert moved(v2, []) is False
    assert moved(v2, [{**copy, "PublicIPv6": None}]) is True
    assert moved(v2, [{**copy, "PublicIPv6": None, "PublicIP": "1.2.3.5"}]) is False
    assert moved(V2Network(config=b"{}", leases=()), []) is True


@pytest.fixture(scope="module")
def etcd_without_v2(tmp_path_factory, pki):
    with EtcdServer(tmp_path_factory.mktemp("etcd-v3-only"), pki, host="127.0.0.1") as server:
        yield server


def test_an_etcd_without_the_v2_api_has_nothing_to_carry(etcd_without_v2, pki, prefix):
    """etcd 3.4's default, and today's etcd charm: the look costs one request."""
    settings = EtcdClientSettings.from_connection_string(
        etcd_without_v2.endpoint, str(pki.ca_cert), str(pki.client_cert), str(pki.client_key))
    store = NetworkStore(settings, prefix)
    v2, carried = carry_leases(store, CONFIG)
    assert not v2 and carried == []
    assert finish_move(store) is None
