"""The sandbox's PKI and etcd, which the other tests rely on."""
import os
import socket
import stat
import subprocess

import pytest

from sandbox.etcd import EtcdServer
from sandbox.pki import make_pki


def openssl_text(cert):
    return subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-text"],
                          capture_output=True, text=True, check=True).stdout


def verifies(ca, cert, purpose):
    return subprocess.run(["openssl", "verify", "-CAfile", str(ca), "-purpose", purpose,
                           str(cert)], capture_output=True, text=True).returncode == 0


def test_pki_keys_are_private_and_certificates_fit_their_roles(pki):
    for key in (pki.ca_key, pki.server_key, pki.client_key):
        assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    server = openssl_text(pki.server_cert)
    assert "IP Address:127.0.0.1" in server and "DNS:localhost" in server
    assert verifies(pki.ca_cert, pki.server_cert, "sslserver")
    assert verifies(pki.ca_cert, pki.client_cert, "sslclient")
    assert "TLS Web Client Authentication" in openssl_text(pki.client_cert)


def test_certificates_of_another_pki_do_not_verify(pki, other_pki):
    assert not verifies(pki.ca_cert, other_pki.client_cert, "sslclient")


def test_pki_sans_for_other_addresses(tmp_path):
    made = make_pki(tmp_path, ["10.99.0.1", "fd00::1"], server_names=("etcd.sandbox",))
    text = openssl_text(made.server_cert)
    assert "IP Address:10.99.0.1" in text and "DNS:etcd.sandbox" in text
    assert "IP Address:FD00:0:0:0:0:0:0:1" in text


def test_the_session_etcd_is_healthy_and_speaks_only_tls(etcd):
    assert etcd.endpoint == f"https://127.0.0.1:{etcd.port}"
    assert etcd.running and etcd.healthy()
    assert etcd.version.startswith("3.")
    with etcd.session() as session:
        assert session.get(f"{etcd.endpoint}/version", timeout=5).json()["etcdserver"] == (
            etcd.version)


def test_an_etcd_that_cannot_start_raises_with_its_log(tmp_path, pki):
    with socket.socket() as taken:  # someone else holds the client port
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        server = EtcdServer(tmp_path, pki, port=taken.getsockname()[1])
        with pytest.raises(RuntimeError) as caught:
            server.start(timeout=20)
    assert "address already in use" in str(caught.value)
    assert not server.running


def test_each_cluster_plays_a_seed_of_the_fixed_set_its_label_picks(monkeypatch):
    from sandbox.cluster import SEED_ENV, lock_order_seed
    monkeypatch.setenv(SEED_ENV, "1,2,3")
    labels = [f"cluster {n}" for n in range(12)]
    picked = {label: lock_order_seed(label) for label in labels}
    assert picked == {label: lock_order_seed(label) for label in labels}   # every run
    assert set(picked.values()) == {1, 2, 3}
    monkeypatch.setenv(SEED_ENV, "7")
    assert {lock_order_seed(label) for label in labels} == {7}
    monkeypatch.setenv(SEED_ENV, "")
    assert lock_order_seed("any") is None
