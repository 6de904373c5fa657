"""flannel's network config JSON, the etcd it is stored in (adapters/etcd.py's
NetworkStore, against a real etcd with client TLS on 127.0.0.1, started
once per session) and the policies that write it (steps/network.py)."""
from __future__ import annotations

import json
import socket
import sys
import threading

import pytest
from unitkit import etcd_client
import requests
import stepkit

from charms.flannel.adapters.credentials import write_client_credentials
from charms.flannel.adapters.etcd import EtcdClientSettings, NetworkStore
from charms.flannel.facts.etcd_keys import DEFAULT_PREFIX, EtcdUnavailable
from charms.flannel.facts.netconfig import NetworkConfig
from charms.flannel.facts.options import InvalidOption, parse_options
from charms.flannel.facts.status import Problem
from charms.flannel.steps import network as network_step
from charms.flannel.steps.context import EtcdRelation
from charms.flannel.steps.flags import NETWORK_CONFIGURED, SERVICE_RUNNING
from charms.flannel.facts.cluster_rules import backend_change_problem
from charms.flannel.steps.outcome import Outcome
from charms.flannel.steps.subnets.etcd import (EtcdSubnets, ensure_network_config,
                                               shared_service_cidr)
from charms.flannel.steps import teardown
from charms.flannel.steps.teardown import backend_change_waits


def options(**changes):
    return parse_options({key.replace("_", "-"): value for key, value in changes.items()})


def network(**changes) -> NetworkConfig:
    """The network config the options ask etcd to hold."""
    return options(**changes).network_config()


def stored(value: dict) -> NetworkConfig:
    """A network config as flanneld reads it from etcd."""
    return NetworkConfig.from_json(value)


def ensure(store, config: NetworkConfig, service_cidr=None) -> bool:
    """What the network step has etcd do: hold `config`, under the rules
    every mode keeps (steps/network.py refusal)."""
    return ensure_network_config(store, config, lambda cluster: network_step.refusal(
        config, cluster), service_cidr)


# -- the network config the options ask for ---------------------------------------

def test_default_options_give_flannels_vxlan_config():
    assert network().to_json() == {
        "Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan", "VNI": 1}}


def test_a_non_default_port_and_vni_reach_the_vxlan_backend():
    config = network(cidr="10.20.0.0/14", subnet_len=26, vni=7, port=4789)
    assert config.to_json() == {"Network": "10.20.0.0/14", "SubnetLen": 26,
                                "Backend": {"Type": "vxlan", "VNI": 7, "Port": 4789}}


def test_host_gw_has_only_its_type():
    config = network(backend="host-gw", vni=7, port=4789)
    assert config.to_json()["Backend"] == {"Type": "host-gw"}


def test_the_config_is_plain_json_that_reads_back_as_the_same_network():
    config = network(port=4789)
    text = json.dumps(config.to_json())
    assert json.loads(text) == config.to_json()
    assert NetworkConfig.from_json(text) == config


# -- EtcdClientSettings -----------------------------------------------------

def test_connection_string_gives_every_endpoint_in_order():
    settings = EtcdClientSettings.from_connection_string(
        "https://10.0.0.5:2379, https://10.0.0.6:2379,,https://[fd00::7]:2379",
        "/ca", "/cert", "/key")
    assert settings.endpoints == ("https://10.0.0.5:2379", "https://10.0.0.6:2379",
                                  "https://[fd00::7]:2379")
    assert (settings.ca_file, settings.cert_file, settings.key_file) == ("/ca", "/cert", "/key")
    assert settings.timeout > 0


def test_an_endpoint_without_port_gets_etcds_port():
    settings = EtcdClientSettings.from_connection_string("https://etcd.example", "c", "c", "k")
    assert settings.endpoints == ("https://etcd.example:2379",)


@pytest.mark.parametrize("value, text", [
    ("", "has not published any endpoint"),
    (" , ", "has not published any endpoint"),
    ("http://10.0.0.5:2379", "not https://host:port"),
    ("10.0.0.5:2379", "not https://host:port"),
    ("https://10.0.0.5:99999", "not https://host:port"),
    # relation data is input: nothing but host and port may reach the unit file
    ("https://10.0.0.5:2379\nExecStartPre=/bin/touch /pwned", "not https://host:port"),
    ("https://10.0.0.5:2379 -etcd-prefix=/elsewhere", "not https://host:port"),
    ("https://10.0.0.5\t:2379", "not https://host:port"),
    ("https://etcd$(id).example:2379", "not https://host:port"),
    ("https://10.0.0.5:2379/v2/keys", "not https://host:port"),
    ("https://user@10.0.0.5:2379", "not https://host:port"),
    ("https://[fe80::1%eth0]:2379", "not https://host:port"),   # "%": a systemd specifier
])
def test_an_unusable_connection_string_is_a_reason_to_wait(value, text):
    with pytest.raises(EtcdUnavailable) as caught:
        EtcdClientSettings.from_connection_string(value, "c", "c", "k")
    assert text in caught.value.reason


