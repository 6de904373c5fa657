"""subnet-manager=etcd: flannel's network config and every lease in etcd,
reached with the etcd relation's client credentials (written to
/etc/ssl/flannel for flanneld's -etcd-* flags, root-only).

Serving writes the config with a compare-and-swap over the value the rules
were checked on (units configuring at once write it once; a config another
unit wrote meanwhile is checked again, never overwritten unchecked), and
records the control plane's service-cidr where the workers' units read it.
Before this node's first flanneld start, flannel v0.11's leases are carried
from etcd's v2 keyspace into v3 (facts/v2_network.py).

update-status's look is one TLS connection with the standard library only
(adapters/etcd_probe.py): is etcd there, does it still hold the network
config and this node's lease, which leases do the others hold, is the
network out of subnets, is this unit named beside its lease; and on a unit
that saw flannel v0.11's network, whether every node has moved on from it.
"""
from __future__ import annotations

from typing import Optional

from ...adapters import etcd_probe, journal
from ...adapters.credentials import pem_problem, write_client_credentials
from ...facts.etcd_keys import EtcdUnavailable, parse_endpoints, unit_record
from ...facts.flanneld import JOURNAL_TAIL, has_compaction_loop, stuck_on_compaction
from ...facts.netconfig import NetworkConfig, NotANetworkConfig
from ...facts.options import ETCD, InvalidOption
from ...facts.paths import SERVICE_NAME
from ...facts.restarts import Cause
from ...facts.status import Problem
from ..context import HookContext
from ..flags import NETWORK_CONFIGURED
from ..outcome import Outcome
from . import PROBLEMS, Cluster, FlanneldOn, LeaseLook, Leases, LeasesUnreadable, Refusal

WRITE_ATTEMPTS = 3  # compare-and-swap rounds lost to other writers before waiting


