"""etcd as flannel uses it, in plain values: the relation's endpoints (and
which one to try first), flannel's keys, a lease as flanneld keys and
writes it, and the operator's words for a failed connection.

Relation data is input: only "https://<IP or DNS name>:<port>" leaves
parse_endpoints, rebuilt from its parsed parts, so that nothing else of the
string reaches flanneld's command line or its unit file.
"""
from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
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


def units_key(prefix: str = DEFAULT_PREFIX) -> str:
    """Where each flannel unit names the lease it holds (list-leases' unit):
    the charm's keys, not flanneld's, which reads only config and subnets/."""
    return f"{prefix.rstrip('/')}/units/"


def unit_key(unit: str, prefix: str = DEFAULT_PREFIX) -> str:
    """"flannel/0" -> <prefix>/units/flannel-0."""
    return units_key(prefix) + unit.replace("/", "-")


def unit_record(unit: str, lease_name: str, public_ip: str) -> dict[str, str]:
    """What <prefix>/units/<unit> holds: the unit, its lease ("10.1.52.0/24",
    dual-stack "...&fd10:1:0:5::/64") and the node address the lease has."""
    return {"unit": unit, "lease": lease_name, "public-ip": public_ip}


def config_key(prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix.rstrip('/')}/config"


def service_cidr_key(prefix: str = DEFAULT_PREFIX) -> str:
    """The Kubernetes service-cidr, as the control plane's flannel unit
    recorded it; flanneld reads no such key."""
    return f"{prefix.rstrip('/')}/service-cidr"


@dataclass(frozen=True)
class Lease:
    """A subnet lease in etcd's v3 keyspace (flanneld's lease.Lease): the
    subnets come from its key, the rest from its JSON value."""
    key: str
    subnet: str                          # "10.1.52.0/24"
    ipv6_subnet: Optional[str] = None    # "fd10:1:0:5::/64" (dual-stack)
    attributes: dict = field(default_factory=dict, compare=False)   # PublicIP, BackendType, ...

    @classmethod
    def from_etcd(cls, key: str, value: bytes, prefix: str = DEFAULT_PREFIX) -> "Lease":
        """A lease key and its value; a value that does not parse still
        makes a lease (the key is what holds the subnet)."""
        subnet, ipv6_subnet = lease_subnets(key.rsplit("/", 1)[-1])
        return cls(key=key, subnet=subnet, ipv6_subnet=ipv6_subnet,
                   attributes=json_object(value) or {})

    @property
    def public_ip(self) -> Optional[str]:
        return self.attributes.get("PublicIP")


def json_object(value: bytes) -> Optional[dict[str, Any]]:
    """A stored JSON object; None for anything else."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


# Known low-level failures, in the words an operator can act on (patterns, case
# ignored, compiled only when a connection failed)
ERROR_PATTERNS = (
    (r"CERTIFICATE_VERIFY_FAILED|certificate verify failed",
     "TLS certificate verification failed: the server's certificate is not signed by the etcd CA "
     "from the relation, or does not name this address"),
    (r"TLSV1_ALERT_UNKNOWN_CA|alert unknown ca|bad certificate|certificate required",
     "etcd rejected the client certificate"),
    (r"SSLEOFError|EOF occurred in violation of protocol|Connection reset",
     "etcd cut the TLS handshake short; it most likely rejected the client certificate"),
    (r"Connection refused", "connection refused"),
    (r"No route to host", "no route to host"),
    (r"Network is unreachable", "network unreachable"),
    (r"Name or service not known|nodename nor servname|Temporary failure in name",
     "host name does not resolve"),
    (r"No such file or directory|Could not find the TLS",
     "a client certificate, key or CA file is missing"),
)


def describe_text(detail: str) -> Optional[str]:
    """The operator's words for a known failure text, else None."""
    for pattern, text in ERROR_PATTERNS:
        if re.search(pattern, detail, re.I):
            return text
    return None