# -- a backend change under leases -------------------------------------------

VXLAN = stored({"Network": "10.1.0.0/16", "Backend": {"Type": "vxlan", "VNI": 1}})
HOST_GW = stored({"Network": "10.1.0.0/16", "Backend": {"Type": "host-gw"}})


def test_changing_backend_under_live_leases_is_refused_with_a_clear_reason():
    refused = backend_change_problem(HOST_GW, {"vxlan": 3})
    assert refused.option == "backend"
    assert str(refused) == (
        "Invalid backend: cannot change from vxlan to host-gw while 3 nodes hold leases; "
        "set backend back to vxlan, or remove flannel from every node "
        "(each unit releases its lease as it stops) and add it back")


def test_one_lease_is_named_in_the_singular():
    assert "while 1 node holds a lease;" in str(backend_change_problem(VXLAN, {"host-gw": 1}))


@pytest.mark.parametrize("wanted, backends", [
    (HOST_GW, {"vxlan": 0}),                                   # no node runs: switching is safe
    (stored({**VXLAN.to_json(), "SubnetLen": 26}), {"vxlan": 4}),   # same backend
])
def test_other_changes_are_allowed(wanted, backends):
    assert backend_change_problem(wanted, backends) is None


def test_a_stored_config_without_backend_is_flanneld_s_udp_and_not_switched_under_leases(
        etcd, settings, prefix):
    """flanneld v0.27.4 runs its udp backend on a config with no Backend."""
    with NetworkStore(settings, prefix) as store:
        store.swap_config(None, stored({"Network": "10.1.0.0/16"}))
        etcd_client(etcd).put(f"{prefix}/subnets/10.1.52.0-24", "{}")
        with pytest.raises(InvalidOption, match="from udp to vxlan"):
            ensure(store, VXLAN)


# -- NetworkStore against the real etcd --------------------------------------


def test_a_fresh_prefix_has_no_config_and_no_leases(settings, prefix):
    store = NetworkStore(settings, prefix)
    assert store.read_config() == (None, None)
    assert store.leases() == []


def test_the_config_is_stored_as_flannels_json_at_prefix_config(etcd, settings, prefix):
    config = network(port=4789)
    with NetworkStore(settings, prefix) as store:
        assert ensure(store, config) is True
        assert store.read_config()[0] == config
    value = etcd_client(etcd).get(f"{prefix}/config")
    assert json.loads(value[0]) == {"Network": "10.1.0.0/16", "SubnetLen": 24,
                                    "Backend": {"Type": "vxlan", "VNI": 1, "Port": 4789}}


def test_swap_config_writes_only_over_the_value_it_was_read_as(etcd, settings, prefix):
    store = NetworkStore(settings, prefix)
    assert store.swap_config(None, network()) is True
    assert store.swap_config(None, network(vni=2)) is False   # no longer absent
    _, raw = store.read_config()
    etcd_client(etcd).put(f"{prefix}/config", json.dumps(network(vni=3).to_json()))
    assert store.swap_config(raw, network(vni=4)) is False   # changed since it was read
    assert store.read_config()[0] == network(vni=3)
    _, raw = store.read_config()
    assert store.swap_config(raw, network(vni=4)) is True
    assert store.read_config()[0] == network(vni=4)


def test_writing_the_same_config_again_reports_no_change(etcd, settings, prefix):
    store = NetworkStore(settings, prefix)
    assert ensure(store, network()) is True
    revision = etcd_client(etcd).get(f"{prefix}/config", metadata=True)[0][1]["mod_revision"]
    assert ensure(store, network()) is False
    after = etcd_client(etcd).get(f"{prefix}/config", metadata=True)[0][1]["mod_revision"]
    assert after == revision  # not even rewritten


def test_equal_json_with_other_formatting_counts_as_unchanged(etcd, settings, prefix):
    etcd_client(etcd).put(f"{prefix}/config", json.dumps(network().to_json(), indent=4))
    assert ensure(NetworkStore(settings, prefix), network()) is False


def test_a_different_config_is_written_and_reported(settings, prefix):
    store = NetworkStore(settings, prefix)
    ensure(store, network())
    assert ensure(store, network(cidr="10.2.0.0/16")) is True
    assert str(store.read_config()[0].network) == "10.2.0.0/16"


def test_garbage_at_config_reads_as_none_and_is_overwritten(etcd, settings, prefix):
    etcd_client(etcd).put(f"{prefix}/config", "not json")
    store = NetworkStore(settings, prefix)
    assert store.read_config() == (None, b"not json")
    assert ensure(store, network()) is True
    assert store.read_config()[0] == network()


def test_prefix_slashes_are_normalised(settings, prefix):
    config = stored({"Network": "10.1.0.0/16"})
    ensure(NetworkStore(settings, prefix + "/"), config)
    assert NetworkStore(settings, prefix.lstrip("/")).read_config()[0] == config


