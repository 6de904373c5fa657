"""flannel's network config JSON and the etcd it is stored in (a real etcd with
client TLS on 127.0.0.1, started once per session)."""
import json
import socket
import threading

import etcd3gw
import pytest
import requests

from charms.flannel.network import (EtcdClientSettings, EtcdUnavailable,
                                    NetworkStore, backend_change_pending, check_backend_change,
                                    ensure_network_config, give_lease_back, network_config,
                                    shared_service_cidr, write_network)
from charms.flannel.options import InvalidOption, parse_options


def options(**changes):
    return parse_options({key.replace("_", "-"): value for key, value in changes.items()})


# -- network_config ---------------------------------------------------------

def test_default_options_give_flannels_vxlan_config():
    assert network_config(options()) == {
        "Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan", "VNI": 1}}


def test_a_non_default_port_and_vni_reach_the_vxlan_backend():
    config = network_config(options(cidr="10.20.0.0/14", subnet_len=26, vni=7, port=4789))
    assert config == {"Network": "10.20.0.0/14", "SubnetLen": 26,
                      "Backend": {"Type": "vxlan", "VNI": 7, "Port": 4789}}


def test_host_gw_has_only_its_type():
    config = network_config(options(backend="host-gw", vni=7, port=4789))
    assert config["Backend"] == {"Type": "host-gw"}


def test_the_config_is_plain_json():
    config = network_config(options(port=4789))
    assert json.loads(json.dumps(config)) == config


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


# -- check_backend_change ---------------------------------------------------

VXLAN = {"Network": "10.1.0.0/16", "Backend": {"Type": "vxlan", "VNI": 1}}
HOST_GW = {"Network": "10.1.0.0/16", "Backend": {"Type": "host-gw"}}


def test_changing_backend_under_live_leases_is_refused_with_a_clear_reason():
    with pytest.raises(InvalidOption) as caught:
        check_backend_change(VXLAN, HOST_GW, live_leases=3)
    assert caught.value.option == "backend"
    assert str(caught.value) == (
        "Invalid backend: cannot change from vxlan to host-gw while 3 nodes hold leases; "
        "set backend back to vxlan, or remove flannel from every node "
        "(each unit releases its lease as it stops) and add it back")


def test_one_lease_is_named_in_the_singular():
    with pytest.raises(InvalidOption, match="while 1 node holds a lease;"):
        check_backend_change(HOST_GW, VXLAN, live_leases=1)


@pytest.mark.parametrize("current, wanted, leases", [
    (None, HOST_GW, 5),                     # nothing stored yet
    (VXLAN, HOST_GW, 0),                    # no node runs: switching is safe
    (VXLAN, {**VXLAN, "SubnetLen": 26}, 4),  # same backend
    ({"Network": "10.1.0.0/16"}, VXLAN, 4),  # no Backend means flannel's default, vxlan
])
def test_other_changes_are_allowed(current, wanted, leases):
    check_backend_change(current, wanted, leases)


def test_a_stored_config_without_backend_counts_as_vxlan():
    with pytest.raises(InvalidOption, match="from vxlan to host-gw"):
        check_backend_change({"Network": "10.1.0.0/16"}, HOST_GW, 2)


# -- NetworkStore against the real etcd --------------------------------------

def raw_client(etcd):
    """An etcd3gw client of the test's own, to look behind NetworkStore's back."""
    return etcd3gw.Etcd3Client(host=etcd.host, port=etcd.port, protocol="https",
                               timeout=5, session=etcd.session())


def test_a_fresh_prefix_has_no_config_and_no_leases(settings, prefix):
    store = NetworkStore(settings, prefix)
    assert store.read_config() is None
    assert store.leases() == []


def test_write_config_stores_flannels_json_at_prefix_config(etcd, settings, prefix):
    config = network_config(options(port=4789))
    with NetworkStore(settings, prefix) as store:
        assert store.write_config(config) is True
        assert store.read_config() == config
    stored = raw_client(etcd).get(f"{prefix}/config")
    assert json.loads(stored[0]) == config


def test_writing_the_same_config_again_reports_no_change(etcd, settings, prefix):
    store = NetworkStore(settings, prefix)
    config = network_config(options())
    assert store.write_config(config) is True
    revision = raw_client(etcd).get(f"{prefix}/config", metadata=True)[0][1]["mod_revision"]
    assert store.write_config(dict(config)) is False
    after = raw_client(etcd).get(f"{prefix}/config", metadata=True)[0][1]["mod_revision"]
    assert after == revision  # not even rewritten


