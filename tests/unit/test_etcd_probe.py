"""adapters/etcd_probe.py: update-status's cheap look at etcd (the standard library only),
against the session's real TLS etcd; and the endpoint that answered last
being tried first, by the probe and by NetworkStore, so that a dead etcd
member listed first does not cost every hook a connect timeout."""
import json
import socket
import subprocess
import sys
import time

import pytest
from unitkit import etcd_client

from charms.flannel.adapters.etcd import EtcdClientSettings, NetworkStore
from charms.flannel.adapters.etcd_probe import lease_values, look
from charms.flannel.facts.etcd_keys import EtcdUnavailable, lease_key, ordered, parse_endpoints


def creds(pki):
    return str(pki.ca_cert), str(pki.client_cert), str(pki.client_key)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_it_sees_the_config_and_whether_the_lease_is_there(etcd, pki, prefix):
    client = etcd_client(etcd)
    client.put(f"{prefix}/config", json.dumps({"Network": "10.1.0.0/16"}))
    client.put(lease_key("10.1.52.0/24", prefix), "{}")
    client.put(lease_key("10.1.7.0/24", prefix), "{}")
    view = look([etcd.endpoint], *creds(pki), prefix=prefix, lease_of="10.1.52.0/24")
    assert (view.config, view.lease, view.endpoint) == (
        {"Network": "10.1.0.0/16"}, True, etcd.endpoint)
    assert view.subnets == ("10.1.52.0/24", "10.1.7.0/24")   # every node's lease
    view = look([etcd.endpoint], *creds(pki), prefix=prefix, lease_of="10.1.53.0/24")
    assert view.lease is False
    view = look([etcd.endpoint], *creds(pki), prefix=prefix)
    assert (view.lease, view.subnets) == (None, ())   # not asked: not looked at


def test_the_leases_are_listed_again_only_when_the_set_changed(etcd, pki, prefix):
    """Each look costs the config, this node's lease and one key for the
    leases' fingerprint, whatever their number; the list comes again only
    when a lease came, went, or was replaced."""
    client = etcd_client(etcd)
    client.put(f"{prefix}/config", json.dumps({"Network": "10.1.0.0/16"}))
    for third in range(1, 41):
        client.put(lease_key(f"10.1.{third}.0/24", prefix), "{}")

    def looked(known):
        return look([etcd.endpoint], *creds(pki), prefix=prefix, lease_of="10.1.1.0/24",
                    known=known)

    first = looked(None)
    assert len(first.subnets) == 40 and first.keys_read == 1 + 1 + 1 + 40
    again = looked(first.leases)
    assert again.leases == first.leases and again.keys_read == 3
    # flanneld renewing a lease (a put over the same key) changes nothing
    client.put(lease_key("10.1.7.0/24", prefix), '{"renewed": true}')
    assert looked(first.leases).keys_read == 3
    # a lease gone: the count says so
    client.delete(lease_key("10.1.7.0/24", prefix))
    gone = looked(first.leases)
    assert "10.1.7.0/24" not in gone.subnets and len(gone.subnets) == 39
    # one gone and another come between two looks: the same count, a newer key
    client.delete(lease_key("10.1.8.0/24", prefix))
    client.put(lease_key("10.1.99.0/24", prefix), "{}")
    replaced = looked(gone.leases)
    assert "10.1.99.0/24" in replaced.subnets and "10.1.8.0/24" not in replaced.subnets
    assert replaced.leases.fingerprint[0] == gone.leases.fingerprint[0] == 39
    # a list from another etcd (rebuilt): listed anew
    stale = type(first.leases)((40, 10 ** 9), ("10.9.9.0/24",))
    assert looked(stale).subnets == replaced.subnets


def test_a_dual_stack_lease_is_found_under_flanneld_s_key_for_both_subnets(etcd, pki, prefix):
    client = etcd_client(etcd)
    client.put(f"{prefix}/subnets/10.1.52.0-24&fd10:1:0:5::-64", "{}")
    view = look([etcd.endpoint], *creds(pki), prefix=prefix,
                lease_of="10.1.52.0/24&fd10:1:0:5::/64")
    assert (view.lease, view.subnets) == (True, ("10.1.52.0/24",))
    assert look([etcd.endpoint], *creds(pki), prefix=prefix,
                lease_of="10.1.52.0/24").lease is False


def test_an_empty_etcd_has_no_config(etcd, pki, prefix):
    view = look([etcd.endpoint], *creds(pki), prefix=prefix, lease_of="10.1.52.0/24")
    assert (view.config, view.lease) == (None, False)


def test_etcd_away_is_a_reason_naming_the_endpoint(pki):
    endpoint = f"https://127.0.0.1:{closed_port()}"
    with pytest.raises(EtcdUnavailable) as caught:
        look([endpoint], *creds(pki))
    assert caught.value.reason == f"cannot reach etcd: {endpoint} (connection refused)"


