"""Unit-test fixtures: one real TLS etcd on 127.0.0.1 for the whole session."""
from __future__ import annotations

import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from charms.flannel.adapters.etcd import EtcdClientSettings
from sandbox.etcd import EtcdServer
from sandbox.pki import Pki, make_pki
from unitkit import open_netns, wipe_flannel

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), ["127.0.0.1"])


@pytest.fixture(scope="session")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A second, unrelated CA: what a wrong or foreign CA bundle looks like."""
    return make_pki(tmp_path_factory.mktemp("other-pki"), ["127.0.0.1"])


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory, pki: Pki):
    """etcd with its v2 API on too, as the etcd charm had it for flannel
    v0.11 (tests/unit/test_v2_network.py); the v3 API is the same either way."""
    server = EtcdServer(tmp_path_factory.mktemp("etcd"), pki, host="127.0.0.1", enable_v2=True)
    with server:
        yield server


@pytest.fixture
def settings(etcd: EtcdServer, pki: Pki) -> EtcdClientSettings:
    return EtcdClientSettings.from_connection_string(
        etcd.endpoint, str(pki.ca_cert), str(pki.client_cert), str(pki.client_key),
        timeout=5.0,
    )


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses, so tests share one etcd safely."""
    return f"/test-{uuid.uuid4().hex}/network"


@pytest.fixture
def templates_dir() -> Path:
    return TEMPLATES


@pytest.fixture
def silent():
    """An endpoint that accepts connections and never answers: a member whose
    machine is gone looks like this or worse (no SYN-ACK at all)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield SilentMember(server)


class SilentMember(str):
    """The endpoint's URL, and how many connections it was sent (the kernel
    completes them into the listen backlog; nothing ever answers)."""

    def __new__(cls, server):
        member = super().__new__(cls, f"https://127.0.0.1:{server.getsockname()[1]}")
        member.server = server
        return member

    def connections(self) -> int:
        """Connections made to it since the last call."""
        self.server.setblocking(False)
        count = 0
        while True:
            try:
                conn, _ = self.server.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1


@pytest.fixture
def netns():
    """open_netns() for one test."""
    with open_netns() as run:
        yield run


@pytest.fixture
def netns_machine(netns):
    """charms.flannel's Machine whose commands run in a namespace of the test's own."""
    from charms.flannel.adapters.machine import Machine

    def runner(argv, *, check, input=None):
        return subprocess.run(["nsenter", f"--net={netns.path}", *argv], check=check,
                              capture_output=True, text=True, input=input, timeout=60)
    machine = Machine(runner=runner)
    machine.netns = netns
    return machine


@pytest.fixture
def flannels_prefix(etcd):
    """etcd with nothing at flannel's default prefix, for this test alone: the
    steps work there, and the session's etcd is shared by the tier's tests."""
    from charms.flannel.facts.etcd_keys import DEFAULT_PREFIX
    wipe_flannel(etcd, DEFAULT_PREFIX)
    yield DEFAULT_PREFIX
    wipe_flannel(etcd, DEFAULT_PREFIX)