class EtcdSubnets:
    name = ETCD
    problems = PROBLEMS[ETCD]
    principal_first = False
    lease_home = "etcd"

    def __init__(self, ctx: HookContext):
        self.ctx = ctx

    # --- where the leases are kept ------------------------------------------------------
    def reachable(self) -> bool:
        return self.ctx.etcd_seen is not None

    def waiting(self) -> list:
        # related = the relation exists: before etcd's unit joins (a new unit's
        # hooks up to start) the unit waits for it; blocked only without one
        if not self.ctx.juju.etcd_related():
            return [(Problem.NO_ETCD, None)]
        if self.ctx.etcd_seen is None:
            return [(Problem.ETCD_CREDENTIALS, None)]
        return []

    def inputs(self, network: Optional[NetworkConfig]) -> Optional[tuple]:
        etcd = self.ctx.etcd_seen
        if etcd is None:
            return None
        return (network.to_json() if network else None, etcd.connection_string,
                etcd.credentials)

    # --- serve the network --------------------------------------------------------------
    def serve(self, network: NetworkConfig, out: Outcome, *, replace: bool,
              refusal: Refusal) -> bool:
        ctx = self.ctx
        out.found(Problem.ETCD, None)
        etcd = ctx.juju.etcd()
        if etcd is None:
            return False   # waiting for etcd's client credentials (the status says so)
        not_pem = pem_problem(etcd.ca, etcd.cert, etcd.key)
        if not_pem:
            out.found(Problem.ETCD, not_pem)   # waiting; the files on disk stay
            return False
        # a change here reaches flanneld through its input digest
        write_client_credentials(ctx.record, ctx.paths, etcd.ca, etcd.cert, etcd.key)
        published = ctx.service_cidr
        try:
            if self._served(etcd.connection_string, network, replace=replace,
                            published=published):
                if not replace:
                    return False   # etcd holds a network: not a blocked unit's to replace
                ctx.state.etcd_endpoints = etcd.connection_string
                return True
            with ctx.etcd_store(etcd.connection_string) as store:
                if not replace:
                    if not store.swap_config(None, network):
                        # etcd holds a network: not a blocked unit's to replace
                        out.found(Problem.ETCD, None)
                        return False
                    out.say(f"etcd held no flannel network: wrote back {network.network}, "
                            "the one flanneld runs here", True)
                else:
                    services = shared_service_cidr(store, published)
                    ensure_network_config(store, network, refusal, services)
                if ctx.state.flanneld_inputs is None:
                    _carry_v2_leases(ctx, store, network, out)
        except InvalidOption as refused:
            # a backend change under leases, or a pod network over the
            # service-cidr: flanneld runs on as it is
            out.found(Problem.NETWORK, str(refused)).found(Problem.ETCD, None)
            return False
        except EtcdUnavailable as away:
            # flanneld runs on as it is until etcd holds the network (tried again
            # at the next hook)
            out.found(Problem.ETCD, away.reason)
            return False
        out.found(Problem.ETCD, None)
        ctx.state.etcd_endpoints = etcd.connection_string
        return True

    def _served(self, connection_string: str, network: NetworkConfig, *, replace: bool,
                published: Optional[str]) -> bool:
        """Whether etcd already holds all that serving would write, by a look
        with the standard library (etcd3gw, a quarter of a second to import,
        only to write): with `replace`, this network config, the service-cidr
        the principal published, and (before flanneld first starts here) no
        flannel v0.11 keys to carry; without it, any config (a blocked unit
        only writes one back into an empty etcd). Raises EtcdUnavailable."""
        ctx = self.ctx
        files = ctx.client_files
        first_start = ctx.state.flanneld_inputs is None
        view = etcd_probe.look(parse_endpoints(connection_string),
                               str(files.ca_file), str(files.cert_file), str(files.key_file),
                               preferred=ctx.state.etcd_answered, service_cidr=True,
                               v2=replace and first_start, timeout=5.0)
        ctx.state.etcd_answered = view.endpoint
        if not replace or view.config is None:
            return view.config is not None
        try:
            held = NetworkConfig.from_json(view.config).to_json()
        except NotANetworkConfig:
            return False
        return (held == network.to_json() and published in (None, view.service_cidr)
                and not (first_start and view.v2_network))

    def keep(self, network: NetworkConfig, out: Outcome) -> bool:
        """The relation's client credentials on disk (rotated meanwhile:
        steps/network.py then restarts flanneld on them), and an etcd
        rebuilt empty given back the network flanneld runs here: a look
        with the standard library first, etcd3gw only to write."""
        ctx = self.ctx
        etcd = ctx.juju.etcd()
        if etcd is None:
            return False
        not_pem = pem_problem(etcd.ca, etcd.cert, etcd.key)
        if not_pem:
            out.found(Problem.ETCD, not_pem)
            return False
        write_client_credentials(ctx.record, ctx.paths, etcd.ca, etcd.cert, etcd.key)
        files = ctx.client_files
        try:
            view = etcd_probe.look(parse_endpoints(etcd.connection_string), str(files.ca_file),
                                   str(files.cert_file), str(files.key_file),
                                   preferred=ctx.state.etcd_answered, timeout=3.0)
            if view.config is None:
                with ctx.etcd_store(etcd.connection_string) as store:
                    if store.swap_config(None, network):
                        out.say(f"etcd held no flannel network: wrote back {network.network}, "
                                "the one flanneld runs here", True)
        except EtcdUnavailable as away:
            out.found(Problem.ETCD, away.reason)
            return False
        out.found(Problem.ETCD, None)
        return True

    def flanneld(self, out: Outcome) -> Optional[FlanneldOn]:
        ctx = self.ctx
        etcd = ctx.etcd_seen
        if etcd is None:
            return None   # waiting for etcd's client credentials (the status says so)
        try:
            # relation data is input: only parsed endpoints reach the unit file
            endpoints = parse_endpoints(etcd.connection_string)
        except EtcdUnavailable as problem:
            out.found(Problem.ETCD, problem.reason)
            return None
        from ...facts.etcd_keys import DEFAULT_PREFIX
        files = ctx.client_files
        arguments = (f"-etcd-endpoints={','.join(endpoints)}", f"-etcd-prefix={DEFAULT_PREFIX}",
                     f"-etcd-cafile={files.ca_file}", f"-etcd-certfile={files.cert_file}",
                     f"-etcd-keyfile={files.key_file}")
        reads = tuple(ctx.record.checksum(path)
                      for path in (files.ca_file, files.cert_file, files.key_file))
        return FlanneldOn(where=etcd.connection_string, arguments=arguments, reads=reads)

    # --- this node's lease ----------------------------------------------------------------
    def look(self, out: Outcome, *, flanneld_started: bool) -> LeaseLook:
        ctx = self.ctx
        etcd = ctx.etcd_seen
        if etcd is None:
            return LeaseLook(unreachable=True, cause=self._watch_cause(flanneld_started))
        own = own_lease(ctx)
        files = ctx.client_files
        known = etcd_probe.LeaseList.from_stored(ctx.state.lease_list)
        try:
            view = etcd_probe.look(parse_endpoints(etcd.connection_string), str(files.ca_file),
                                   str(files.cert_file), str(files.key_file), lease_of=own,
                                   leases=True, preferred=ctx.state.etcd_answered,
                                   known=known, unit=ctx.juju.unit, timeout=3.0)
        except EtcdUnavailable as unavailable:
            out.found(Problem.ETCD, unavailable.reason)
            return LeaseLook(unreachable=True, cause=self._watch_cause(flanneld_started))
        out.found(Problem.ETCD, None)
        ctx.state.etcd_answered = view.endpoint
        if view.leases is not None:
            ctx.state.lease_list = view.leases.as_stored()
        if view.config is None:
            out.say("etcd holds no flannel network config (rebuilt?): writing it again", True)
            out.clear(NETWORK_CONFIGURED)
        lost = own if view.lease is False else None
        full = out_of_subnets(ctx, view.subnets, holds=own is not None and not lost)
        out.found(Problem.OUT_OF_SUBNETS, full)
        # (a lease of no address names no holder: nothing to write)
        if own and view.lease and view.lease_public_ip:
            record = unit_record(ctx.juju.unit, own, view.lease_public_ip)
            if view.unit_record != record:
                self._register(own, record, etcd.connection_string, out)
        if ctx.state.v2_network_seen:
            finish_v2_move(ctx, etcd.connection_string, out)
        others = tuple(s for s in view.subnets if s != (own or "").partition("&")[0]) \
            if view.lease else None
        return LeaseLook(lost=f"etcd lost this node's lease of {lost}" if lost else None,
                         others=others, unmendable=full is not None,
                         cause=self._watch_cause(flanneld_started and full is None))

    def _watch_cause(self, leasing: bool) -> Optional[Cause]:
        """flanneld < 0.28.9 whose etcd watch retries a compacted revision
        without end (its journal's tail says so): a restart watches anew."""
        ctx = self.ctx
        if not leasing or not has_compaction_loop(ctx.state.flanneld_version) \
                or not ctx.flanneld_active:
            return None
        if not stuck_on_compaction(journal.tail(ctx.machine, SERVICE_NAME, JOURNAL_TAIL)):
            return None
        return Cause("watch-stuck", f"flanneld {ctx.state.flanneld_version}'s etcd watch "
                                    "retries a compacted revision without end "
                                    "(flannel-io/flannel#2470, fixed in v0.28.9)")

    def _register(self, lease_name: str, record: dict, connection_string: str,
                  out: Outcome) -> None:
        """Name this unit in etcd as the holder of its lease (list-leases and
        check-network say which unit holds a lease), where the look found
        the lease held at its address and no such name as it should be: a
        new lease, a new address, an etcd rebuilt (whichever unit noticed it
        first) or another etcd."""
        ctx = self.ctx
        try:
            self._name_holder(parse_endpoints(connection_string), record)
        except EtcdUnavailable as error:
            out.say(f"Could not name this unit beside its lease in etcd: {error.reason}")
            return
        out.say(f"Named {ctx.juju.unit} the holder of {lease_name} in etcd")
        ctx.state.registered_lease = lease_name

    def _name_holder(self, endpoints, record: Optional[dict]) -> None:
        """This unit's name beside its lease written (record), or deleted (None)."""
        ctx, files = self.ctx, self.ctx.client_files
        ctx.state.etcd_answered = etcd_probe.name_holder(
            endpoints, str(files.ca_file), str(files.cert_file), str(files.key_file),
            ctx.juju.unit, record, preferred=ctx.state.etcd_answered)

    def addresses_of(self, subnets: tuple) -> dict:
        ctx = self.ctx
        etcd = ctx.etcd_seen
        if etcd is None or not subnets:
            return {}
        files = ctx.client_files
        try:
            values = etcd_probe.lease_values(
                parse_endpoints(etcd.connection_string), str(files.ca_file),
                str(files.cert_file), str(files.key_file), subnets,
                preferred=ctx.state.etcd_answered)
        except EtcdUnavailable:
            return {}
        return {subnet: value.get("PublicIP") for subnet, value in values.items()
                if isinstance(value.get("PublicIP"), str)}

    def leases(self) -> Leases:
        """Through the endpoints the unit last wrote to and the client files
        on disk, as the stop hook reaches etcd: an action works in any state
        the unit is in, the etcd relation's hooks aside."""
        ctx = self.ctx
        endpoints = ctx.remembered_etcd
        if endpoints is None:
            raise LeasesUnreadable("etcd", "this unit has not written to etcd yet (no etcd "
                                           "relation?)")
        try:
            with ctx.etcd_store(endpoints, timeout=5.0, remember=False) as store:
                return Leases(store.lease_lifetimes(), store.unit_names())
        except EtcdUnavailable as error:
            raise LeasesUnreadable(
                "etcd", error.reason.removeprefix("cannot reach etcd: ")) from None

    def before_new_address(self, old_iface: Optional[str], new_iface: str,
                           out: Outcome) -> None:
        """flanneld keys its lease by its public IP: restarted on another
        interface (an `iface` change, a binding that moved) it would find no
        lease of its own and lease a new subnet, and cni0's gateway of the
        old one makes the bridge plugin refuse every new pod. With the old
        lease given back while flanneld is stopped, flanneld takes the
        subnet its subnet.env names again: pods keep their addresses and new
        ones start at once. Only a lease this machine holds is given back.
        Best effort."""
        ctx = self.ctx
        lease, etcd = ctx.lease(), ctx.etcd_seen
        if lease is None or etcd is None:
            return
        subnet = str(lease.primary.network)
        mine = {str(a.ip) for link in ctx.links for a in link.addresses}
        try:
            with ctx.etcd_store(etcd.connection_string, timeout=3.0) as store:
                given = store.give_lease_back(subnet, held_by=mine)
        except (EtcdUnavailable, OSError, ValueError) as error:
            out.say(f"Could not give the lease of {subnet} back: "
                    f"{getattr(error, 'reason', error)}", True)
            return
        if given:
            out.say("flanneld moves from {} to {}: gave the lease of {} back so that it leases "
                    "the same subnet under its new address".format(
                        old_iface or "the default route's interface",
                        new_iface or "the default route's interface", subnet))

    # --- leave the mode -------------------------------------------------------------------
    def leave(self, out: Outcome, *, keep_lease: bool) -> None:
        """This unit's name beside its lease goes; the lease too unless
        `keep_lease` (a unit removed keeps it its 24 h, so that one added
        back keeps the subnet and its pods their addresses), and with it
        the network config once no node holds a lease. Each on its own."""
        parts = [] if keep_lease else [lambda: self._give_lease_back(out)]
        for part in parts + [self._forget_registration]:
            try:
                part()
            except EtcdUnavailable as error:
                out.say(f"Could not clear all that subnet-manager=etcd kept: {error.reason}",
                        True)
        state = self.ctx.state
        state.etcd_endpoints = state.registered_lease = state.lease_list = None

    def files(self) -> tuple:
        paths = self.ctx.paths
        return (paths.etcd_ca, paths.etcd_cert, paths.etcd_key), paths.etcd_tls_dir

    def _give_lease_back(self, out: Outcome) -> None:
        """This node's lease deleted from etcd (flanneld stopped), and the
        network config once no node holds a lease."""
        ctx = self.ctx
        lease, endpoints = ctx.lease(), ctx.remembered_etcd
        if lease is None or endpoints is None:
            return
        subnet = str(lease.primary.network)
        with ctx.etcd_store(endpoints, timeout=3.0) as store:
            if store.give_lease_back(subnet, held_by=ctx.machine_addresses()):
                out.say(f"Deleted this node's lease of {subnet} from etcd")
            if store.forget_network_if_unleased():
                out.say("No node holds a lease in etcd any more: deleted flannel's network "
                        "config")

    def _forget_registration(self) -> None:
        """The unit's name beside its lease (_register) goes: list-leases
        shows a lease kept for a unit added back as held by no unit."""
        ctx = self.ctx
        endpoints = ctx.remembered_etcd
        if not ctx.state.registered_lease or endpoints is None:
            return
        self._name_holder(parse_endpoints(endpoints), None)


