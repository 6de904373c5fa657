"""The handler tier's fixtures (harness.py says what the tier is)."""
from __future__ import annotations

import pytest
from harness import NETWORK, Unit

from sandbox.etcd import EtcdServer
from sandbox.pki import make_pki


def pytest_configure(config):
    # charmhelpers compares Juju versions with distutils' LooseVersion
    config.addinivalue_line("filterwarnings",
                            "ignore:distutils Version classes are deprecated:DeprecationWarning")


@pytest.fixture(scope="session")
def etcd_tls(tmp_path_factory):
    """One real etcd with client TLS for the tier (no root: loopback)."""
    pki = make_pki(tmp_path_factory.mktemp("pki"), ["127.0.0.1"])
    server = EtcdServer(tmp_path_factory.mktemp("etcd"), pki, host="127.0.0.1")
    with server:
        yield server, pki


@pytest.fixture
def unit(tmp_path, etcd_tls):
    """A unit of its own; etcd holds nothing of flannel's (the tier's tests
    run one at a time)."""
    server, pki = etcd_tls
    made = Unit(tmp_path, server, pki)
    made.etcd().delete_prefix(NETWORK)
    return made


@pytest.fixture(scope="session")
def api(etcd_tls, tmp_path_factory):
    """kube-apiserver v1.37 on loopback over the tier's etcd (sandbox.api_server):
    the Kubernetes API for subnet-manager=kubernetes."""
    from sandbox.api_server import ApiServer
    server, pki = etcd_tls
    with ApiServer(tmp_path_factory.mktemp("kube-apiserver"), pki, server) as started:
        yield started


@pytest.fixture
def fresh_api(api):
    """The API server with no Node left by another test."""
    for name in api.nodes():
        api.delete_node(name)
    return api
