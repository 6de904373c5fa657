"""A cheap look at etcd for idle hooks, with the standard library only;
and the one key a unit writes in its usual hooks, its name beside its lease.

update-status must notice etcd gone away, or come back from a rebuild with
nothing in it (flanneld does not notice: it keeps its subnet and never
writes its lease again), without paying for etcd3gw and requests (a quarter
of a second to import on every hook). `look` asks etcd's v3 gateway, in one
request over one TLS connection (a transaction of reads), for the network
config, this node's lease and the name of its holder (and, as a unit
serves a network, in a second request, flannel v0.11's keys in v2).

Every node looks every five minutes: listing every lease each time would
grow what etcd returns with nodes x leases. So the look first asks for the
leases' fingerprint (how many, the newest one's create revision, etcd's
cluster id: etcd still sorts the range, but returns one key whatever the
count) and lists them only when it changed since the list the caller holds.
Within one etcd the set of leases cannot change without changing it: a
lease that was not there before was created after the newest one then, and
a deleted one lowers the count unless a newer one replaced it.
"""
from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple, Optional, TypeVar
from urllib.parse import urlsplit

from ..facts.etcd_keys import (API, DEFAULT_ETCD_PORT, DEFAULT_PREFIX, EtcdUnavailable,
                               config_key, describe_text, json_object, lease_key,
                               lease_subnets, ordered, service_cidr_key, subnets_key, unit_key)

if TYPE_CHECKING:   # (imported where a look asks for v2: idle hooks never do)
    from ..facts.v2_network import V2Network

T = TypeVar("T")
# etcd's --max-txn-ops default (128): a transaction may hold no more operations
MAX_TXN_OPS = 128


def _subnets(keys: list) -> tuple:
    """The IPv4 subnet of each lease key ("<prefix>/subnets/10.1.52.0-24")."""
    return tuple(sorted(lease_subnets(key.decode(errors="replace").rsplit("/", 1)[-1])[0]
                        for key in keys))


class LeaseList(NamedTuple):
    """Every lease's IPv4 subnet ("10.1.52.0/24"), and the fingerprint it was
    listed at: (count, the newest lease key's create revision, etcd's
    cluster id)."""
    fingerprint: tuple
    subnets: tuple[str, ...]

    def as_stored(self) -> dict:
        """The list as the unit's key-value store keeps it (JSON)."""
        return {"fingerprint": list(self.fingerprint), "subnets": list(self.subnets)}

    @classmethod
    def from_stored(cls, stored) -> Optional["LeaseList"]:
        """as_stored()'s value back; None for anything else (listed anew)."""
        try:
            return cls(tuple(stored["fingerprint"]), tuple(str(s) for s in stored["subnets"]))
        except (TypeError, KeyError):
            return None


class EtcdView(NamedTuple):
    config: Optional[dict[str, Any]]  # the stored network config (None: absent or not JSON)
    lease: Optional[bool]             # whether the asked lease is there (None: not asked)
    endpoint: str                     # the endpoint that answered
    # with lease_of: every lease (the caller's list itself when it still holds)
    leases: Optional[LeaseList] = None
    keys_read: int = 0                # keys etcd returned for this look
    lease_public_ip: Optional[str] = None   # the asked lease's PublicIP
    # with unit: what <prefix>/units/<unit> holds (None: nothing, or not JSON)
    unit_record: Optional[dict[str, Any]] = None
    # with service_cidr: the recorded service-cidr (None: none recorded)
    service_cidr: Optional[str] = None
    # with v2: flannel's keys in etcd's v2 keyspace (empty: none, or no v2 API)
    v2_network: Optional["V2Network"] = None

    @property
    def subnets(self) -> tuple[str, ...]:
        return self.leases.subnets if self.leases else ()


def look(endpoints: Iterable[str], ca_file: str, cert_file: str, key_file: str, *,
         prefix: str = DEFAULT_PREFIX, lease_of: Optional[str] = None, leases: bool = False,
         preferred: Optional[str] = None, known: Optional[LeaseList] = None,
         unit: Optional[str] = None, service_cidr: bool = False, v2: bool = False,
         timeout: float = 3.0) -> EtcdView:
    """Read the network config (and with lease_of, "10.1.52.0/24", whether
    that lease exists and its address, and with `unit` what names that unit
    its holder; with lease_of or `leases`, every lease: `known` if its
    fingerprint holds; with service_cidr, the recorded service-cidr; with
    v2, flannel's keys in etcd's v2 keyspace) from the first endpoint that
    answers, trying `preferred` first. Raises EtcdUnavailable, naming every
    endpoint tried."""
    def read(connection: http.client.HTTPSConnection, endpoint: str) -> EtcdView:
        # every v3 key in one request (a txn of ranges): a look is one round trip
        asked = [_range_request(config_key(prefix))]
        if service_cidr:
            asked.append(_range_request(service_cidr_key(prefix)))
        if lease_of:
            asked.append(_range_request(lease_key(lease_of, prefix)))
            if unit:
                asked.append(_range_request(unit_key(unit, prefix)))
        if lease_of or leases:
            asked.append(_newest_lease_request(subnets_key(prefix)))
        answers, header = _txn(connection, asked)
        values = _values(answers.pop(0))
        lease = listed = public_ip = record = recorded_cidr = None
        count = len(values)
        if service_cidr:
            recorded = _values(answers.pop(0))
            recorded_cidr = recorded[0].decode(errors="replace") if recorded else None
            count += len(recorded)
        if lease_of:
            mine = _values(answers[0])
            lease = bool(mine)
            public_ip = (json_object(mine[0]) or {}).get("PublicIP") if mine else None
            count += len(mine)
            if unit:
                named = _values(answers[1])
                record = json_object(named[0]) if named and lease else None
                count += len(named)
        if lease_of or leases:
            listed, keys = _lease_list(connection, subnets_key(prefix), known,
                                       (answers[-1], header))
            count += keys
        return EtcdView(json_object(values[0]) if values else None, lease, endpoint, listed,
                        count, public_ip if isinstance(public_ip, str) else None, record,
                        recorded_cidr, _v2_network(connection, prefix) if v2 else None)
    return _first_answer(endpoints, ca_file, cert_file, key_file, read, preferred, timeout)