# --- the network config in etcd --------------------------------------------------------------

def shared_service_cidr(store, published: Optional[str]) -> Optional[str]:
    """The service-cidr every unit checks the pod network against. Only the
    control plane publishes it, to its own flannel unit: that unit records
    it in etcd, where the units beside workers (never told) read it, so
    that once it is recorded a cidr over the service network is refused on
    every node before any of them writes it."""
    if published:
        store.record_service_cidr(published)
        return published
    return store.read_service_cidr()


def ensure_network_config(store, wanted_network: NetworkConfig, refusal: Refusal,
                          service_cidr: Optional[str] = None,
                          attempts: int = WRITE_ATTEMPTS) -> bool:
    """Make etcd hold `wanted_network`, unless `refusal` refuses the cluster
    etcd shows (the backend its config has, held by its leases; the
    service-cidr); True if this call wrote it.

    Raises the refusal's InvalidOption, and EtcdUnavailable when etcd
    cannot be reached. The write is a compare-and-swap over the value the
    rules were checked on: units configuring the network at once (first
    deploy, concurrent hooks) write it once, and a config another unit
    wrote meanwhile is checked again, never overwritten unchecked.
    """
    for _ in range(attempts):
        current, raw = store.read_config()
        if current is not None and current.to_json() == wanted_network.to_json():
            return False
        backends = {}
        if current is not None and current.backend.type != wanted_network.backend.type:
            backends = {current.backend.type: len(store.leases())}
        refused = refusal(Cluster(backends=backends, service_cidr=service_cidr))
        if refused:
            raise refused
        if store.swap_config(raw, wanted_network):
            return True
    raise EtcdUnavailable(
        f"the flannel network config in etcd kept changing while this unit wrote it "
        f"({attempts} tries): another writer wants another config; trying again at the next hook")


