"""One hook's context: what the hook asks once (Juju's config and relation
data, the machine's links, systemd's word on flanneld, the install record,
what the charm remembers) and hands every step.

Reading never writes: what a hook learns for the next ones (the config, the
binding, the relations' data) is remembered by steps/status.py's remember()
at the hook's end. Values are read on first use, so an idle hook pays only
for what it looks at.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import time
from pathlib import Path
from typing import Callable, NamedTuple, Optional, Protocol

from ..adapters import health, node_files
from ..adapters import links as machine_links
from ..adapters.credentials import ClientFiles, client_files
from ..adapters.install_record import InstallRecord
from ..adapters.machine import Machine
from ..adapters.systemd import ServiceState, Systemd
from ..facts import host_network
from ..facts.digest import digest
from ..facts.flanneld import READY_GRACE, offers_readyz
from ..facts.netconfig import NetworkConfig
from ..facts.options import InvalidOption, NetworkOptions, parse_options
from ..facts.paths import SERVICE_NAME, Paths, install_record_dir
from ..facts.subnet_env import SubnetEnv
from .unit_state import UnitState

IDLE_HOOK = "update-status"


class EtcdRelation(NamedTuple):
    """What etcd's charm publishes on the relation."""
    connection_string: str
    ca: str
    cert: str
    key: str


class EtcdSeen(NamedTuple):
    """The etcd relation as a hook sees it without the credentials: where
    etcd is, and a digest of the client credentials it gives."""
    connection_string: str
    credentials: str


class Juju(Protocol):
    """What the steps ask of Juju (charms.flannel.hook's HookJuju answers through the hook
    tools and the relation endpoints; tests answer it themselves)."""
    hook: str
    charm_dir: Path
    unit: str   # this unit's name, "flannel/0"

    def config(self) -> dict: ...

    def etcd(self) -> Optional[EtcdRelation]: ...   # None until etcd published all of it

    def etcd_related(self) -> bool: ...

    def service_cidr(self) -> Optional[str]: ...    # the control plane's, on the cni relation

    def cni_relation_ids(self) -> list[str]: ...

    def cos_agent_relation_ids(self) -> list[str]: ...

    def topology(self) -> tuple[str, str, str]: ...   # (model, model uuid, application)

    def bind_addresses(self, endpoint: str) -> list[dict]: ...   # network-get; may raise

    def resource_path(self, name: str) -> Optional[str]: ...

    def nagios(self) -> Optional[tuple[str, str]]: ...   # (host name, host context), if related