def v2_network(endpoints: Iterable[str], ca_file: str, cert_file: str, key_file: str, *,
               prefix: str = DEFAULT_PREFIX, preferred: Optional[str] = None,
               timeout: float = 3.0) -> V2Network:
    """flannel's keys under `prefix` in etcd's v2 API (config and leases),
    from the first endpoint that answers. Raises EtcdUnavailable."""
    return _first_answer(endpoints, ca_file, cert_file, key_file,
                         lambda connection, _: _v2_network(connection, prefix), preferred,
                         timeout)


def _v2_network(connection: http.client.HTTPSConnection, prefix: str) -> V2Network:
    """flannel's keys under `prefix` in etcd's v2 API; empty where etcd
    serves no v2 API (etcd >= 3.4 without --enable-v2) or has nothing there."""
    from ..facts.v2_network import V2Network, parse_v2_tree
    connection.request("GET", f"/v2/keys/{prefix.strip('/')}?recursive=true")
    reply = connection.getresponse()
    data = reply.read()
    if reply.status == 404:   # no such key, or no v2 API at all
        return V2Network(config=None, leases=())
    if reply.status != 200:
        raise ValueError(f"etcd's v2 API answered {reply.status} {reply.reason}: "
                         f"{data[:200].decode(errors='replace')}")
    answer = _json_object(data)
    if not isinstance(answer.get("node") or {}, dict):
        raise ValueError(f"not etcd's v2 answer: {data[:200].decode(errors='replace')}")
    return parse_v2_tree(answer, "/" + prefix.strip("/"))


def name_holder(endpoints: Iterable[str], ca_file: str, cert_file: str, key_file: str,
                unit: str, record: Optional[dict[str, str]], *,
                prefix: str = DEFAULT_PREFIX, preferred: Optional[str] = None,
                timeout: float = 3.0) -> str:
    """Write `record` (etcd_keys.unit_record) at `unit`'s key, or delete
    that key when record is None: the one write a unit's look or its stop
    makes, not worth etcd3gw's import. The endpoint that answered; raises
    EtcdUnavailable."""
    key = base64.b64encode(unit_key(unit, prefix).encode()).decode()

    def write(connection: http.client.HTTPSConnection, endpoint: str) -> str:
        if record is None:
            _post(connection, "kv/deleterange", {"key": key})
        else:
            value = json.dumps(record, sort_keys=True).encode()
            _post(connection, "kv/put", {"key": key, "value": base64.b64encode(value).decode()})
        return endpoint
    return _first_answer(endpoints, ca_file, cert_file, key_file, write, preferred, timeout)


def lease_values(endpoints: Iterable[str], ca_file: str, cert_file: str, key_file: str,
                 subnets: Iterable[str], *, prefix: str = DEFAULT_PREFIX,
                 preferred: Optional[str] = None, timeout: float = 3.0) -> dict[str, dict]:
    """The stored value of each lease ("10.1.9.0/24" -> {"PublicIP": ...}),
    for the few a look found something wrong with; a lease gone meanwhile
    is left out. Raises EtcdUnavailable."""
    def read(connection: http.client.HTTPSConnection, endpoint: str) -> dict[str, dict]:
        found = {}
        asked = list(subnets)
        for start in range(0, len(asked), MAX_TXN_OPS):   # (etcd refuses longer txns)
            chunk = asked[start:start + MAX_TXN_OPS]
            answers, _ = _txn(connection, [_range_request(lease_key(subnet, prefix))
                                           for subnet in chunk])
            for subnet, answer in zip(chunk, answers):
                values = _values(answer)
                if values:
                    found[subnet] = json_object(values[0]) or {}
        return found
    return _first_answer(endpoints, ca_file, cert_file, key_file, read, preferred, timeout)