def test_equal_json_with_other_formatting_counts_as_unchanged(etcd, settings, prefix):
    config = network_config(options())
    raw_client(etcd).put(f"{prefix}/config", json.dumps(config, indent=4))
    assert NetworkStore(settings, prefix).write_config(config) is False


def test_a_different_config_is_written_and_reported(settings, prefix):
    store = NetworkStore(settings, prefix)
    store.write_config(network_config(options()))
    new = network_config(options(cidr="10.2.0.0/16"))
    assert store.write_config(new) is True
    assert store.read_config()["Network"] == "10.2.0.0/16"


def test_garbage_at_config_reads_as_none_and_is_overwritten(etcd, settings, prefix):
    raw_client(etcd).put(f"{prefix}/config", "not json")
    store = NetworkStore(settings, prefix)
    assert store.read_config() is None
    assert store.write_config(network_config(options())) is True


def test_prefix_slashes_are_normalised(settings, prefix):
    NetworkStore(settings, prefix + "/").write_config({"Network": "10.1.0.0/16"})
    assert NetworkStore(settings, prefix.lstrip("/")).read_config() == {"Network": "10.1.0.0/16"}


def test_leases_lists_each_subnet_with_its_value(etcd, settings, prefix):
    client = raw_client(etcd)
    lease = {"PublicIP": "192.0.2.10", "BackendType": "vxlan",
             "BackendData": {"VNI": 1, "VtepMAC": "aa:bb:cc:dd:ee:ff"}}
    client.put(f"{prefix}/subnets/10.1.52.0-24", json.dumps(lease))
    client.put(f"{prefix}/subnets/10.1.7.0-24", "corrupt")
    client.put(f"{prefix}/config", json.dumps({"Network": "10.1.0.0/16"}))  # not a lease
    client.put(f"{prefix}-other/subnets/10.1.9.0-24", "{}")  # another prefix
    leases = sorted(NetworkStore(settings, prefix).leases(), key=lambda item: item["Subnet"])
    assert leases == [
        {"Subnet": "10.1.52.0/24", "Key": f"{prefix}/subnets/10.1.52.0-24", **lease},
        {"Subnet": "10.1.7.0/24", "Key": f"{prefix}/subnets/10.1.7.0-24"}]


def test_a_dual_stack_lease_is_read_and_released_by_its_ipv4_subnet(etcd, settings, prefix):
    """flanneld keys a dual-stack lease by both subnets
    ("10.1.52.0-24&fd10:1:0:5::-64", MakeSubnetKey): read as "10.1.52.0/24-24&..." and
    deleted by a key without its IPv6 part, it stayed 24 h after its node left."""
    client = raw_client(etcd)
    key = f"{prefix}/subnets/10.1.52.0-24&fd10:1:0:5::-64"
    client.put(key, json.dumps({"PublicIP": "192.0.2.10", "PublicIPv6": "fd00::10"}))
    store = NetworkStore(settings, prefix)
    [lease] = store.leases()
    assert (lease["Subnet"], lease["IPv6Subnet"], lease["Key"]) == \
        ("10.1.52.0/24", "fd10:1:0:5::/64", key)
    assert give_lease_back(store, "10.1.52.0/24", held_by={"192.0.2.10"}) is True
    assert store.leases() == []


def test_an_expired_lease_is_no_longer_listed(etcd, settings, prefix):
    client = raw_client(etcd)
    lease = client.lease(ttl=1)
    client.put(f"{prefix}/subnets/10.1.3.0-24", "{}", lease=lease)
    store = NetworkStore(settings, prefix)
    assert len(store.leases()) == 1
    lease.revoke()
    assert store.leases() == []


@pytest.mark.parametrize("wanted, confirmed, pending", [
    (HOST_GW, VXLAN, True),
    (VXLAN, HOST_GW, True),
    (VXLAN, {**VXLAN, "Network": "10.2.0.0/16"}, False),   # a cidr change is no backend change
    (HOST_GW, None, False),                                 # nothing confirmed yet
])
def test_a_backend_change_is_pending_when_etcd_holds_another_backend(wanted, confirmed,
                                                                     pending):
    """The stop hook releases its lease only then (ImportError on main)."""
    assert backend_change_pending(wanted, confirmed) is pending