class HookContext:
    def __init__(self, juju: Juju, state: UnitState, *, machine: Optional[Machine] = None,
                 paths: Optional[Paths] = None, clock: Callable[[], float] = time.time):
        self.juju = juju
        self.state = state
        self.machine = machine or Machine()
        self.paths = paths or Paths()
        self.clock = clock
        self.systemd = Systemd(self.machine)
        self._routes: dict[int, list] = {}

    # --- the hook -------------------------------------------------------------------
    @property
    def hook(self) -> str:
        return self.juju.hook

    @property
    def idle(self) -> bool:
        """update-status: nothing changed that Juju knows of."""
        return self.juju.hook == IDLE_HOOK

    @property
    def templates(self) -> Path:
        return Path(self.juju.charm_dir) / "templates"

    # --- the config and the options ---------------------------------------------------
    @functools.cached_property
    def config(self) -> dict:
        """Juju runs config-changed for every change: an idle hook reads the
        config the last other hook saw."""
        if self.idle and self.state.config is not None:
            return self.state.config
        return dict(self.juju.config())

    # --- the relations' data --------------------------------------------------------
    def _seen(self, name: str) -> tuple[bool, object]:
        """(True, value) where an idle hook takes what the last other hook
        saw of a relation's data: Juju runs a relation hook for every change
        of it. (False, None) elsewhere, or if no hook remembered it."""
        seen = self.state.relations if self.idle else None
        return (True, seen[name]) if seen and name in seen else (False, None)

    @functools.cached_property
    def etcd_seen(self) -> Optional[EtcdSeen]:
        """The etcd relation without its credentials (None until etcd
        published all of it); an idle hook takes the last other hook's."""
        known, seen = self._seen("etcd")
        if known:
            return EtcdSeen(*seen) if seen else None
        etcd = self.juju.etcd()
        return EtcdSeen(etcd.connection_string, digest(etcd.ca, etcd.cert, etcd.key)) \
            if etcd is not None else None

    @functools.cached_property
    def service_cidr(self) -> Optional[str]:
        """The principal's service-cidr on the cni relation; an idle hook
        takes the last other hook's."""
        known, seen = self._seen("service-cidr")
        return seen if known else self.juju.service_cidr()

    @functools.cached_property
    def _parsed_options(self):
        try:
            return parse_options(self.config)
        except InvalidOption as invalid:
            return invalid

    @property
    def options(self) -> Optional[NetworkOptions]:
        """The validated options; None while one is invalid (invalid_option)."""
        parsed = self._parsed_options
        return parsed if isinstance(parsed, NetworkOptions) else None

    @property
    def invalid_option(self) -> Optional[InvalidOption]:
        parsed = self._parsed_options
        return parsed if isinstance(parsed, InvalidOption) else None

    # --- what the charm remembers -------------------------------------------------------
    @property
    def confirmed(self) -> Optional[NetworkConfig]:
        """The network etcd was last confirmed to hold: the one flanneld runs."""
        return NetworkConfig.parse(self.state.confirmed_network)

    @functools.cached_property
    def record(self) -> InstallRecord:
        return InstallRecord(install_record_dir(self.juju.charm_dir))

    @property
    def client_files(self) -> ClientFiles:
        return client_files(self.paths)

    # --- the machine ----------------------------------------------------------------------
    @functools.cached_property
    def links(self) -> list:
        """The machine's links (host_network.Link)."""
        return machine_links.read_links(self.machine)

    @functools.cached_property
    def route_destinations(self) -> set[str]:
        """Where the machine's IPv4 routes lead ("10.1.7.0/24"), read once."""
        return machine_links.route_destinations(self.machine)

    def routes(self, family: int = 4) -> list[dict]:
        """The machine's routes of one family, read once."""
        if family not in self._routes:
            self._routes[family] = machine_links.read_routes(self.machine, family)
        return self._routes[family]

    @functools.cached_property
    def binding_interface(self) -> str:
        """The `cni` binding's interface, skipping fan-* bridges, else the
        default route's ("" if neither); update-status reuses the last
        answer."""
        if self.idle and self.state.binding_interface is not None:
            return self.state.binding_interface
        try:
            bindings = self.juju.bind_addresses("cni")
        except Exception:   # no binding, or network-get failed: the default route's
            bindings = []
        # without a binding, flanneld's own choice: the default route's, of
        # IPv6 first when it runs IPv6-only
        options = self.options
        families = (6, 4) if options is not None and options.cidr is None else (4, 6)
        return host_network.binding_interface(
            bindings, lambda: machine_links.default_route_interface(self.machine, families))

    def flanneld_iface(self, options: Optional[NetworkOptions]) -> str:
        """What flanneld's -iface names: the option, else the binding's
        interface (with invalid options, the one it runs on)."""
        if options is None:
            return self.state.flanneld_iface or ""
        return options.iface or self.binding_interface

    def flanneld_link(self, options: Optional[NetworkOptions]):
        iface = self.flanneld_iface(options)
        return host_network.find_link(iface, self.links) if iface else None

    @functools.cached_property
    def flanneld_service(self) -> ServiceState:
        """flannel.service as systemd shows it, asked once (forget_flanneld
        after a restart): active, and its main process. A hook asks systemd
        only if the main process it named last has gone: while that process
        runs (the same pid, started at the same moment), its unit is active."""
        if self.state.flanneld_process:
            pid, started = self.state.flanneld_process
            if self.machine.process_started(pid) == started:
                return ServiceState(True, pid)
        return self.systemd.service(SERVICE_NAME)

    @property
    def flanneld_active(self) -> bool:
        return self.flanneld_service.active

    @functools.cached_property
    def flanneld_age(self) -> Optional[float]:
        """Seconds since the running flanneld's own process started, whoever
        started it (this charm, systemd's Restart= after a crash, a boot),
        on the boot clock; None when it is not running."""
        service = self.flanneld_service
        if not service.active or service.main_pid is None:
            return None
        return self.machine.process_age(service.main_pid)

    @functools.cached_property
    def flanneld_ready(self) -> Optional[bool]:
        """Whether flanneld's /readyz answers 200, asked once; None where the
        installed flanneld offers no /readyz (before v0.28.9), or where it
        started less than READY_GRACE seconds ago."""
        age = self.flanneld_age
        if not offers_readyz(self.state.flanneld_version) or (
                age is not None and age < READY_GRACE):
            return None
        return health.ready(self.machine)

    def forget_flanneld(self) -> None:
        """After the charm started, stopped or restarted flanneld: systemd is
        asked again, whatever process ran before."""
        for name in ("flanneld_service", "flanneld_age", "flanneld_ready"):
            self.__dict__.pop(name, None)
        self.state.flanneld_process = None

    @functools.cached_property
    def kernel_release(self) -> Optional[str]:
        """The running kernel's release ("6.8.0-45-generic"), None if unreadable."""
        try:
            return self.paths.kernel_release.read_text().strip() or None
        except OSError:
            return None

    def lease(self) -> Optional[SubnetEnv]:
        """flanneld's lease as subnet.env says it now."""
        return node_files.read_lease(self.paths.subnet_env)

    def served_networks(self) -> list:
        """(network, subnet length) of each pod network flanneld serves here:
        the network etcd confirmed, and the one subnet.env names (they
        differ mid-change)."""
        confirmed, lease = self.confirmed, self.lease()
        served = list(confirmed.pod_networks if confirmed else ())
        return served + [pair for pair in (lease.networks if lease else ()) if pair not in served]

    def template_digest(self, name: str) -> str:
        """sha256 of one of the charm's templates (what a rendered file says)."""
        return hashlib.sha256((self.templates / name).read_bytes()).hexdigest()

    @property
    def remembered_etcd(self) -> Optional[str]:
        """The etcd this unit last wrote to, if its client files are still on
        disk: how the stop hook and the actions reach etcd, whatever the
        relation says by then."""
        endpoints = self.state.etcd_endpoints
        return endpoints if endpoints and self.client_files.key_file.exists() else None

    @contextlib.contextmanager
    def etcd_store(self, connection_string: str, timeout: float = 5.0, *,
                   remember: bool = True):
        """flannel's keys in etcd (adapters/etcd.py's NetworkStore), through
        the relation's endpoints and the client files on disk, the endpoint
        that answered last tried first, and remembered (unless `remember`
        is False: an action writes nothing). Raises EtcdUnavailable."""
        from ..adapters.etcd import EtcdClientSettings, NetworkStore
        settings = EtcdClientSettings.from_client_files(connection_string, self.client_files,
                                                        timeout=timeout)
        with NetworkStore(settings, preferred=self.state.etcd_answered) as store:
            try:
                yield store
            finally:
                if remember and store.answered:
                    self.state.etcd_answered = store.answered

    @functools.cached_property
    def kubeconfig(self) -> Optional[bytes]:
        """Root's kubeconfig as the principal wrote it, read once; None while
        there is none."""
        try:
            return self.paths.kubeconfig.read_bytes()
        except OSError:
            return None

    @property
    def kubeconfig_checksum(self) -> Optional[str]:
        """sha256 of root's kubeconfig (an input of the network and of
        flanneld: a new one restarts flanneld on it); None while there is none."""
        data = self.kubeconfig
        return hashlib.sha256(data).hexdigest() if data is not None else None

    def kube_api(self, timeout: float = 5.0):
        """The Kubernetes API through root's kubeconfig (adapters/kube_api.py's
        KubeApi, a context manager). Raises KubeUnavailable (KubeRefused
        for a kubeconfig that cannot work)."""
        from ..adapters.kube_api import KubeApi, read_kubeconfig
        from ..facts.kube_nodes import KubeUnavailable
        text = self.kubeconfig
        if text is None:
            raise KubeUnavailable(f"there is no {self.paths.kubeconfig}")
        access = read_kubeconfig(text.decode(errors="replace"), str(self.paths.kubeconfig.parent))
        return KubeApi(access, timeout=timeout)

    @functools.cached_property
    def hostname(self) -> str:
        """This machine's hostname (/etc/hostname), which kubelet registers
        its Node under unless told otherwise; "" if unreadable."""
        try:
            return self.paths.hostname.read_text().strip()
        except OSError:
            return ""

    def machine_addresses(self) -> list[str]:
        """Every global address of the machine's links ("172.16.0.5")."""
        return [str(a.ip) for link in self.links if not link.loopback for a in link.addresses
                if not a.ip.is_link_local and not a.ip.is_loopback]

    def cni_network_name(self) -> str:
        return node_files.cni_network_name(self.paths.cni_conflist, self.state.cni_network_name,
                                           self.paths.host_local_tables)