def _first_answer(endpoints: Iterable[str], ca_file: str, cert_file: str, key_file: str,
                  read: Callable[[http.client.HTTPSConnection, str], T],
                  preferred: Optional[str], timeout: float) -> T:
    """read(connection, endpoint) over one TLS connection to the first
    endpoint that answers, `preferred` first."""
    try:
        context = ssl.create_default_context(cafile=ca_file)
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ValueError) as error:
        raise EtcdUnavailable("cannot use the etcd client credentials: "
                              + describe(error, timeout)) from None
    failures = []
    for endpoint in ordered(endpoints, preferred):
        url = urlsplit(endpoint)
        connection = http.client.HTTPSConnection(url.hostname or "", url.port or DEFAULT_ETCD_PORT,
                                                 timeout=timeout, context=context)
        try:
            return read(connection, endpoint)
        except (OSError, http.client.HTTPException, ValueError) as error:
            failures.append(f"{endpoint} ({describe(error, timeout)})")
        finally:
            connection.close()
    raise EtcdUnavailable("cannot reach etcd: " + "; ".join(failures))


def _lease_list(connection: http.client.HTTPSConnection, prefix: str,
                known: Optional[LeaseList], newest: tuple[dict, dict]) -> tuple[LeaseList, int]:
    """The leases under `prefix` (`known` while its fingerprint holds), and
    how many keys etcd returned for them; `newest` is etcd's answer to
    _newest_lease_request(prefix) and the header it came with."""
    answer, header = newest
    created = _keys(answer)
    # the cluster too: another etcd (or one rebuilt) numbers its revisions anew
    fingerprint = (int(answer.get("count") or 0), int(created[0][1]) if created else 0,
                   str(header.get("cluster_id", "")))
    if known is not None and tuple(known.fingerprint) == fingerprint:
        return known, len(created)
    keys = _keys(_post(connection, "kv/range", _range_request(prefix, keys=True, prefix=True)))
    return LeaseList(fingerprint, _subnets([key for key, _ in keys])), len(created) + len(keys)


def _range_request(key: str, *, keys: bool = False, prefix: bool = False) -> dict:
    """The gateway's RangeRequest for the value at `key` (one, or none; with
    prefix, every key under it); with keys, the keys alone."""
    request = {"key": base64.b64encode(key.encode()).decode()}
    if prefix:   # range_end: the prefix with its last byte + 1
        end = key[:-1].encode() + bytes([key.encode()[-1] + 1])
        request["range_end"] = base64.b64encode(end).decode()
    if keys:
        request["keys_only"] = True
    return request


def _newest_lease_request(prefix: str) -> dict:
    """The most recently created key under `prefix` alone (the reply's count
    is still every key's): the leases' fingerprint."""
    return dict(_range_request(prefix, keys=True, prefix=True),
                limit=1, sort_order="DESCEND", sort_target="CREATE")


def _txn(connection: http.client.HTTPSConnection, ranges: list[dict]) -> tuple[list, dict]:
    """Each RangeRequest's answer, read in one transaction (one revision),
    and the transaction's header."""
    answer = _post(connection, "kv/txn",
                   {"success": [{"request_range": request} for request in ranges]})
    replies = answer.get("responses") or []
    if not isinstance(replies, list) or len(replies) != len(ranges) \
            or not all(isinstance(reply, dict) for reply in replies):
        raise ValueError(f"etcd answered {len(ranges)} reads with: {str(answer)[:200]}")
    return [reply.get("response_range") or {} for reply in replies], answer.get("header") or {}


def _values(answer: dict) -> list[bytes]:
    return [base64.b64decode(kv.get("value", "")) for kv in answer.get("kvs") or []]


def _keys(answer: dict) -> list[tuple[bytes, Any]]:
    """(key, create revision) of each key of a keys-only answer."""
    return [(base64.b64decode(kv.get("key", "")), kv.get("create_revision", 0))
            for kv in answer.get("kvs") or []]


def _post(connection: http.client.HTTPSConnection, call: str, request: dict) -> dict:
    """etcd's JSON answer to one gateway call; raises ValueError for anything but 200."""
    connection.request("POST", f"{API}/{call}", body=json.dumps(request),
                       headers={"Content-Type": "application/json"})
    reply = connection.getresponse()
    data = reply.read()
    if reply.status != 200:
        raise ValueError(f"etcd answered {reply.status} {reply.reason}: "
                         f"{data[:200].decode(errors='replace')}")
    return _json_object(data)


def _json_object(data: bytes) -> dict:
    """A reply's JSON object; ValueError for anything else (an endpoint
    that is not etcd's gateway)."""
    answer = json.loads(data)
    if not isinstance(answer, dict):
        raise ValueError(f"not etcd's answer: {data[:200].decode(errors='replace')}")
    return answer


def describe(error: BaseException, timeout: float) -> str:
    """One short line for a standard-library connection error."""
    if isinstance(error, (socket.timeout, TimeoutError)):
        return f"no answer within {timeout:g}s"
    detail = f"{type(error).__name__}: {error}"
    known = describe_text(detail)
    if known:
        return known
    detail = " ".join(str(error).split()) or type(error).__name__
    return detail if len(detail) <= 200 else detail[:197] + "..."