def _carry_v2_leases(ctx: HookContext, store, network: NetworkConfig, out: Outcome) -> None:
    """flannel v0.11's leases (charm-flannel up to f79f180) into v3, before
    this node's flanneld first starts: it keeps its subnet and routes the
    nodes still on v0.11 (facts/v2_network.py). Only then: a v2 lease left
    by a node since gone must not come back later."""
    from ...facts.v2_network import carried_ttl, leases_to_carry
    v2 = store.v2_network()
    if not v2:
        return
    ctx.state.v2_network_seen = True
    carried = [str(lease.subnet) for lease in leases_to_carry(v2, store.leases(), network)
               if store.create_lease(lease.name, lease.value, carried_ttl(lease))]
    if carried:
        out.say("Carried flannel v0.11's leases of {} from etcd's v2 keyspace into v3; the v2 "
                "keys stay until every node runs flanneld >= 0.18".format(", ".join(carried)))


# --- what update-status looks at -------------------------------------------------------------

def own_lease(ctx: HookContext) -> Optional[str]:
    """The lease subnet.env names, if it is one of the network etcd
    confirmed (a subnet.env of another network is being re-leased), named
    as flanneld keys it: "10.1.52.0/24", dual-stack with "&" and the IPv6
    subnet."""
    lease, confirmed = ctx.lease(), ctx.confirmed
    if lease is None or confirmed is None or not confirmed.holds(lease):
        return None
    return lease.lease_name


