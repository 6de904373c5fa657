"""A cheap look at etcd for idle hooks, with the standard library only.

update-status must notice etcd gone away, or come back from a rebuild with
nothing in it (flanneld does not notice: it keeps its subnet and never
writes its lease again), without paying for etcd3gw and requests (a quarter
of a second to import on every hook). `look` asks etcd's v3 gateway, over
one TLS connection, for the network config and for this node's lease.

Also here, shared with network.py (which talks etcd3gw): EtcdUnavailable,
the endpoint parsing of the relation's connection string, the order in
which endpoints are tried (the one that answered last first: a dead member
listed first must not cost every hook a connect timeout) and the
operator-readable texts of connection errors.
"""
from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import re
import socket
import ssl
from dataclasses import dataclass
from typing import Any, Iterable, Optional
from urllib.parse import urlsplit

DEFAULT_PREFIX = "/coreos.com/network"
DEFAULT_ETCD_PORT = 2379
API = "/v3"  # etcd >= 3.4's gateway path (3.3 had /v3beta)


class EtcdUnavailable(Exception):
    """No etcd endpoint could be used; reason is meant for a waiting status."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def parse_endpoints(connection_string: str) -> tuple[str, ...]:
    """The relation's comma-joined https URIs as "https://host:port".

    Raises EtcdUnavailable when there is no usable https endpoint: that is a
    state to wait in (the provider has not published yet), not a crash.
    """
    endpoints = []
    for item in (connection_string or "").split(","):
        item = item.strip()
        if item:
            endpoints.append(_normalise_endpoint(item, connection_string))
    if not endpoints:
        raise EtcdUnavailable("etcd has not published any endpoint yet")
    return tuple(endpoints)


# A DNS name as etcd's certificates carry it: labels of letters, digits, '-'.
_HOST_NAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                        r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")


def _normalise_endpoint(item: str, whole: str) -> str:
    """Relation data is input: only "https://<IP or DNS name>:<port>" leaves
    here, rebuilt from its parsed parts, so that nothing else of the string
    (a newline, a space, a path) reaches flanneld's command line or its unit
    file. urlsplit drops tabs and newlines silently: they are refused first."""
    url, port = None, 0
    if item.isprintable() and not any(c.isspace() for c in item):
        try:
            url = urlsplit(item)
            port = url.port or DEFAULT_ETCD_PORT
        except ValueError:
            url = None
    host = url.hostname if url is not None else None
    if url is None or url.scheme != "https" or not host or not _plain_host(host) or (
            url.path not in ("", "/")) or url.query or url.fragment or url.username:
        raise EtcdUnavailable(
            f"etcd relation: connection string {whole!r} has an endpoint that is not "
            f"https://host:port: {item!r}"
        )
    host = f"[{host}]" if ":" in host else host
    return f"https://{host}:{port}"


def _plain_host(host: str) -> bool:
    if "%" in host:   # an IPv6 zone: systemd would read "%" as a specifier
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOST_NAME.fullmatch(host))


def ordered(endpoints: Iterable[str], preferred: Optional[str]) -> list[str]:
    """The endpoints to try, the one that answered last (if still listed) first."""
    order = list(endpoints)
    if preferred in order:
        order.remove(preferred)
        order.insert(0, preferred)
    return order


def lease_key(subnet, prefix: str = DEFAULT_PREFIX) -> str:
    """flanneld's lease key of a subnet ("10.1.52.0/24" or an IPv4Network)."""
    return f"{prefix.rstrip('/')}/subnets/{str(subnet).replace('/', '-')}"


def subnets_key(prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix.rstrip('/')}/subnets/"


def lease_subnets(name: str) -> tuple[str, Optional[str]]:
    """The subnets a lease key's last part names (flanneld's MakeSubnetKey,
    reversed): "10.1.52.0-24" -> ("10.1.52.0/24", None);
    "10.1.52.0-24&fd10:1:0:5::-64" -> ("10.1.52.0/24", "fd10:1:0:5::/64")."""
    def subnet(part: str) -> str:
        address, _, length = part.rpartition("-")
        return f"{address}/{length}" if address else part
    ipv4, _, ipv6 = name.partition("&")
    return subnet(ipv4), (subnet(ipv6) if ipv6 else None)


def _subnets(keys: list) -> tuple:
    """The IPv4 subnet of each lease key ("<prefix>/subnets/10.1.52.0-24")."""
    return tuple(sorted(lease_subnets(key.decode(errors="replace").rsplit("/", 1)[-1])[0]
                        for key in keys))


def config_key(prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix.rstrip('/')}/config"


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
        return EtcdView(_json_object(values[0]) if values else None, lease, endpoint, subnets)
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


def _json_object(value: bytes) -> Optional[dict[str, Any]]:
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


# Known low-level failures, in the words an operator can act on.
ERROR_PATTERNS = (
    (re.compile(r"CERTIFICATE_VERIFY_FAILED|certificate verify failed", re.I),
     "TLS certificate verification failed: the server's certificate is not signed by the etcd CA "
     "from the relation, or does not name this address"),
    (re.compile(r"TLSV1_ALERT_UNKNOWN_CA|alert unknown ca|bad certificate|certificate required",
                re.I),
     "etcd rejected the client certificate"),
    (re.compile(r"SSLEOFError|EOF occurred in violation of protocol|Connection reset", re.I),
     "etcd cut the TLS handshake short; it most likely rejected the client certificate"),
    (re.compile(r"Connection refused", re.I), "connection refused"),
    (re.compile(r"No route to host", re.I), "no route to host"),
    (re.compile(r"Network is unreachable", re.I), "network unreachable"),
    (re.compile(r"Name or service not known|nodename nor servname|Temporary failure in name",
                re.I),
     "host name does not resolve"),
    (re.compile(r"No such file or directory|Could not find the TLS", re.I),
     "a client certificate, key or CA file is missing"),
)


def describe_text(detail: str) -> Optional[str]:
    """The operator's words for a known failure text, else None."""
    for pattern, text in ERROR_PATTERNS:
        if pattern.search(detail):
            return text
    return None


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