def test_a_wrong_ca_is_named(etcd, pki, other_pki):
    with pytest.raises(EtcdUnavailable, match="TLS certificate verification failed"):
        look([etcd.endpoint], str(other_pki.ca_cert), str(pki.client_cert), str(pki.client_key))


def test_a_client_certificate_etcd_does_not_trust_is_named(etcd, pki, other_pki):
    with pytest.raises(EtcdUnavailable) as caught:
        look([etcd.endpoint], str(pki.ca_cert), str(other_pki.client_cert),
             str(other_pki.client_key))
    assert "client certificate" in caught.value.reason


def test_missing_credentials_are_named(pki, tmp_path):
    with pytest.raises(EtcdUnavailable, match="certificate, key or CA file is missing"):
        look(["https://127.0.0.1:2379"], str(pki.ca_cert), str(tmp_path / "gone.pem"),
             str(pki.client_key))


def test_endpoints_parse_as_https_host_port_and_anything_else_is_a_reason_to_wait():
    assert parse_endpoints("https://10.0.0.1:2379, https://[fd00::1],") == (
        "https://10.0.0.1:2379", "https://[fd00::1]:2379")
    with pytest.raises(EtcdUnavailable):
        parse_endpoints("http://10.0.0.1:2379")


def test_the_endpoint_that_answered_last_goes_first():
    assert ordered(["a", "b", "c"], "c") == ["c", "a", "b"]
    assert ordered(["a", "b"], "gone") == ["a", "b"]
    assert ordered(["a", "b"], None) == ["a", "b"]


# The silent member's timeout: long enough that a live etcd on a loaded host
# answers well within it, so "was it waited for" is a clear yes or no.
TIMEOUT = 3.0


def test_a_dead_first_member_costs_the_probe_nothing_once_remembered(etcd, pki, silent):
    started = time.monotonic()
    view = look([silent, etcd.endpoint], *creds(pki), timeout=TIMEOUT)
    first = time.monotonic() - started
    assert view.endpoint == etcd.endpoint
    # the control: in order, the silent member is tried and costs its timeout
    assert silent.connections() >= 1 and first >= TIMEOUT
    started = time.monotonic()
    look([silent, etcd.endpoint], *creds(pki), timeout=TIMEOUT, preferred=view.endpoint)
    print(f"first look {first:.2f}s, remembered {time.monotonic() - started:.2f}s")
    assert silent.connections() == 0   # remembered: the silent member is never tried


def test_network_store_tries_the_remembered_endpoint_first(etcd, pki, silent, prefix):
    settings = EtcdClientSettings((silent, etcd.endpoint), *creds(pki), timeout=TIMEOUT)
    started = time.monotonic()
    with NetworkStore(settings, prefix) as store:
        store.read_config()
        answered = store.answered
    first = time.monotonic() - started
    assert answered == etcd.endpoint
    assert silent.connections() >= 1 and first >= TIMEOUT
    with NetworkStore(settings, prefix, preferred=answered) as store:
        store.read_config()
    assert silent.connections() == 0


def test_the_probe_imports_neither_etcd3gw_nor_requests():
    code = ("import sys; import charms.flannel.adapters.etcd_probe; "
            "print(sorted(m for m in ('etcd3gw', 'requests', 'urllib3') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": ":".join(sys.path)}).stdout
    assert out.strip() == "[]"


def test_the_leases_are_listed_without_a_lease_of_this_node_s_and_values_read_when_asked(
        etcd, pki, prefix):
    """A node that holds no lease still counts the others (out of subnets);
    the few leases a look finds unroutable are read whole."""
    client = etcd_client(etcd)
    client.put(f"{prefix}/config", json.dumps({"Network": "10.1.0.0/16"}))
    client.put(lease_key("10.1.7.0/24", prefix), json.dumps({"PublicIP": "192.168.7.3"}))
    view = look([etcd.endpoint], *creds(pki), prefix=prefix, leases=True)
    assert view.lease is None and view.subnets == ("10.1.7.0/24",)
    assert lease_values([etcd.endpoint], *creds(pki), ["10.1.7.0/24", "10.1.8.0/24"],
                        prefix=prefix) == {"10.1.7.0/24": {"PublicIP": "192.168.7.3"}}


@pytest.fixture
def not_etcd(pki):
    """An HTTPS endpoint with etcd's certificate that answers every POST and
    GET with 200 and a JSON list (a proxy, or another service on the port)."""
    import http.server
    import ssl
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b'["not", "etcd"]'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        do_POST = do_GET = answer

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_an_endpoint_that_is_not_etcd_is_a_reason_to_wait_not_a_traceback(pki, not_etcd):
    for asked in ({}, {"lease_of": "10.1.52.0/24", "unit": "flannel/0"}, {"v2": True}):
        with pytest.raises(EtcdUnavailable) as away:
            look([not_etcd], *creds(pki), **asked)
        assert away.value.reason.startswith(f"cannot reach etcd: {not_etcd} (not etcd's answer")