def out_of_subnets(ctx: HookContext, subnets: tuple, *, holds: bool) -> Optional[str]:
    """Why flanneld can lease nothing, when every subnet of the network is
    leased and this node holds none in etcd (whatever a stale subnet.env
    says): flanneld exits "out of subnets", and systemd starts it again
    every five seconds until a lease expires."""
    confirmed = ctx.confirmed
    if confirmed is None or holds or not subnets:
        return None
    held, room = confirmed.subnets_held(subnets), confirmed.leasable
    if held < room:
        return None
    return (f"Out of subnets: {held} leases hold every /{confirmed.subnet_len} flanneld hands "
            f"out of {confirmed.network} (a removed node's lease lives 24 h: list-leases names "
            "them); set a longer subnet-len or a larger cidr")


def finish_v2_move(ctx: HookContext, connection_string: str, out: Outcome) -> None:
    """Only on a unit that saw flannel v0.11's network (it pays for etcd3gw):
    once every node runs flanneld >= 0.18, delete flannel's v2 keys; until
    then keep the copies of v0.11 nodes' leases alive."""
    from ...facts.v2_network import carried_ttl, copies, moved
    try:
        with ctx.etcd_store(connection_string, timeout=3.0) as store:
            v2 = store.v2_network()
            if not v2:
                done = None
            else:
                v3_leases = store.leases()
                if moved(v2, v3_leases):
                    store.forget_v2_network()
                    done = True
                else:
                    for lease in copies(v2, v3_leases):   # renewed in v2 since it was copied?
                        store.extend_lease(lease.name, lease.value, carried_ttl(lease))
                    done = False
    except EtcdUnavailable as error:
        out.say(f"Could not look at etcd's v2 keyspace: {error.reason}")
        return
    if done:
        out.say("Every node runs flanneld >= 0.18: deleted flannel v0.11's network from "
                "etcd's v2 keyspace")
    if done is not False:
        ctx.state.v2_network_seen = None