def test_leases_lists_each_subnet_with_its_value(etcd, settings, prefix):
    client = etcd_client(etcd)
    lease = {"PublicIP": "192.0.2.10", "BackendType": "vxlan",
             "BackendData": {"VNI": 1, "VtepMAC": "aa:bb:cc:dd:ee:ff"}}
    client.put(f"{prefix}/subnets/10.1.52.0-24", json.dumps(lease))
    client.put(f"{prefix}/subnets/10.1.7.0-24", "corrupt")
    client.put(f"{prefix}/config", json.dumps({"Network": "10.1.0.0/16"}))  # not a lease
    client.put(f"{prefix}-other/subnets/10.1.9.0-24", "{}")  # another prefix
    leases = sorted(NetworkStore(settings, prefix).leases(), key=lambda item: item.subnet)
    assert [(item.subnet, item.ipv6_subnet, item.key, item.attributes, item.public_ip)
            for item in leases] == [
        ("10.1.52.0/24", None, f"{prefix}/subnets/10.1.52.0-24", lease, "192.0.2.10"),
        ("10.1.7.0/24", None, f"{prefix}/subnets/10.1.7.0-24", {}, None)]


def test_a_dual_stack_lease_is_read_and_released_by_its_ipv4_subnet(etcd, settings, prefix):
    """flanneld keys a dual-stack lease by both subnets
    ("10.1.52.0-24&fd10:1:0:5::-64", MakeSubnetKey): read as "10.1.52.0/24-24&..." and
    deleted by a key without its IPv6 part, it stayed 24 h after its node left."""
    client = etcd_client(etcd)
    key = f"{prefix}/subnets/10.1.52.0-24&fd10:1:0:5::-64"
    client.put(key, json.dumps({"PublicIP": "192.0.2.10", "PublicIPv6": "fd00::10"}))
    store = NetworkStore(settings, prefix)
    [lease] = store.leases()
    assert (lease.subnet, lease.ipv6_subnet, lease.key) == \
        ("10.1.52.0/24", "fd10:1:0:5::/64", key)
    assert store.give_lease_back("10.1.52.0/24", held_by={"192.0.2.10"}) is True
    assert store.leases() == []
    assert client.get(key) == []


def test_an_expired_lease_is_no_longer_listed(etcd, settings, prefix):
    client = etcd_client(etcd)
    lease = client.lease(ttl=1)
    client.put(f"{prefix}/subnets/10.1.3.0-24", "{}", lease=lease)
    store = NetworkStore(settings, prefix)
    assert len(store.leases()) == 1
    lease.revoke()
    assert store.leases() == []


def test_release_lease_deletes_only_that_lease(etcd, settings, prefix):
    """The stop hook's way out of a refused backend change: flanneld holds
    its lease 24 h and does not revoke it on stop."""
    client = etcd_client(etcd)
    lease = client.lease(ttl=86400)  # as flanneld holds it: 24 h, not revoked on stop
    client.put(f"{prefix}/subnets/10.1.52.0-24", "{}", lease=lease)
    client.put(f"{prefix}/subnets/10.1.53.0-24", "{}", lease=lease)
    store = NetworkStore(settings, prefix)
    held = [item for item in store.leases() if item.subnet == "10.1.52.0/24"]
    assert store.release_lease(held) is True
    assert [item.subnet for item in store.leases()] == ["10.1.53.0/24"]
    assert store.release_lease(held) is False  # already gone: no error


def test_a_lease_is_given_back_only_by_the_node_that_holds_it(etcd, settings, prefix):
    """A node whose lease expired while it was away (flanneld stopped over a
    day) and was taken by another node since must not delete that node's
    lease when it restarts on a new address: the other node's pods would
    lose their routes everywhere."""
    client = etcd_client(etcd)
    client.put(f"{prefix}/subnets/10.1.52.0-24", json.dumps({"PublicIP": "192.0.2.20"}))
    store = NetworkStore(settings, prefix)
    assert store.give_lease_back("10.1.52.0/24", held_by={"192.0.2.10"}) is False
    assert [item.subnet for item in store.leases()] == ["10.1.52.0/24"]
    assert store.give_lease_back("10.1.52.0/24", held_by={"192.0.2.10", "192.0.2.20"}) is True
    assert store.leases() == []
    assert store.give_lease_back("10.1.52.0/24", held_by={"192.0.2.20"}) is False  # gone
    client.put(f"{prefix}/subnets/10.1.53.0-24", "{}")
    assert store.give_lease_back("10.1.53.0/24") is True   # no owner check asked for


