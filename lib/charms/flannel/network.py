"""flannel's network configuration and the etcd it lives in.

NetworkStore talks to etcd through etcd3gw's HTTP gateway client with a
requests.Session of our own: trust_env=False, because REQUESTS_CA_BUNDLE or
CURL_CA_BUNDLE in the environment would otherwise replace the etcd CA from the
relation and break (or silently widen) TLS verification.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import etcd3gw
import requests
from etcd3gw.exceptions import ConnectionTimeoutError, Etcd3Exception

from .etcd_probe import (DEFAULT_ETCD_PORT, DEFAULT_PREFIX, EtcdUnavailable, describe_text,
                         lease_key, lease_subnets, ordered, parse_endpoints)
from .host_network import cidr_conflict
from .options import (InvalidOption, NetworkOptions, backend_change_pending, backend_type,
                      network_config)
from .v2_network import V2Network, parse_v2_tree

# Re-exported: network_config's home is options.py, EtcdUnavailable's and
# the endpoint handling's etcd_probe.py (light enough for idle hooks).
__all__ = ["network_config", "backend_type", "backend_change_pending", "EtcdUnavailable",
           "DEFAULT_PREFIX", "DEFAULT_ETCD_PORT"]

WRITE_ATTEMPTS = 3  # compare-and-swap rounds lost to other writers before waiting

T = TypeVar("T")


def check_backend_change(
    current: dict[str, Any] | None, wanted: dict[str, Any], live_leases: int
) -> None:
    """Refuse to switch backends under running nodes: flanneld cannot migrate,
    and nodes on the old backend would lose their routes to the new ones."""
    old, new = backend_type(current), backend_type(wanted)
    if old is None or old == new or live_leases <= 0:
        return
    holders = "1 node holds a lease" if live_leases == 1 else f"{live_leases} nodes hold leases"
    raise InvalidOption(
        "backend",
        f"cannot change from {old} to {new} while {holders}; "
        f"set backend back to {old}, or remove flannel from every node "
        "(each unit releases its lease as it stops) and add it back",
    )


def ensure_network_config(store: NetworkStore, options: NetworkOptions,
                          attempts: int = WRITE_ATTEMPTS) -> bool:
    """Make etcd hold the config for options; True if this call wrote it.

    Raises InvalidOption("backend", ...) rather than switching backends under
    live leases, and EtcdUnavailable when etcd cannot be reached. The write is
    a compare-and-swap over the value the checks were made on: units
    configuring the network at once (first deploy, concurrent hooks) write it
    once, and a config another unit wrote meanwhile is checked again, never
    overwritten unchecked.
    """
    wanted = network_config(options)
    for _ in range(attempts):
        current, raw = store.read_config_value()
        if current == wanted:
            return False
        if backend_type(current) not in (None, backend_type(wanted)):
            check_backend_change(current, wanted, len(store.leases()))
        if store.swap_config(raw, wanted):
            return True
    raise _kept_changing(attempts)


def write_network(store: NetworkStore, options: NetworkOptions,
                  published_service_cidr: str | None) -> bool:
    """configure_network's write: the cidr checked against the cluster's
    service-cidr (etcd's record of it, or the one the principal publishes,
    which is recorded), then ensure_network_config; True if this call wrote
    it. Raises InvalidOption (blocked, before anything is written) or
    EtcdUnavailable (waiting)."""
    services = shared_service_cidr(store, published_service_cidr)
    for option, cidr in (("cidr", options.cidr), ("ipv6-cidr", options.ipv6_cidr)):
        over_services = cidr_conflict(cidr, (), services, option=option) if cidr else None
        if over_services:
            raise over_services
    return ensure_network_config(store, options)


def shared_service_cidr(store: NetworkStore, published: str | None) -> str | None:
    """The service-cidr every unit checks the pod network against. Only the
    control plane publishes it, to its own flannel unit: that unit records
    it in etcd, where the units beside workers (never told) read it, so
    that once it is recorded (the control plane's unit has configured the
    network once) a cidr over the service network is refused on every node
    before any of them writes it."""
    if published:
        store.record_service_cidr(published)
        return published
    return store.read_service_cidr()


def give_lease_back(store: NetworkStore, subnet: str, *,
                    held_by: Collection[str] | None = None) -> bool:
    """Delete the lease of `subnet` ("10.1.52.0/24"); True if it was there.

    With `held_by` (the machine's addresses), only if the lease's PublicIP is
    one of them: a lease that expired and was leased by another node since
    is not this node's to give back.
    """
    held = [lease for lease in store.leases() if lease.get("Subnet") == subnet]
    if held_by is not None and (
            not held or any(lease.get("PublicIP") not in held_by for lease in held)):
        return False
    return store.release_lease(subnet, held)


def _kept_changing(attempts: int) -> EtcdUnavailable:
    return EtcdUnavailable(
        f"the flannel network config in etcd kept changing while this unit wrote it "
        f"({attempts} tries): another writer wants another config; trying again at the next hook")


@dataclass(frozen=True)
class EtcdClientSettings:
    endpoints: tuple[str, ...]  # "https://host:port", in the order to try them
    ca_file: str
    cert_file: str
    key_file: str
    timeout: float = 5.0  # seconds per request; etcd3gw waits forever without one

    @classmethod
    def from_connection_string(
        cls,
        connection_string: str,
        ca_file: str,
        cert_file: str,
        key_file: str,
        timeout: float = 5.0,
    ) -> EtcdClientSettings:
        """Parse the etcd relation's comma-joined https URIs.

        Raises EtcdUnavailable when there is no usable https endpoint: that is
        a state to wait in (the provider has not published yet), not a crash.
        """
        return cls(parse_endpoints(connection_string), str(ca_file), str(cert_file),
                   str(key_file), timeout)

    @classmethod
    def from_client_files(cls, connection_string: str, files,
                          timeout: float = 5.0) -> EtcdClientSettings:
        """The same, with the client files on disk (credentials.ClientFiles)."""
        return cls.from_connection_string(connection_string, files.ca_file, files.cert_file,
                                          files.key_file, timeout)


class NetworkStore:
    """flannel's network config and subnet leases under one prefix of one etcd."""

    def __init__(self, settings: EtcdClientSettings, prefix: str = DEFAULT_PREFIX,
                 preferred: str | None = None) -> None:
        self.settings = settings
        self.prefix = "/" + prefix.strip("/")
        self.session = requests.Session()
        self.session.trust_env = False  # ignore *_CA_BUNDLE and proxy variables
        self.session.verify = settings.ca_file
        self.session.cert = (settings.cert_file, settings.key_file)
        self._clients: dict[str, etcd3gw.Etcd3Client] = {}
        # The endpoint that answered last, tried first: a caller that keeps
        # `answered` across hooks passes it back as `preferred`.
        self._preferred: str | None = preferred

    @property
    def answered(self) -> str | None:
        """The endpoint that answered last (or the preferred one, if none did yet)."""
        return self._preferred

    @property
    def config_key(self) -> str:
        return f"{self.prefix}/config"

    @property
    def subnets_prefix(self) -> str:
        return f"{self.prefix}/subnets/"

    @property
    def service_cidr_key(self) -> str:
        """The Kubernetes service-cidr, as the control plane's flannel unit
        recorded it (shared_service_cidr); flanneld reads no such key."""
        return f"{self.prefix}/service-cidr"

    def read_service_cidr(self) -> str | None:
        values = self._call(lambda client: client.get(self.service_cidr_key))
        return values[0].decode(errors="replace") if values else None

    def record_service_cidr(self, value: str) -> None:
        if self.read_service_cidr() != value:
            self._call(lambda client: client.put(self.service_cidr_key, value))

    def read_config(self) -> dict[str, Any] | None:
        """The stored network config; None if absent or not a JSON object."""
        return self.read_config_value()[0]

    def read_config_value(self) -> tuple[dict[str, Any] | None, bytes | None]:
        """(the stored config as read_config() gives it, the stored bytes or
        None when the key is absent): what swap_config() compares against."""
        values = self._call(lambda client: client.get(self.config_key))
        if not values:
            return None, None
        return _json_object(values[0]), values[0]

    def swap_config(self, expected: bytes | None, config: dict[str, Any]) -> bool:
        """Store config only if the key still holds `expected` (None: only if
        it is absent), in one etcd transaction; False if another writer
        changed it since it was read."""
        data = json.dumps(config, sort_keys=True).encode()
        if expected is None:
            return bool(self._call(lambda client: client.create(self.config_key, data)))
        return bool(self._call(lambda client: client.replace(self.config_key, expected, data)))

    def write_config(self, config: dict[str, Any], attempts: int = WRITE_ATTEMPTS) -> bool:
        """Store config unless an equal one is there; True if this call
        changed it (compare-and-swap: see ensure_network_config)."""
        for _ in range(attempts):
            current, raw = self.read_config_value()
            if current == config:
                return False
            if self.swap_config(raw, config):
                return True
        raise _kept_changing(attempts)

    def leases(self) -> list[dict[str, Any]]:
        """The subnet leases flanneld holds (expired ones are gone from etcd).

        Each is the lease's JSON (PublicIP, BackendType, ...) plus "Subnet"
        and, for a dual-stack lease, "IPv6Subnet", taken from the key (the
        value holds neither): "<prefix>/subnets/10.1.52.0-24" ->
        "10.1.52.0/24"; "...10.1.52.0-24&fd10:1:0:5::-64" -> "10.1.52.0/24"
        and "fd10:1:0:5::/64"; and "Key", the key itself. A lease whose
        value does not parse still counts, without its JSON.
        """
        items = self._call(lambda client: client.get_prefix(self.subnets_prefix))
        leases = []
        for value, meta in items:
            key = meta["key"].decode() if isinstance(meta["key"], bytes) else str(meta["key"])
            lease = _json_object(value) or {}
            lease["Subnet"], ipv6_subnet = lease_subnets(key[len(self.subnets_prefix):])
            if ipv6_subnet:
                lease["IPv6Subnet"] = ipv6_subnet
            lease["Key"] = key
            leases.append(lease)
        return leases

    def create_lease(self, name: str, value: bytes, ttl: int) -> bool:
        """Put a lease at <prefix>/subnets/<name> ("10.1.52.0-24") that
        expires in `ttl` seconds, only if no lease is there (one etcd
        transaction, as flanneld creates its own); False if one was."""
        key = self.subnets_prefix + name

        def create(client: etcd3gw.Etcd3Client) -> bool:
            lease = client.lease(ttl)
            if client.create(key, value, lease=lease):
                return True
            lease.revoke()
            return False
        return self._call(create)

    def extend_lease(self, name: str, value: bytes, ttl: int, margin: int = 60) -> bool:
        """Give the lease at <prefix>/subnets/<name> `ttl` seconds more to
        live if it holds `value` (compared in the same etcd transaction) and
        has less than `ttl - margin` left; True if it was extended."""
        key = self.subnets_prefix + name

        def extend(client: etcd3gw.Etcd3Client) -> bool:
            found = client.get(key, metadata=True)
            if not found or found[0][0] != value:
                return False
            lease_id = int(found[0][1].get("lease") or 0)
            if lease_id and etcd3gw.Lease(lease_id, client).ttl() >= ttl - margin:
                return False
            lease = client.lease(ttl)
            done = client.transaction({
                "compare": [{"key": _b64(key), "result": "EQUAL", "target": "VALUE",
                             "value": _b64(value)}],
                "success": [{"request_put": {"key": _b64(key), "value": _b64(value),
                                             "lease": lease.id}}],
                "failure": []})
            if not done.get("succeeded"):
                lease.revoke()
                return False
            return True
        return self._call(extend)

    # -- the v2 keyspace (flannel v0.11; v2_network.py) ------------------------------
    def v2_network(self) -> V2Network:
        """flannel's keys under the prefix in etcd's v2 API (config and
        leases); empty where etcd serves no v2 API or has nothing there."""
        def read(endpoint: str) -> V2Network:
            reply = self.session.get(f"{endpoint}/v2/keys{self.prefix}",
                                     params={"recursive": "true"},
                                     timeout=self.settings.timeout)
            if reply.status_code == 404:   # no such key, or no v2 API at all
                return V2Network(config=None, leases=())
            reply.raise_for_status()
            return parse_v2_tree(reply.json(), self.prefix)
        return self._call_endpoints(read)

    def forget_v2_network(self) -> bool:
        """Delete flannel's v2 keys (the prefix, recursively); True if there
        were any."""
        def delete(endpoint: str) -> bool:
            reply = self.session.delete(f"{endpoint}/v2/keys{self.prefix}",
                                        params={"recursive": "true", "dir": "true"},
                                        timeout=self.settings.timeout)
            if reply.status_code == 404:
                return False
            reply.raise_for_status()
            return True
        return self._call_endpoints(delete)

    def release_lease(self, subnet: str, leases: list[dict] | None = None) -> bool:
        """Delete the lease of `subnet` ("10.1.52.0/24", a dual-stack lease's
        IPv6 subnet with it); True if it was there.

        flanneld does not revoke its lease when it stops, and leases live
        24 h: a node leaving the network must give its lease back itself, or
        the network looks in use (a backend change is refused) for a day.
        `leases`: the subnet's leases as leases() gave them, if already read.
        """
        held = leases if leases is not None else [
            lease for lease in self.leases() if lease["Subnet"] == subnet]
        keys = [lease["Key"] for lease in held] or [lease_key(subnet, self.prefix)]
        return any([bool(self._call(lambda client, key=key: client.delete(key)))
                    for key in keys])

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> NetworkStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _client(self, endpoint: str) -> etcd3gw.Etcd3Client:
        if endpoint not in self._clients:
            url = urlsplit(endpoint)
            self._clients[endpoint] = etcd3gw.Etcd3Client(
                host=url.hostname or "",
                port=url.port or DEFAULT_ETCD_PORT,
                protocol="https",
                timeout=self.settings.timeout,
                session=self.session,
            )
        return self._clients[endpoint]

    def _call(self, operation: Callable[[etcd3gw.Etcd3Client], T]) -> T:
        """Run operation on the first endpoint that answers."""
        return self._call_endpoints(lambda endpoint: operation(self._client(endpoint)))

    def _call_endpoints(self, operation: Callable[[str], T]) -> T:
        """Run operation(endpoint) on the first endpoint that answers."""
        failures = []
        for endpoint in ordered(self.settings.endpoints, self._preferred):
            try:
                result = operation(endpoint)
            # OSError: requests raises it for a missing certificate or key file.
            except (Etcd3Exception, requests.RequestException, OSError) as error:
                failures.append(f"{endpoint} ({describe_error(error, self.settings.timeout)})")
                continue
            self._preferred = endpoint
            return result
        raise EtcdUnavailable("cannot reach etcd: " + "; ".join(failures))


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _json_object(value: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def describe_error(error: BaseException, timeout: float) -> str:
    """One short line for an etcd3gw/requests error (etcd3gw keeps its text in
    detail_text, not str())."""
    if isinstance(error, (ConnectionTimeoutError, requests.Timeout)):
        return f"no answer within {timeout:g}s"
    detail = getattr(error, "detail_text", None) or str(error) or type(error).__name__
    known = describe_text(detail)
    if known:
        return known
    detail = " ".join(str(detail).split())
    # requests nests the useful part: "...(Caused by X(Y(8, 'the reason')))".
    quoted = re.findall(r"'([^']{8,})'", detail.partition("Caused by")[2])
    if quoted:
        detail = quoted[-1]
    return detail if len(detail) <= 200 else detail[:197] + "..."