def test_release_lease_deletes_only_that_lease(etcd, settings, prefix):
    """The stop hook's way out of a refused backend change: on main a lease
    stayed for 24 h (NetworkStore had no release_lease: AttributeError)."""
    client = raw_client(etcd)
    lease = client.lease(ttl=86400)  # as flanneld holds it: 24 h, not revoked on stop
    client.put(f"{prefix}/subnets/10.1.52.0-24", "{}", lease=lease)
    client.put(f"{prefix}/subnets/10.1.53.0-24", "{}", lease=lease)
    store = NetworkStore(settings, prefix)
    assert store.release_lease("10.1.52.0/24") is True
    assert [item["Subnet"] for item in store.leases()] == ["10.1.53.0/24"]
    assert store.release_lease("10.1.52.0/24") is False  # already gone: no error


def test_a_lease_is_given_back_only_by_the_node_that_holds_it(etcd, settings, prefix):
    """A node whose lease expired while it was away (flanneld stopped over a
    day) and was taken by another node since must not delete that node's
    lease when it restarts on a new address: the other node's pods would
    lose their routes everywhere."""
    client = raw_client(etcd)
    client.put(f"{prefix}/subnets/10.1.52.0-24", json.dumps({"PublicIP": "192.0.2.20"}))
    store = NetworkStore(settings, prefix)
    assert give_lease_back(store, "10.1.52.0/24", held_by={"192.0.2.10"}) is False
    assert [item["Subnet"] for item in store.leases()] == ["10.1.52.0/24"]
    assert give_lease_back(store, "10.1.52.0/24", held_by={"192.0.2.10", "192.0.2.20"}) is True
    assert store.leases() == []
    assert give_lease_back(store, "10.1.52.0/24", held_by={"192.0.2.20"}) is False  # gone
    client.put(f"{prefix}/subnets/10.1.53.0-24", "{}")
    assert give_lease_back(store, "10.1.53.0/24") is True   # no owner check asked for


def test_a_backend_change_goes_through_once_every_node_released_its_lease(etcd, settings,
                                                                          prefix):
    store = NetworkStore(settings, prefix)
    ensure_network_config(store, options())
    raw_client(etcd).put(f"{prefix}/subnets/10.1.52.0-24", "{}")
    with pytest.raises(InvalidOption):
        ensure_network_config(store, options(backend="host-gw"))
    store.release_lease("10.1.52.0/24")
    assert ensure_network_config(store, options(backend="host-gw")) is True


# -- ensure_network_config: what the charm's handler calls ----------------------

def test_ensure_writes_the_options_once(settings, prefix):
    store = NetworkStore(settings, prefix)
    assert ensure_network_config(store, options(vni=9)) is True
    assert store.read_config() == network_config(options(vni=9))
    assert ensure_network_config(store, options(vni=9)) is False


def test_ensure_refuses_a_backend_change_while_nodes_hold_leases(etcd, settings, prefix):
    store = NetworkStore(settings, prefix)
    ensure_network_config(store, options())
    raw_client(etcd).put(f"{prefix}/subnets/10.1.52.0-24", "{}")
    raw_client(etcd).put(f"{prefix}/subnets/10.1.53.0-24", "{}")
    with pytest.raises(InvalidOption) as caught:
        ensure_network_config(store, options(backend="host-gw"))
    assert "cannot change from vxlan to host-gw while 2 nodes hold leases" in str(caught.value)
    assert store.read_config() == network_config(options())  # left as it was


def test_ensure_changes_the_backend_once_no_node_holds_a_lease(settings, prefix):
    store = NetworkStore(settings, prefix)
    ensure_network_config(store, options())
    assert ensure_network_config(store, options(backend="host-gw")) is True
    assert store.read_config()["Backend"] == {"Type": "host-gw"}


def test_ensure_changes_the_cidr_under_live_leases(etcd, settings, prefix):
    store = NetworkStore(settings, prefix)
    ensure_network_config(store, options())
    raw_client(etcd).put(f"{prefix}/subnets/10.1.52.0-24", "{}")
    assert ensure_network_config(store, options(cidr="10.2.0.0/16")) is True


# -- many units at once: first deploy on many machines, concurrent hooks -------

def config_version(etcd, prefix) -> int:
    """How many times the config key was written since it was created."""
    found = raw_client(etcd).get(f"{prefix}/config", metadata=True)
    return int(found[0][1]["version"]) if found else 0


def test_units_configuring_a_fresh_network_at_once_write_it_exactly_once(etcd, settings,
                                                                         prefix):
    """Eight units' hooks (first deploy, concurrent) each ensure the same
    config at the same moment: one write, the others find it there. On main
    (read, then put) several read "nothing yet" and each put it again: the
    key's version went to 2..8 and every flanneld saw config events."""
    writers = 8
    barrier = threading.Barrier(writers)
    wrote = []

    def unit():
        with NetworkStore(settings, prefix) as store:
            barrier.wait()
            wrote.append(ensure_network_config(store, options()))

    threads = [threading.Thread(target=unit) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wrote) == [False] * (writers - 1) + [True]
    assert config_version(etcd, prefix) == 1
    assert NetworkStore(settings, prefix).read_config() == network_config(options())


