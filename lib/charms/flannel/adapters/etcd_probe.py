"""A cheap look at etcd for idle hooks, with the standard library only.

update-status must notice etcd gone away, or come back from a rebuild with
nothing in it (flanneld does not notice: it keeps its subnet and never
writes its lease again), without paying for etcd3gw and requests (a quarter
of a second to import on every hook). `look` asks etcd's v3 gateway, over
one TLS connection, for the network config and for this node's lease.
"""
from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
from dataclasses import dataclass
from typing import Any, Iterable, Optional
from urllib.parse import urlsplit

from ..facts.etcd_keys import (API, DEFAULT_ETCD_PORT, DEFAULT_PREFIX, EtcdUnavailable,
                               config_key, describe_text, json_object, lease_key,
                               lease_subnets, ordered, subnets_key)


def _subnets(keys: list) -> tuple:
    """The IPv4 subnet of each lease key ("<prefix>/subnets/10.1.52.0-24")."""
    return tuple(sorted(lease_subnets(key.decode(errors="replace").rsplit("/", 1)[-1])[0]
                        for key in keys))


@dataclass(frozen=True)
class EtcdView:
    config: Optional[dict[str, Any]]  # the stored network config (None: absent or not JSON)
    lease: Optional[bool]             # whether the asked lease is there (None: not asked)
    endpoint: str                     # the endpoint that answered
    # with lease_of: the IPv4 subnet of every lease ("10.1.52.0/24"), this node's too
    subnets: tuple = ()


def look(endpoints: Iterable[str], ca_file: str, cert_file: str, key_file: str, *,
         prefix: str = DEFAULT_PREFIX, lease_of: Optional[str] = None,
         preferred: Optional[str] = None, timeout: float = 3.0) -> EtcdView:
    """Read the network config (and with lease_of, "10.1.52.0/24", whether
    that lease exists) from the first endpoint that answers, trying
    `preferred` first. Raises EtcdUnavailable, naming every endpoint tried."""
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
            values = _range(connection, config_key(prefix))
            lease = bool(_range(connection, lease_key(lease_of, prefix))) if lease_of else None
            subnets = _subnets(_range(connection, subnets_key(prefix), keys=True,
                                      prefix=True)) if lease_of else ()
        except (OSError, http.client.HTTPException, ValueError) as error:
            failures.append(f"{endpoint} ({describe(error, timeout)})")
            continue
        finally:
            connection.close()
        return EtcdView(json_object(values[0]) if values else None, lease, endpoint, subnets)
    raise EtcdUnavailable("cannot reach etcd: " + "; ".join(failures))


def _range(connection: http.client.HTTPSConnection, key: str, *, keys: bool = False,
           prefix: bool = False) -> list[bytes]:
    """The values stored at `key` (one, or none; with prefix, every key under
    it) via the gateway's kv/range; with keys, the keys instead of the values."""
    request = {"key": base64.b64encode(key.encode()).decode()}
    if prefix:   # range_end: the prefix with its last byte + 1
        end = key[:-1].encode() + bytes([key.encode()[-1] + 1])
        request["range_end"] = base64.b64encode(end).decode()
    if keys:
        request["keys_only"] = True
    body = json.dumps(request)
    connection.request("POST", f"{API}/kv/range", body=body,
                       headers={"Content-Type": "application/json"})
    reply = connection.getresponse()
    data = reply.read()
    if reply.status != 200:
        raise ValueError(f"etcd answered {reply.status} {reply.reason}: "
                         f"{data[:200].decode(errors='replace')}")
    kvs = json.loads(data).get("kvs") or []
    return [base64.b64decode(kv.get("key" if keys else "value", "")) for kv in kvs]


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