def test_the_last_node_out_of_etcd_mode_forgets_the_network_only_with_no_lease_left(
        etcd, settings, prefix):
    """subnet-manager=kubernetes: the last node to leave takes flannel's
    config and recorded service-cidr with it, in one transaction that holds
    only while no lease exists (a node leasing meanwhile runs on it)."""
    client = etcd_client(etcd)
    store = NetworkStore(settings, prefix)
    ensure(store, network())
    store.record_service_cidr("10.152.183.0/24")
    client.put(f"{prefix}/subnets/10.1.52.0-24&fd10:1:0:5::-64", "{}")
    client.put(f"{prefix}-other/subnets/10.1.9.0-24", "{}")   # another prefix's
    assert store.forget_network_if_unleased() is False
    assert store.read_config()[0] == network()
    client.delete(f"{prefix}/subnets/10.1.52.0-24&fd10:1:0:5::-64")
    assert store.forget_network_if_unleased() is True
    assert (store.read_config()[0], store.read_service_cidr()) == (None, None)
    assert client.get(f"{prefix}-other/subnets/10.1.9.0-24") == [b"{}"]
    assert store.forget_network_if_unleased() is False   # nothing left to forget


def test_a_backend_change_goes_through_once_every_node_released_its_lease(etcd, settings,
                                                                          prefix):
    store = NetworkStore(settings, prefix)
    ensure(store, network())
    etcd_client(etcd).put(f"{prefix}/subnets/10.1.52.0-24", "{}")
    with pytest.raises(InvalidOption):
        ensure(store, network(backend="host-gw"))
    store.release_lease(store.leases())
    assert ensure(store, network(backend="host-gw")) is True


# -- ensure_network_config: what the network step calls ----------------------------

def test_ensure_writes_the_options_once(settings, prefix):
    store = NetworkStore(settings, prefix)
    assert ensure(store, network(vni=9)) is True
    assert store.read_config()[0] == network(vni=9)
    assert ensure(store, network(vni=9)) is False


def test_ensure_refuses_a_backend_change_while_nodes_hold_leases(etcd, settings, prefix):
    store = NetworkStore(settings, prefix)
    ensure(store, network())
    etcd_client(etcd).put(f"{prefix}/subnets/10.1.52.0-24", "{}")
    etcd_client(etcd).put(f"{prefix}/subnets/10.1.53.0-24", "{}")
    with pytest.raises(InvalidOption) as caught:
        ensure(store, network(backend="host-gw"))
    assert "cannot change from vxlan to host-gw while 2 nodes hold leases" in str(caught.value)
    assert store.read_config()[0] == network()  # left as it was


def test_ensure_changes_the_backend_once_no_node_holds_a_lease(settings, prefix):
    store = NetworkStore(settings, prefix)
    ensure(store, network())
    assert ensure(store, network(backend="host-gw")) is True
    assert store.read_config()[0].to_json()["Backend"] == {"Type": "host-gw"}


def test_ensure_changes_the_cidr_under_live_leases(etcd, settings, prefix):
    store = NetworkStore(settings, prefix)
    ensure(store, network())
    etcd_client(etcd).put(f"{prefix}/subnets/10.1.52.0-24", "{}")
    assert ensure(store, network(cidr="10.2.0.0/16")) is True
    assert str(store.read_config()[0].network) == "10.2.0.0/16"


# -- many units at once: first deploy on many machines, concurrent hooks -------

def config_version(etcd, prefix) -> int:
    """How many times the config key was written since it was created."""
    found = etcd_client(etcd).get(f"{prefix}/config", metadata=True)
    return int(found[0][1]["version"]) if found else 0


def test_units_configuring_a_fresh_network_at_once_write_it_exactly_once(etcd, settings,
                                                                         prefix):
    """Eight units' hooks (first deploy, concurrent) each ensure the same
    config at the same moment: one write, the others find it there. With a
    read and a plain put, several read "nothing yet" and each put it again:
    the key's version went to 2..8 and every flanneld saw config events."""
    writers = 8
    barrier = threading.Barrier(writers)
    wrote = []

    def unit():
        with NetworkStore(settings, prefix) as store:
            barrier.wait()
            wrote.append(ensure(store, network()))

    threads = [threading.Thread(target=unit) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wrote) == [False] * (writers - 1) + [True]
    assert config_version(etcd, prefix) == 1
    assert NetworkStore(settings, prefix).read_config()[0] == network()


class ReadThenSomeoneElse(NetworkStore):
    """A store whose first read is followed, before it can write, by another
    unit's write and a flanneld taking a lease (the window between a read
    and a write, made certain)."""

    def __init__(self, settings, prefix, meanwhile):
        super().__init__(settings, prefix)
        self.meanwhile = meanwhile

    def read_config(self):
        read = super().read_config()
        if self.meanwhile:
            self.meanwhile.pop()()
        return read


def test_a_backend_is_never_switched_over_a_config_written_since_it_was_checked(
        etcd, settings, prefix):
    """Unit B reads no config (nothing to check), unit A writes vxlan and a
    node leases, then B writes host-gw: with a plain put B's write went
    through, a backend switched under a live lease (what
    the backend rule refuses)."""
    client = etcd_client(etcd)

    def unit_a_and_its_flanneld():
        ensure(NetworkStore(settings, prefix), network())
        client.put(f"{prefix}/subnets/10.1.52.0-24", "{}")

    store = ReadThenSomeoneElse(settings, prefix, [unit_a_and_its_flanneld])
    with pytest.raises(InvalidOption) as caught:
        ensure(store, network(backend="host-gw"))
    assert "while 1 node holds a lease" in str(caught.value)
    assert NetworkStore(settings, prefix).read_config()[0] == network()


