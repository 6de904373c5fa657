"""etcd, where flannel's network config and its nodes' leases live: the
only module that imports etcd3gw and requests (a quarter of a second to
import: idle hooks look through adapters/etcd_probe.py instead).

NetworkStore talks to etcd through etcd3gw's HTTP gateway client with a
requests.Session of our own: trust_env=False, because REQUESTS_CA_BUNDLE or
CURL_CA_BUNDLE in the environment would otherwise replace the etcd CA from the
relation and break (or silently widen) TLS verification. It stores and
reads; what to write and when is steps/network.py's.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import NamedTuple, TypeVar
from urllib.parse import urlsplit

import etcd3gw
import requests
from etcd3gw.exceptions import ConnectionTimeoutError, Etcd3Exception

from ..facts.etcd_keys import (DEFAULT_ETCD_PORT, DEFAULT_PREFIX, EtcdUnavailable, Lease,
                               config_key, describe_text, json_object, ordered,
                               parse_endpoints, service_cidr_key, subnets_key, units_key)
from ..facts.netconfig import NetworkConfig, NotANetworkConfig
from ..facts.v2_network import V2Network

T = TypeVar("T")


class EtcdClientSettings(NamedTuple):
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
        return config_key(self.prefix)

    @property
    def subnets_prefix(self) -> str:
        return subnets_key(self.prefix)

    @property
    def service_cidr_key(self) -> str:
        """(steps/subnets/etcd.py's shared_service_cidr records it)"""
        return service_cidr_key(self.prefix)

    def read_service_cidr(self) -> str | None:
        values = self._call(lambda client: client.get(self.service_cidr_key))
        return values[0].decode(errors="replace") if values else None

    def record_service_cidr(self, value: str) -> None:
        if self.read_service_cidr() != value:
            self._call(lambda client: client.put(self.service_cidr_key, value))

    def read_config(self) -> tuple[NetworkConfig | None, bytes | None]:
        """(the stored network config, None if absent or not a config; the
        stored bytes, None when the key is absent): swap_config() compares
        against the bytes."""
        values = self._call(lambda client: client.get(self.config_key))
        if not values:
            return None, None
        try:
            return NetworkConfig.from_json(values[0]), values[0]
        except NotANetworkConfig:
            return None, values[0]

    def swap_config(self, expected: bytes | None, config: NetworkConfig) -> bool:
        """Store config only if the key still holds `expected` (None: only if
        it is absent), in one etcd transaction; False if another writer
        changed it since it was read."""
        data = json.dumps(config.to_json(), sort_keys=True).encode()
        if expected is None:
            return bool(self._call(lambda client: client.create(self.config_key, data)))
        return bool(self._call(lambda client: client.replace(self.config_key, expected, data)))

    def leases(self) -> list[Lease]:
        """The subnet leases flanneld holds (expired ones are gone from etcd)."""
        items = self._call(lambda client: client.get_prefix(self.subnets_prefix))
        return [_lease(value, meta) for value, meta in items]

    def lease_lifetimes(self) -> list[tuple[Lease, int | None]]:
        """Every lease with the seconds its etcd lease has left (None for a
        key bound to no etcd lease)."""
        def read(client: etcd3gw.Etcd3Client) -> list[tuple[Lease, int | None]]:
            found = []
            for value, meta in client.get_prefix(self.subnets_prefix):
                lease_id = int(meta.get("lease") or 0)
                ttl = etcd3gw.Lease(lease_id, client).ttl() if lease_id else None
                found.append((_lease(value, meta), ttl))
            return found
        return self._call(read)

    def unit_names(self) -> dict[tuple[str, str], str]:
        """(IPv4 subnet, node address) of a lease -> the unit that named
        itself its holder. Keyed by both: a lost unit's name (its stop hook
        never ran) does not stick to its subnet once another node leases it."""
        items = self._call(lambda client: client.get_prefix(units_key(self.prefix)))
        named = {}
        for value, _ in items:
            found = json_object(value) or {}
            if all(isinstance(found.get(key), str) for key in ("unit", "lease", "public-ip")):
                named[(found["lease"].partition("&")[0], found["public-ip"])] = found["unit"]
        return named

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
        from . import etcd_probe
        settings = self.settings
        return etcd_probe.v2_network(settings.endpoints, settings.ca_file, settings.cert_file,
                                     settings.key_file, prefix=self.prefix,
                                     preferred=self._preferred, timeout=settings.timeout)

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

    def give_lease_back(self, subnet: str, *, held_by=None) -> bool:
        """Delete the lease of `subnet` ("10.1.52.0/24"); True if it was
        there. With `held_by` (the machine's addresses), only if the lease's
        PublicIP is one of them: a lease that expired and was leased by
        another node since is not this node's to give back."""
        held = [lease for lease in self.leases() if lease.subnet == subnet]
        if not held or (held_by is not None and any(lease.public_ip not in held_by
                                                    for lease in held)):
            return False
        return self.release_lease(held)

    def release_lease(self, leases: list[Lease]) -> bool:
        """Delete these leases; True if any was there. flanneld does not
        revoke its lease when it stops, and leases live 24 h."""
        return any([bool(self._call(lambda client, key=lease.key: client.delete(key)))
                    for lease in leases])

    def forget_network_if_unleased(self) -> bool:
        """The network config and the recorded service-cidr deleted when no
        node holds a lease any more (the last node out of etcd mode); True
        if they went. One transaction, on the condition that no key under
        the subnets prefix exists (etcd compares every key of a range, and
        an empty range as a key never created): a node leasing meanwhile
        keeps the config its flanneld runs on."""
        prefix = self.subnets_prefix.encode()

        def forget(client: etcd3gw.Etcd3Client) -> bool:
            done = client.transaction({
                "compare": [{"key": _b64(prefix), "range_end": _b64(_prefix_end(prefix)),
                             "result": "EQUAL", "target": "CREATE", "create_revision": 0}],
                "success": [{"request_delete_range": {"key": _b64(key)}}
                            for key in (self.config_key, self.service_cidr_key)],
                "failure": []})
            return bool(done.get("succeeded")) and any(
                int((reply.get("response_delete_range") or {}).get("deleted") or 0)
                for reply in done.get("responses") or ())
        return bool(self._call(forget))

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


def _lease(value: bytes, meta: dict) -> Lease:
    """A lease from one key etcd3gw's get_prefix returned."""
    key = meta["key"]
    return Lease.from_etcd(key.decode() if isinstance(key, bytes) else str(key), value)


def _prefix_end(prefix: bytes) -> bytes:
    """The end of the key range of everything under `prefix` (its last
    byte plus one, as etcdctl --prefix does)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


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
