"""sandbox.etcd.EtcdCluster: a real three-member etcd with client TLS (the
fault bench's "one member of three down" row stands on it), and the emulated
etcd charm publishing all three members."""
from __future__ import annotations

import pytest

from sandbox.etcd import EtcdCluster, EtcdServer
from sandbox.juju.apps import EtcdApp
from sandbox.pki import make_pki
from sandbox.waiting import wait_for

pytestmark = pytest.mark.sandbox


def healthy_now(etcd: EtcdCluster) -> bool:
    try:
        return etcd.healthy()
    except OSError:   # (requests' errors are OSErrors): no leader yet
        return False


def put(member: EtcdServer, key: str, value: str) -> None:
    import base64
    with member.session() as s:
        reply = s.post(f"{member.endpoint}/v3/kv/put", timeout=5, json={
            "key": base64.b64encode(key.encode()).decode(),
            "value": base64.b64encode(value.encode()).decode()})
        reply.raise_for_status()


def get_or_none(member: EtcdServer, key: str) -> str | None:
    """get(), or None while the member cannot answer yet."""
    try:
        return get(member, key)
    except Exception:  # noqa: BLE001 - a member still catching up
        return None


def get(member: EtcdServer, key: str) -> str | None:
    import base64
    with member.session() as s:
        reply = s.post(f"{member.endpoint}/v3/kv/range", timeout=5,
                       json={"key": base64.b64encode(key.encode()).decode()})
        reply.raise_for_status()
        kvs = reply.json().get("kvs") or []
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


def test_three_members_one_cluster_and_two_keep_quorum(tmp_path):
    pki = make_pki(tmp_path / "pki", ["127.0.0.1"])
    with EtcdCluster(tmp_path / "etcd", pki, hosts=["127.0.0.1"] * 3) as etcd:
        first, second, third = etcd.members
        assert etcd.connection_string == ",".join(
            [first.endpoint, second.endpoint, third.endpoint])
        assert len({m.endpoint for m in etcd.members}) == 3
        put(first, "/k", "v1")
        assert get(third, "/k") == "v1"   # one cluster, not three
        first.stop()
        assert not first.running
        # (if first led, the other two elect a new leader first)
        assert wait_for(lambda: healthy_now(etcd), 30), "two of three members never became healthy"
        put(second, "/k", "v2")           # two of three keep quorum
        assert get(third, "/k") == "v2"
        first.start()                     # back with its data: catches up
        assert wait_for(lambda: get_or_none(first, "/k") == "v2", 60)
        app = EtcdApp.from_server(etcd)
        assert app.data()["connection_string"] == etcd.connection_string
        assert app.data()["client_ca"] == pki.ca_cert.read_text()
    assert not any(m.running for m in etcd.members)


def test_a_single_server_publishes_its_endpoint(tmp_path):
    pki = make_pki(tmp_path / "pki", ["127.0.0.1"])
    server = EtcdServer(tmp_path / "etcd", pki)
    assert server.connection_string == server.endpoint
    assert EtcdApp(server.connection_string, version="3.4", client_ca="a", client_cert="b",
                   client_key="c").data()["connection_string"] == server.endpoint