def test_a_config_that_keeps_changing_underneath_is_a_reason_to_wait(etcd, settings, prefix):
    """Another writer wins every round: the unit waits (EtcdUnavailable, a
    waiting status and a retry next hook) instead of looping or overwriting."""
    other = iter(range(100))

    def someone_else_writes():
        ensure(NetworkStore(settings, prefix), network(cidr=f"10.{next(other) + 10}.0.0/16"))

    store = ReadThenSomeoneElse(settings, prefix, [someone_else_writes] * 10)
    with pytest.raises(EtcdUnavailable) as caught:
        ensure(store, network())
    assert "kept changing" in caught.value.reason
    assert store.read_config()[0] != network()


# -- TLS: the relation's CA, whatever the environment says --------------------

@pytest.mark.parametrize("variable", ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
def test_a_foreign_ca_bundle_in_the_environment_does_not_break_tls(
        monkeypatch, settings, prefix, other_pki, variable):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/nonexistent/bundle.pem")
    monkeypatch.setenv("CURL_CA_BUNDLE", "/nonexistent/bundle.pem")
    monkeypatch.setenv(variable, str(other_pki.ca_cert))
    store = NetworkStore(settings, prefix)
    config = stored({"Network": "10.1.0.0/16"})
    assert ensure(store, config) is True
    assert store.read_config()[0] == config


def test_the_environment_trap_is_real_for_an_ordinary_session(monkeypatch, etcd, pki, other_pki):
    # The control for the test above: a session that trusts the environment
    # ignores its own verify= and fails, which is why NetworkStore opts out.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(other_pki.ca_cert))
    session = requests.Session()
    session.verify = str(pki.ca_cert)
    session.cert = (str(pki.client_cert), str(pki.client_key))
    with pytest.raises(requests.exceptions.SSLError):
        session.get(f"{etcd.endpoint}/health", timeout=5)


def test_a_wrong_ca_fails_verification_with_a_readable_reason(etcd, pki, other_pki):
    settings = EtcdClientSettings((etcd.endpoint,), str(other_pki.ca_cert),
                                  str(pki.client_cert), str(pki.client_key), timeout=5)
    with pytest.raises(EtcdUnavailable) as caught:
        NetworkStore(settings).read_config()
    reason = caught.value.reason
    assert etcd.endpoint in reason
    assert "TLS certificate verification failed" in reason
    assert "Traceback" not in reason and "HTTPSConnectionPool" not in reason


def test_a_client_certificate_from_another_ca_is_rejected_by_etcd(etcd, pki, other_pki):
    settings = EtcdClientSettings((etcd.endpoint,), str(pki.ca_cert),
                                  str(other_pki.client_cert), str(other_pki.client_key), 5)
    with pytest.raises(EtcdUnavailable, match="rejected the client certificate"):
        NetworkStore(settings).read_config()


def test_missing_credential_files_are_named_as_such(etcd, pki, tmp_path):
    settings = EtcdClientSettings((etcd.endpoint,), str(pki.ca_cert),
                                  str(tmp_path / "absent-cert.pem"), str(pki.client_key), 5)
    with pytest.raises(EtcdUnavailable, match="certificate, key or CA file is missing"):
        NetworkStore(settings).read_config()


# -- unreachable etcd ----------------------------------------------------------

def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again once the socket goes


def test_a_closed_port_gives_a_readable_reason(pki):
    endpoint = f"https://127.0.0.1:{closed_port()}"
    settings = EtcdClientSettings((endpoint,), str(pki.ca_cert), str(pki.client_cert),
                                  str(pki.client_key), timeout=0.5)
    with pytest.raises(EtcdUnavailable) as caught:
        NetworkStore(settings).read_config()
    assert caught.value.reason == f"cannot reach etcd: {endpoint} (connection refused)"


def test_a_silent_server_times_out_instead_of_hanging(pki, silent):
    settings = EtcdClientSettings((silent,), str(pki.ca_cert), str(pki.client_cert),
                                  str(pki.client_key), timeout=0.3)
    with pytest.raises(EtcdUnavailable) as caught:
        NetworkStore(settings).read_config()
    # one try, given up after its timeout (a hang fails on the test's time limit)
    assert silent.connections() == 1
    assert caught.value.reason == f"cannot reach etcd: {silent} (no answer within 0.3s)"


def test_every_failed_endpoint_is_named(pki):
    endpoints = tuple(f"https://127.0.0.1:{closed_port()}" for _ in range(2))
    settings = EtcdClientSettings(endpoints, str(pki.ca_cert), str(pki.client_cert),
                                  str(pki.client_key), timeout=0.5)
    with pytest.raises(EtcdUnavailable) as caught:
        NetworkStore(settings).leases()
    assert all(endpoint in caught.value.reason for endpoint in endpoints)


def test_a_dead_endpoint_is_skipped_for_a_live_one(etcd, pki, prefix):
    dead = f"https://127.0.0.1:{closed_port()}"   # refuses at once, whatever the timeout
    settings = EtcdClientSettings((dead, etcd.endpoint), str(pki.ca_cert),
                                  str(pki.client_cert), str(pki.client_key), timeout=5)
    store = NetworkStore(settings, prefix)
    config = stored({"Network": "10.1.0.0/16"})
    assert ensure(store, config) is True
    assert store.read_config()[0] == config
    assert store.answered == etcd.endpoint


# -- the network step on a unit (steps.network.run), etcd at flannel's own prefix ---------

def relation(etcd, pki) -> EtcdRelation:
    """What the etcd charm publishes: its endpoints and the client TLS material."""
    return EtcdRelation(etcd.connection_string, pki.ca_cert.read_text(),
                        pki.client_cert.read_text(), pki.client_key.read_text())


def hook(root, machine, etcd, pki, *, config=None, service_cidr=None, state=None,
         name="config-changed"):
    """One hook's context on a unit whose files live below `root` (`state`: the
    unit's key-value store of an earlier hook)."""
    root.mkdir(exist_ok=True)
    ctx = stepkit.context(root, machine=machine, hook=name, config=config,
                          etcd=relation(etcd, pki), kv=state)
    ctx.juju.service = service_cidr
    return ctx


def etcd_network(settings) -> NetworkConfig | None:
    with NetworkStore(settings, DEFAULT_PREFIX) as store:
        return store.read_config()[0]


def test_a_unit_writes_its_network_to_etcd_and_remembers_it_as_confirmed(
        settings, flannels_prefix, netns_machine, etcd, pki, tmp_path):
    ctx = hook(tmp_path / "unit", netns_machine, etcd, pki, config={"vni": 7})
    out = network_step.run(ctx)
    assert NETWORK_CONFIGURED in out.set_flags and SERVICE_RUNNING in out.clear_flags
    assert out.problems[Problem.NETWORK] is None and out.problems[Problem.ETCD] is None
    assert etcd_network(settings) == network(vni=7)
    assert ctx.confirmed == network(vni=7)
    assert ctx.state.etcd_endpoints == etcd.connection_string
    assert ctx.client_files.key_file.read_text() == pki.client_key.read_text()


def etcd_revision(etcd) -> int:
    return int(etcd_client(etcd).status()["header"]["revision"])


def test_a_unit_serving_the_network_etcd_holds_writes_nothing_and_needs_no_etcd3gw(
        settings, flannels_prefix, netns_machine, etcd, pki, tmp_path, monkeypatch):
    """Every unit serves the network as it joins (the re-add cycle, a
    deploy): once one wrote it, the others find it there with one look over
    the standard library; importing etcd3gw (a quarter of a second of a
    hook) is for writing. A new service-cidr is still written."""
    first = hook(tmp_path / "first", netns_machine, etcd, pki, service_cidr="10.152.183.0/24")
    assert NETWORK_CONFIGURED in network_step.run(first).set_flags
    written = etcd_revision(etcd)
    # (importing the etcd3gw adapter now fails the test)
    monkeypatch.setitem(sys.modules, "charms.flannel.adapters.etcd", None)
    for name, cidr in (("control-plane", "10.152.183.0/24"), ("worker", None)):
        ctx = hook(tmp_path / name, netns_machine, etcd, pki, service_cidr=cidr)
        out = network_step.run(ctx)
        assert NETWORK_CONFIGURED in out.set_flags and out.problems[Problem.ETCD] is None
        assert ctx.confirmed == network() and ctx.state.etcd_endpoints == etcd.connection_string
    assert etcd_revision(etcd) == written
    monkeypatch.undo()
    moved = hook(tmp_path / "moved", netns_machine, etcd, pki, service_cidr="10.152.0.0/16")
    assert NETWORK_CONFIGURED in network_step.run(moved).set_flags
    with NetworkStore(settings, DEFAULT_PREFIX) as store:
        assert store.read_service_cidr() == "10.152.0.0/16"


def test_a_unit_joining_a_network_already_written_still_carries_flannel_v011s_leases(
        settings, flannels_prefix, netns_machine, etcd, pki, tmp_path):
    """A node still on flannel v0.11 (v2 keys only) in a cluster whose v3
    network another unit wrote: the unit's look finds the v2 lease before
    its flanneld's first start, and carries it, so that the new flanneld
    leases no subnet a v0.11 node holds."""
    assert NETWORK_CONFIGURED in network_step.run(
        hook(tmp_path / "first", netns_machine, etcd, pki)).set_flags
    lease = json.dumps({"PublicIP": "172.31.254.12", "BackendType": "vxlan",
                        "BackendData": {"VtepMAC": "5e:c6:6b:91:9e:78"}})
    with etcd.session() as session:
        reply = session.put(f"{etcd.endpoint}/v2/keys{DEFAULT_PREFIX}/subnets/10.1.52.0-24",
                            data={"value": lease, "ttl": "600"}, timeout=5)
    assert reply.status_code in (200, 201), reply.text
    joining = hook(tmp_path / "joining", netns_machine, etcd, pki)
    out = network_step.run(joining)
    assert NETWORK_CONFIGURED in out.set_flags and joining.state.v2_network_seen is True
    with NetworkStore(settings, DEFAULT_PREFIX) as store:
        assert [held.public_ip for held in store.leases()] == ["172.31.254.12"]


def test_a_blocked_unit_writes_its_network_back_only_into_an_etcd_that_lost_it(
        settings, flannels_prefix, netns_machine, etcd, pki, tmp_path):
    """A unit blocked on an option keeps flanneld on the network it runs:
    an etcd rebuilt empty gets that network back; one that holds a network
    (another unit's, maybe newer) is left as it is."""
    ctx = hook(tmp_path / "unit", netns_machine, etcd, pki, config={"vni": 7})
    subnets = EtcdSubnets(ctx)
    refuse_nothing = lambda cluster: None   # noqa: E731
    assert subnets.serve(network(), Outcome(), replace=True, refusal=refuse_nothing)
    out = Outcome()
    assert subnets.serve(network(vni=7), out, replace=False, refusal=refuse_nothing) is False
    assert etcd_network(settings) == network() and out.log == []
    etcd_client(etcd).delete(f"{DEFAULT_PREFIX}/config")
    assert subnets.serve(network(vni=7), out, replace=False, refusal=refuse_nothing)
    assert etcd_network(settings) == network(vni=7)
    assert out.log == [("etcd held no flannel network: wrote back 10.1.0.0/16, the one "
                        "flanneld runs here", True)]


def test_a_backend_change_under_a_live_lease_blocks_the_unit_and_keeps_flanneld_as_it_is(
        settings, flannels_prefix, netns_machine, etcd, pki, tmp_path):
    first = hook(tmp_path / "unit", netns_machine, etcd, pki)
    network_step.run(first)
    etcd_client(etcd).put(f"{DEFAULT_PREFIX}/subnets/10.1.52.0-24",
                          json.dumps({"PublicIP": "192.0.2.10"}))
    ctx = hook(tmp_path / "unit", netns_machine, etcd, pki, config={"backend": "host-gw"},
               state=first.state.kv)
    out = network_step.run(ctx)
    assert out.problems[Problem.NETWORK] == (
        "Invalid backend: cannot change from vxlan to host-gw while 1 node holds a lease; "
        "set backend back to vxlan, or remove flannel from every node "
        "(each unit releases its lease as it stops) and add it back")
    assert out.set_flags == [] and out.clear_flags == []   # flanneld is not restarted
    assert etcd_network(settings) == network()
    assert ctx.confirmed == network()


def test_the_control_planes_service_cidr_reaches_the_workers_units(settings, prefix):
    """Only the control plane publishes service-cidr, to its own flannel
    unit: recorded in etcd, the units beside workers refuse a cidr over it
    too, before any of them writes the network config."""
    with NetworkStore(settings, prefix) as worker:
        assert shared_service_cidr(worker, None) is None   # nothing recorded yet
    with NetworkStore(settings, prefix) as control_plane:
        assert shared_service_cidr(control_plane, "10.152.183.0/24") == "10.152.183.0/24"
    with NetworkStore(settings, prefix) as worker:
        assert shared_service_cidr(worker, None) == "10.152.183.0/24"
        assert worker.read_config() == (None, None)   # the record is no network config
    with NetworkStore(settings, prefix) as control_plane:   # a new service-cidr replaces it
        shared_service_cidr(control_plane, "10.152.0.0/16")
        assert control_plane.read_service_cidr() == "10.152.0.0/16"


def test_a_cidr_over_the_recorded_service_cidr_is_refused_before_it_is_written(
        settings, prefix):
    with NetworkStore(settings, prefix) as control_plane:
        services = shared_service_cidr(control_plane, "10.152.183.0/24")
        assert ensure(control_plane, network(), services) is True
    with NetworkStore(settings, prefix) as worker:
        wanted = options(cidr="10.152.0.0/16")
        with pytest.raises(InvalidOption) as refused:
            ensure(worker, wanted.network_config(), shared_service_cidr(worker, None))
        assert refused.value.option == "cidr" and "10.152.183.0/24" in refused.value.reason
        assert worker.read_config()[0] == network()   # what was there stays


def test_a_worker_unit_refuses_a_cidr_over_the_recorded_service_cidr_and_writes_nothing(
        settings, flannels_prefix, netns_machine, etcd, pki, tmp_path):
    """`juju config flannel cidr=10.152.0.0/16` on a cluster whose services
    live in 10.152.183.0/24: every unit is blocked naming the option, and
    etcd keeps no network over the services (kube-proxy's routes would
    swallow pod traffic)."""
    control_plane = hook(tmp_path / "control-plane", netns_machine, etcd, pki,
                         service_cidr="10.152.183.0/24")
    assert NETWORK_CONFIGURED in network_step.run(control_plane).set_flags
    worker = hook(tmp_path / "worker", netns_machine, etcd, pki,
                  config={"cidr": "10.152.0.0/16"})
    out = network_step.run(worker)
    assert out.problems[Problem.NETWORK] == (
        "Invalid cidr: 10.152.0.0/16 overlaps the Kubernetes service-cidr 10.152.183.0/24 "
        "the control plane publishes; use a range outside it")
    assert NETWORK_CONFIGURED not in out.set_flags
    assert etcd_network(settings) == network()   # what was there stays
    assert worker.confirmed is None
    again = hook(tmp_path / "worker", netns_machine, etcd, pki, config={"cidr": "10.2.0.0/16"},
                 state=worker.state.kv)
    out = network_step.run(again)
    assert out.problems[Problem.NETWORK] is None and NETWORK_CONFIGURED in out.set_flags
    assert etcd_network(settings) == network(cidr="10.2.0.0/16")


# -- a backend change pending: the stop hook gives the lease back -------------------------

SUBNET_ENV = ("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.52.1/24\nFLANNEL_MTU=1450\n"
              "FLANNEL_IPMASQ=false\n")


@pytest.mark.parametrize("config, confirmed, released", [
    ({"backend": "host-gw"}, VXLAN, True),
    ({}, HOST_GW, True),
    ({"cidr": "10.2.0.0/16"}, VXLAN, False),   # a cidr change is no backend change
    ({"backend": "host-gw"}, None, False),     # nothing confirmed yet
])
def test_a_stopping_unit_gives_its_lease_back_only_while_a_backend_change_waits(
        config, confirmed, released, settings, flannels_prefix, netns_machine, etcd, pki,
        tmp_path):
    """A backend change is refused while any node holds a lease: the stop
    hook gives this node's back only then (else a unit added back keeps its
    subnet)."""
    ip = netns_machine.netns
    ip(["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"])
    ip(["ip", "addr", "add", "192.0.2.10/24", "dev", "eth0"])
    ctx = hook(tmp_path / "unit", netns_machine, etcd, pki, config=config, name="stop")
    ctx.state.confirmed_network = confirmed.to_json() if confirmed else None
    ctx.state.etcd_endpoints = etcd.connection_string
    etcd_relation = ctx.juju.etcd()
    write_client_credentials(ctx.record, ctx.paths, etcd_relation.ca, etcd_relation.cert,
                             etcd_relation.key)
    ctx.paths.subnet_env.parent.mkdir(parents=True)
    ctx.paths.subnet_env.write_text(SUBNET_ENV)
    etcd_client(etcd).put(f"{DEFAULT_PREFIX}/subnets/10.1.52.0-24",
                          json.dumps({"PublicIP": "192.0.2.10"}))
    assert backend_change_waits(ctx) is released
    teardown.run(ctx, masked=False, remove_nrpe_check=lambda: None)
    with NetworkStore(settings, DEFAULT_PREFIX) as store:
        assert [lease.subnet for lease in store.leases()] == \
            ([] if released else ["10.1.52.0/24"])


def test_client_files_rotated_while_an_option_is_invalid_restart_flanneld_on_them(
        settings, flannels_prefix, netns_machine, etcd, pki, tmp_path):
    """etcd's charm hands out a new client certificate while an option is
    invalid: the files are written, and flanneld restarts on them (it read
    the old ones at start, and would run on them, `active`, until its lease
    went)."""
    from charms.flannel.steps import flanneld
    from sandbox.pki import make_client_cert
    first = hook(tmp_path / "unit", netns_machine, etcd, pki)
    assert NETWORK_CONFIGURED in network_step.run(first).set_flags
    on = EtcdSubnets(first).flanneld(Outcome())
    first.state.flanneld_inputs = flanneld.flanneld_inputs(first, first.confirmed, on)
    cert, key = make_client_cert(tmp_path, pki.ca_cert, pki.ca_key, "rotated")
    rotated = hook(tmp_path / "unit", netns_machine, etcd, pki, config={"vni": 0},
                   state=first.state.kv)
    rotated.juju.etcd_relation = EtcdRelation(etcd.connection_string, pki.ca_cert.read_text(),
                                              cert.read_text(), key.read_text())
    assert rotated.invalid_option is not None
    out = network_step.run(rotated)
    assert rotated.client_files.key_file.read_text() == key.read_text()
    assert SERVICE_RUNNING in out.clear_flags and NETWORK_CONFIGURED in out.set_flags