class ReadThenSomeoneElse(NetworkStore):
    """A store whose first read is followed, before it can write, by another
    unit's write and a flanneld taking a lease (the window between a read
    and a write, made certain)."""

    def __init__(self, settings, prefix, meanwhile):
        super().__init__(settings, prefix)
        self.meanwhile = meanwhile

    def read_config_value(self):
        read = super().read_config_value()
        if self.meanwhile:
            self.meanwhile.pop()()
        return read


def test_a_backend_is_never_switched_over_a_config_written_since_it_was_checked(
        etcd, settings, prefix):
    """Unit B reads no config (nothing to check), unit A writes vxlan and a
    node leases, then B writes host-gw: on main B's put went through, a
    backend switched under a live lease (what check_backend_change refuses)."""
    client = raw_client(etcd)

    def unit_a_and_its_flanneld():
        NetworkStore(settings, prefix).write_config(network_config(options()))
        client.put(f"{prefix}/subnets/10.1.52.0-24", "{}")

    store = ReadThenSomeoneElse(settings, prefix, [unit_a_and_its_flanneld])
    with pytest.raises(InvalidOption) as caught:
        ensure_network_config(store, options(backend="host-gw"))
    assert "while 1 node holds a lease" in str(caught.value)
    assert NetworkStore(settings, prefix).read_config() == network_config(options())


def test_a_config_that_keeps_changing_underneath_is_a_reason_to_wait(etcd, settings, prefix):
    """Another writer wins every round: the unit waits (EtcdUnavailable, a
    waiting status and a retry next hook) instead of looping or overwriting."""
    other = iter(range(100))

    def someone_else_writes():
        NetworkStore(settings, prefix).write_config(
            network_config(options(cidr=f"10.{next(other) + 10}.0.0/16")))

    store = ReadThenSomeoneElse(settings, prefix, [someone_else_writes] * 10)
    with pytest.raises(EtcdUnavailable) as caught:
        ensure_network_config(store, options())
    assert "kept changing" in caught.value.reason
    assert store.read_config() != network_config(options())


# -- TLS: the relation's CA, whatever the environment says --------------------

@pytest.mark.parametrize("variable", ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
def test_a_foreign_ca_bundle_in_the_environment_does_not_break_tls(
        monkeypatch, settings, prefix, other_pki, variable):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/nonexistent/bundle.pem")
    monkeypatch.setenv("CURL_CA_BUNDLE", "/nonexistent/bundle.pem")
    monkeypatch.setenv(variable, str(other_pki.ca_cert))
    store = NetworkStore(settings, prefix)
    assert store.write_config({"Network": "10.1.0.0/16"}) is True
    assert store.read_config() == {"Network": "10.1.0.0/16"}


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
    assert store.write_config({"Network": "10.1.0.0/16"}) is True
    assert store.read_config() == {"Network": "10.1.0.0/16"}


# -- the service-cidr, shared through etcd ----------------------------------------

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
        assert worker.read_config() is None   # the record is no network config
    with NetworkStore(settings, prefix) as control_plane:   # a new service-cidr replaces it
        shared_service_cidr(control_plane, "10.152.0.0/16")
        assert control_plane.read_service_cidr() == "10.152.0.0/16"


def test_a_worker_unit_refuses_a_cidr_over_the_recorded_service_cidr_and_writes_nothing(
        settings, prefix):
    """`juju config flannel cidr=10.152.0.0/16` on a cluster whose services
    live in 10.152.183.0/24: every unit is blocked naming the option, and
    etcd keeps no network over the services (kube-proxy's routes would
    swallow pod traffic)."""
    with NetworkStore(settings, prefix) as control_plane:
        write_network(control_plane, options(), "10.152.183.0/24")
    with NetworkStore(settings, prefix) as worker:
        with pytest.raises(InvalidOption) as refused:
            write_network(worker, options(cidr="10.152.0.0/16"), None)
        assert refused.value.option == "cidr" and "10.152.183.0/24" in refused.value.reason
        assert worker.read_config()["Network"] == "10.1.0.0/16"   # what was there stays
        assert write_network(worker, options(cidr="10.2.0.0/16"), None) is True
