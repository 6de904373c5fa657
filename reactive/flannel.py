"""Reactive handlers of the flannel charm.

Each handler reads its flags, calls the charm's library (lib/charms/flannel)
and sets flags; the logic lives in the library, where tests reach it without
a hook. Flags (docs/design.md has the table):

  flannel.installed           flanneld and the CNI plugin are on disk
  flannel.network.configured  etcd holds the network config of the current options
  flannel.service.running     flannel.service was started with the current inputs
  flannel.cni.configured      the conflist is written and published to the principal
  flannel.series-upgrade      between pre- and post-series-upgrade
  flannel.stopped             the stop hook ran: nothing may install again
                              (Juju runs remove after stop, with no flags left)
  flannel.record-damaged      the install record is unreadable, or missing after
                              an install: nothing is written or removed through it
"""
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

from charmhelpers.core import hookenv, host, unitdata
from charms.reactive import (clear_flag, endpoint_from_flag, endpoint_from_name,
                             get_flags, hook, is_flag_set, set_flag, when, when_not)

# Light modules only: an idle hook (update-status) must not pay for jinja2,
# etcd3gw/requests/TLS or charmhelpers' nrpe; handlers that need them import
# render, network and nrpe when their inputs changed.
from charms.flannel import (adoption, cni, daemon, leftovers, paths, pod_bridge, resource,
                            service, teardown)
from charms.flannel.credentials import client_files, pem_problem, write_client_credentials
from charms.flannel.etcd_probe import EtcdUnavailable, parse_endpoints
from charms.flannel.install_record import InstallRecord, record_problem
from charms.flannel.options import InvalidOption, network_config, parse_options
from charms.flannel.status import Observations, assess
from charms.flannel.subnet import read_lease
from charms.flannel.systemd import Systemd
from charms.flannel.unit_state import UnitState

SERVICE = paths.SERVICE_NAME
INSTALLED = "flannel.installed"
NETWORK_CONFIGURED = "flannel.network.configured"
SERVICE_RUNNING = "flannel.service.running"
CNI_CONFIGURED = "flannel.cni.configured"
SERIES_UPGRADE = "flannel.series-upgrade"
STOPPED = "flannel.stopped"
NRPE_CONFIGURED = "flannel.nrpe.configured"
RECORD_DAMAGED = "flannel.record-damaged"
OWN_FLAGS = (INSTALLED, NETWORK_CONFIGURED, SERVICE_RUNNING, CNI_CONFIGURED,
             SERIES_UPGRADE, NRPE_CONFIGURED, RECORD_DAMAGED)

# Set by the bootstrap (lib/charms/flannel/bootstrap.py INSTALLED_ENV) when
# this hook installed the dependencies and so set a maintenance status.
BOOTSTRAP_INSTALLED_ENV = "FLANNEL_BOOTSTRAP_INSTALLED"

_systemd = Systemd()


def _state() -> UnitState:
    """What the charm remembers between hooks (lib/charms/flannel/unit_state.py)."""
    return UnitState(unitdata.kv())


_hook_record = None  # this hook's install record: loaded once


def _record() -> InstallRecord:
    global _hook_record
    if _hook_record is None:
        _hook_record = InstallRecord(paths.install_record_dir(hookenv.charm_dir()))
    return _hook_record


def _problem(area: str, message=None) -> None:
    _state().set_problem(area, message)


def _digest(*inputs) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


_service_active = None


def _flanneld_active() -> bool:
    """`systemctl is-active flannel`, asked once per hook."""
    global _service_active
    if _service_active is None:
        _service_active = _systemd.is_active(SERVICE)
    return _service_active


def _forget_service_state() -> None:
    global _service_active
    _service_active = None


def _idle_hook() -> bool:
    return hookenv.hook_name() == "update-status"


def _config() -> dict:
    state = _state()
    if _idle_hook() and state.config is not None:
        return state.config
    state.config = dict(hookenv.config())
    return state.config


def _options():
    """The validated options, or None (assess_status shows why)."""
    try:
        return parse_options(_config())
    except InvalidOption:
        return None


def _etcd_settings(etcd, timeout: float = 5.0):
    from charms.flannel.network import EtcdClientSettings
    return EtcdClientSettings.from_client_files(etcd.connection_string(), client_files(),
                                                timeout=timeout)


@hook("install")
def fresh_install():
    clear_flag(STOPPED)


@when_not(INSTALLED, SERIES_UPGRADE, STOPPED, RECORD_DAMAGED)
def install_flannel():
    try:
        name = resource.resource_name()
        files = resource.read_resource(hookenv.resource_get(name) or None, name)
    except resource.ResourceProblem as problem:
        _problem("resource", str(problem))
        return
    full = resource.install_members(_record(), files)
    _problem("resource", full)
    if full:
        return   # blocked; any later hook installs once there is room
    version = daemon.flanneld_version(paths.FLANNELD)
    if version:
        hookenv.application_version_set(version)
    clear_flag(SERVICE_RUNNING)  # a new flanneld restarts it (run_flanneld's digest)
    set_flag(INSTALLED)


@hook("upgrade-charm")
def reinstall_on_upgrade():
    # The resource may be new: install again through the same record; the
    # service restarts only if flanneld's inputs changed.
    if is_flag_set(RECORD_DAMAGED):
        return  # INSTALLED stays: it is what tells a missing record from a fresh unit
    take_over_from_previous_charm()
    clear_flag(INSTALLED)


def take_over_from_previous_charm():
    """A refresh from charm-flannel: its files become this charm's before
    the install handler writes anything (@hook handlers run first)."""
    found = adoption.adopt(_record(), get_flags(), Path(hookenv.charm_dir()))
    if not found.found:
        return
    # still the old charm's flanneld (install_flannel replaces it after this)
    if daemon.of_the_v2_era(daemon.flanneld_version(paths.FLANNELD)):
        _state().v011_rules = True
    for flag in found.flags_to_clear:
        clear_flag(flag)
    state = _state()
    for key in adoption.OLD_DATA_KEYS:
        state.kv.unset(key)
    if found.network_name:
        state.cni_network_name = found.network_name
    hookenv.log("Took over from the previous flannel charm: adopted {}; left {}; "
                "cleared {}".format(", ".join(map(str, found.adopted)) or "nothing",
                                    ", ".join(map(str, found.left)) or "nothing",
                                    ", ".join(found.flags_to_clear)))


@when(INSTALLED, "etcd.available", "etcd.tls.available")
@when_not(NETWORK_CONFIGURED, SERIES_UPGRADE, RECORD_DAMAGED)
def configure_network():
    options = _options()
    if options is None:
        return  # blocked; etcd and the running flanneld are left as they were
    conflict = _cidr_conflict(options)
    _problem("cidr", str(conflict) if conflict else None)
    # An mtu, and IPv6, are checked against flanneld's interface before etcd
    # holds them (an iface that is not there leaves nothing to check).
    unfit = _interface_problems(options) if options.mtu or options.ipv6_cidr else False
    if not options.mtu:
        _problem("mtu", None)
    if not options.ipv6_cidr:
        _problem("ipv6", None)
    if conflict or unfit:
        return  # blocked; etcd and the running flanneld are left as they were
    from charms.flannel.network import EtcdUnavailable, NetworkStore, write_network
    etcd = endpoint_from_flag("etcd.available")
    credentials = etcd.client_credentials()
    not_pem = pem_problem(*credentials)
    if not_pem:
        _problem("etcd", not_pem)  # waiting; what was there stays on disk
        return
    # A change here reaches flanneld through run_flanneld's input digest.
    write_client_credentials(_record(), *credentials)
    try:
        with NetworkStore(_etcd_settings(etcd), preferred=_answered()) as store:
            try:
                write_network(store, options, _service_cidr())
                _carry_v2_leases(store, network_config(options))
            finally:
                _remember_answered(store.answered)
    except (InvalidOption, EtcdUnavailable) as problem:
        # A backend change on a running network, or etcd away: flanneld keeps
        # running as it is until etcd holds what the options ask for (and
        # this handler tries again in the next hook).
        _problem("network", str(problem) if isinstance(problem, InvalidOption) else None)
        _problem("etcd", problem.reason if isinstance(problem, EtcdUnavailable) else None)
        return
    _problem("network", None)
    _problem("etcd", None)
    state = _state()
    confirmed = network_config(options)
    if state.confirmed_network != confirmed:
        state.confirmed_network = confirmed
        clear_flag(CNI_CONFIGURED)  # the principal must hear of the new network
    state.etcd_endpoints = etcd.connection_string()
    state.network_inputs = _network_inputs(options, etcd)
    # flanneld's digest (credentials, network) decides whether it restarts.
    clear_flag(SERVICE_RUNNING)
    set_flag(NETWORK_CONFIGURED)


def _carry_v2_leases(store, config) -> None:
    """flannel v0.11's leases (a cluster of charm-flannel before 2023) into
    v3, before this node's flanneld of today first starts: it keeps its
    subnet and routes the nodes still on v0.11 (v2_network.py). Only then:
    a v2 lease left by a node since gone must not come back later."""
    if _state().flanneld_inputs is not None:
        return
    from charms.flannel.v2_network import carry_leases
    v2, carried = carry_leases(store, config)
    if v2:
        _state().v2_network_seen = True
    if carried:
        hookenv.log("Carried flannel v0.11's leases of {} from etcd's v2 keyspace into v3; "
                    "the v2 keys stay until every node runs today's flanneld".format(
                        ", ".join(carried)))


def _finish_v2_move(etcd) -> None:
    """update-status, on a unit that saw flannel v0.11's network (and only
    there: it pays for etcd3gw): once every node runs today's flanneld,
    delete flannel's v2 keys; until then keep the copies of v0.11 nodes'
    leases alive."""
    from charms.flannel.network import EtcdUnavailable, NetworkStore
    from charms.flannel.v2_network import finish_move
    try:
        with NetworkStore(_etcd_settings(etcd, timeout=3.0), preferred=_answered()) as store:
            done = finish_move(store)
    except EtcdUnavailable as error:
        hookenv.log("Could not look at etcd's v2 keyspace: {}".format(error.reason))
        return
    if done:
        hookenv.log("Every node runs today's flanneld: deleted flannel v0.11's network "
                    "from etcd's v2 keyspace")
    if done is not False:
        _state().v2_network_seen = None


def _cidr_conflict(options):
    """The cidr (and ipv6-cidr) against this machine's networks and routes
    of its family (host_network): an InvalidOption, or None. (The
    service-cidr is checked with etcd's record of it, in configure_network.)
    The network etcd confirmed, which this node runs, is not refused: a
    refresh must not block a working node."""
    confirmed = _state().confirmed_network or {}
    from charms.flannel import host_network
    served = leftovers.pod_networks(confirmed, paths.SUBNET_ENV)
    pod_networks = [network for network, _ in served]
    running = {"cidr": confirmed.get("Network"), "ipv6-cidr": _ipv6_network(confirmed)}
    for option, cidr in (("cidr", options.cidr), ("ipv6-cidr", options.ipv6_cidr)):
        if cidr is None or str(cidr) == str(running[option]):
            continue
        networks = host_network.machine_networks(
            _machine_links(), host_network.read_routes(cidr.version), pod_networks,
            version=cidr.version)
        conflict = host_network.cidr_conflict(cidr, networks, option=option)
        if conflict:
            return conflict
    return None


def _ipv6_network(confirmed):
    """The IPv6 pod network of a confirmed config (None: IPv4 only, or none)."""
    shape = daemon.ipv6_shape(confirmed) if confirmed else None
    return shape[0] if shape else None


def _flanneld_iface(options) -> str:
    """What flanneld's -iface names: the option, else the cni binding's interface."""
    return options.iface or _binding_interface("cni")


_hook_links = None  # this hook's `ip -j addr show`: read once


def _machine_links():
    """The machine's links (host_network.Link), read once per hook: what the
    cidr, iface and mtu checks and the restart compare with."""
    global _hook_links
    if _hook_links is None:
        from charms.flannel import host_network
        _hook_links = host_network.read_links()
    return _hook_links


def _flanneld_link(options):
    """The link flanneld sends on (host_network.Link), None if not found."""
    from charms.flannel import host_network
    iface = _flanneld_iface(options)
    return host_network.find_link(iface, _machine_links()) if iface else None


def _interface_problems(options) -> bool:
    """`iface` (when given) and `mtu` against this machine's links, recorded
    as the unit's problems; True if either is one. Checked before anything
    restarts, and for an mtu before etcd holds it: a flanneld started on a
    missing, down or address-less interface fails or carries nothing, and
    vxlan packets bigger than the interface are fragmented or dropped."""
    from charms.flannel import host_network
    unfit = (host_network.iface_problem(options.iface, _machine_links()) if options.iface
             else None)
    too_big = no_ipv6 = None
    if not unfit and options.mtu:
        too_big = host_network.mtu_problem(options.mtu, _flanneld_link(options))
    if not unfit and options.ipv6_cidr:
        no_ipv6 = host_network.ipv6_problem(_flanneld_link(options))
    _problem("iface", str(unfit) if unfit else None)
    _problem("mtu", str(too_big) if too_big else None)
    _problem("ipv6", str(no_ipv6) if no_ipv6 else None)
    return bool(unfit or too_big or no_ipv6)


def _underlay_mtu(options):
    """The MTU of the link flanneld sends on, None if unknown."""
    link = _flanneld_link(options)
    return link.mtu if link is not None and link.mtu else None


def _service_cidr():
    cni_endpoint = endpoint_from_name("cni")
    return cni_endpoint.service_cidr() if cni_endpoint.relations else None


def _answered():
    return _state().etcd_answered


def _remember_answered(endpoint) -> None:
    if endpoint:
        _state().etcd_answered = endpoint


def _look_at_etcd(etcd) -> None:
    """update-status's one look at etcd (health.py): etcd away is a waiting
    status (flanneld runs on, on its lease); the config gone (etcd rebuilt
    empty) is written again; a lost lease, or another node's lease this
    node has no route to, restarts flanneld, which leases its subnet again
    and routes every lease it lists."""
    from charms.flannel import host_network
    from charms.flannel.health import look_at_etcd
    state = _state()
    seen = look_at_etcd(etcd.connection_string(), client_files(), state.confirmed_network,
                        paths.SUBNET_ENV, preferred=_answered(),
                        routes=host_network.read_routes)
    _problem("etcd", seen.problem)
    _remember_answered(seen.answered)
    if seen.config_missing:
        hookenv.log("etcd holds no flannel network config (rebuilt?): writing it again",
                    level=hookenv.WARNING)
        clear_flag(NETWORK_CONFIGURED)
    if seen.lost_lease:
        hookenv.log("etcd lost this node's lease of {}: restarting flanneld to lease "
                    "it again".format(seen.lost_lease), level=hookenv.WARNING)
    elif seen.unrouted:
        hookenv.log("flanneld has no route to {} that etcd has leases of: restarting it "
                    "to route every lease".format(", ".join(seen.unrouted)),
                    level=hookenv.WARNING)
    no_lease_file = seen.problem is None and _without_subnet_env(state)
    if no_lease_file:
        hookenv.log("flanneld has written no {} since it started: restarting it to write "
                    "it".format(paths.SUBNET_ENV), level=hookenv.WARNING)
    if seen.lost_lease or seen.unrouted or no_lease_file:
        state.flanneld_inputs = None
        clear_flag(SERVICE_RUNNING)
    if state.v2_network_seen and seen.problem is None:
        _finish_v2_move(etcd)


# flanneld writes subnet.env within seconds of its start once etcd answers;
# without it the flannel CNI plugin fails every pod ("failed to load flannel
# 'subnet.env' file"), and flanneld only writes it as it starts.
SUBNET_ENV_GRACE = 60


def _without_subnet_env(state) -> bool:
    """flanneld running for over SUBNET_ENV_GRACE seconds with no subnet.env
    (deleted since, say)."""
    started = state.flanneld_started
    return (is_flag_set(SERVICE_RUNNING) and started is not None
            and time.time() - started > SUBNET_ENV_GRACE
            and read_lease(paths.SUBNET_ENV) is None and not paths.SUBNET_ENV.exists()
            and _flanneld_active())


@when(NETWORK_CONFIGURED)
@when_not("etcd.available")
def forget_network():
    # Without etcd the config can't be checked; re-adding the relation (maybe
    # to another etcd) must write it again.
    clear_flag(NETWORK_CONFIGURED)


@when(INSTALLED, NETWORK_CONFIGURED, "etcd.available")
@when_not(SERVICE_RUNNING, SERIES_UPGRADE, RECORD_DAMAGED)
def run_flanneld():
    options = _options()
    if options is None:
        return
    if _interface_problems(options):
        return  # blocked; flanneld runs on as it was
    etcd = endpoint_from_flag("etcd.available")
    try:
        # relation data is input: only parsed endpoints reach the unit file
        endpoints = parse_endpoints(etcd.connection_string())
    except EtcdUnavailable as problem:
        _problem("etcd", problem.reason)
        return
    record, state = _record(), _state()
    _install_unit_file(record, options, etcd, endpoints)
    service.load_unit_file(record, state, _systemd)
    confirmed = state.confirmed_network
    if confirmed is None:   # a flag set by someone else (an old charm's): not ours
        clear_flag(NETWORK_CONFIGURED)
        return
    if service.restart_if_changed(
            record, state, _systemd, confirmed=confirmed, files=client_files(),
            iface=_flanneld_iface(options), active=_flanneld_active,
            underlay_mtu=_underlay_mtu(options), drop_v011_rules=bool(state.v011_rules),
            network_name=_cni_network_name,
            moved=lambda old, new: teardown.best_effort(
                "give the lease back for the new address",
                lambda: _keep_subnet_for_new_address(etcd, old, new), _log),
            log=hookenv.log):
        _forget_service_state()
        state.v011_rules = None   # dropped while flanneld was stopped
    set_flag(SERVICE_RUNNING)


def _install_unit_file(record: InstallRecord, options, etcd, endpoints) -> None:
    """Render flannel.service when what it says changed (jinja2 only then)."""
    inputs = _unit_file_inputs(options, etcd)
    # the bytes on disk, not only the record: a unit file edited since is
    # rendered again (and systemd reloaded: its checksum is no longer loaded)
    state = _state()
    if state.unit_file_inputs == inputs and record.holds(paths.SERVICE_FILE):
        return
    from charms.flannel import render
    files = client_files()
    unit_file = render.render_service(
        _templates(), endpoints=endpoints, ca_file=files.ca_file,
        cert_file=files.cert_file, key_file=files.key_file,
        iface=_flanneld_iface(options))
    rewritten = record.install(paths.SERVICE_FILE, unit_file.encode(), 0o644, sole=True)
    if rewritten and state.unit_file_inputs == inputs:
        # the same bytes the charm wrote before, over someone's edit that
        # systemd may have loaded and flanneld run: reload, and restart
        state.unit_file_loaded = None
        state.flanneld_inputs = None
    state.unit_file_inputs = inputs


@when(INSTALLED, SERVICE_RUNNING, "endpoint.cni.joined")
@when_not(CNI_CONFIGURED, SERIES_UPGRADE, RECORD_DAMAGED)
def configure_cni():
    if _options() is None:
        return
    # The network etcd confirmed, which pods actually use: during a refused
    # or pending change the principal keeps it, not the option's new value.
    state = _state()
    confirmed = state.confirmed_network
    if not confirmed:
        return
    from charms.flannel import render
    cni_endpoint = endpoint_from_name("cni")
    conflist = render.render_conflist(_templates(), network_name=_cni_network_name())
    _record().install(paths.CNI_CONFLIST, conflist.encode(), 0o644, sole=True)
    # dual-stack as the principals take it (and Calico publishes it): "v4,v6"
    cni_endpoint.set_config(cidr=cni.published_cidr(confirmed),
                            cni_conf_file=paths.CNI_CONFLIST.name)
    state.cni_inputs = _cni_inputs(confirmed, cni_endpoint)
    set_flag(CNI_CONFIGURED)


@hook("stop")
def remove_flannel():
    """Undo exactly what this charm did, and nothing else (LP #1866869)."""
    _tear_down()


@hook("remove")
def remove_unstarted_unit():
    """Juju runs `stop` only for a unit that started (REFERENCE §11): one
    removed between its install and its start gets `remove` alone."""
    if not is_flag_set(STOPPED):
        _tear_down()


def _tear_down():
    state = _state()
    confirmed = state.confirmed_network
    # What flannel served here, read before its files and state go.
    served = leftovers.ServedNetwork(
        networks=leftovers.pod_networks(confirmed, paths.SUBNET_ENV),
        cni_network_name=_cni_network_name())
    options = _options()
    damaged = state.problem("record")   # watch_inputs, this hook
    left = teardown.tear_down(
        None if damaged else _record(), _systemd, served=served, masked=is_flag_set(SERIES_UPGRADE),
        v011_rules=bool(state.v011_rules),
        record_problem=damaged,
        release_lease=lambda: teardown.release_lease_for_backend_change(
            wanted=network_config(options) if options else None, confirmed=confirmed,
            endpoints=state.etcd_endpoints, files=client_files(), preferred=_answered(),
            log=_log),
        remove_nrpe_check=_remove_nrpe_check, log=_log)
    for flag in OWN_FLAGS:
        clear_flag(flag)
    state.forget()
    set_flag(STOPPED)
    if left:
        hookenv.status_set("blocked", "Flannel stopped; {}: left {}".format(
            damaged, ", ".join(left)))
    else:
        hookenv.status_set("maintenance", "Flannel removed.")


def _cni_network_name() -> str:
    """flannel's CNI network name: host-local's table is named after it."""
    return adoption.cni_network_name(paths.CNI_CONFLIST, _state().cni_network_name)


def _log(message: str, warning: bool = False) -> None:
    hookenv.log(message, level=hookenv.WARNING if warning else hookenv.INFO)


def _keep_subnet_for_new_address(etcd, old_iface: str, new_iface: str) -> None:
    """flanneld keys its lease by its public IP: restarted on another
    interface (an `iface` change, a binding that moved) it would find no
    lease of its own and lease a new subnet, and cni0's gateway of the old
    one makes the bridge plugin refuse every new pod. With the old lease
    given back while flanneld is stopped (service.restart_if_changed's
    `moved`), flanneld takes the subnet its subnet.env names again: pods keep
    their addresses and new ones start at once. Only a lease this machine
    holds is given back."""
    from charms.flannel.network import EtcdUnavailable, NetworkStore, give_lease_back
    env = read_lease(paths.SUBNET_ENV)
    if env is None:
        return
    subnet = str(env.subnet.network)
    mine = {str(a.ip) for link in _machine_links() for a in link.addresses}
    try:
        with NetworkStore(_etcd_settings(etcd, timeout=3.0), preferred=_answered()) as store:
            given = give_lease_back(store, subnet, held_by=mine)
    except EtcdUnavailable as error:
        _log("Could not give the lease of {} back: {}".format(subnet, error.reason), True)
        return
    if given:
        _log("flanneld moves from {} to {}: gave the lease of {} back so that it leases the "
             "same subnet under its new address".format(
                 old_iface or "the default route's interface",
                 new_iface or "the default route's interface", subnet))


@hook("pre-series-upgrade")
def pause_for_series_upgrade():
    host.service_pause(SERVICE)
    set_flag(SERIES_UPGRADE)


@hook("post-series-upgrade")
def resume_after_series_upgrade():
    host.service_resume(SERVICE)
    clear_flag(SERIES_UPGRADE)


NRPE_CHECK = {"shortname": SERVICE, "description": "flanneld is running",
              "check_cmd": "check_procs -c 1: -C flanneld"}


@when("nrpe-external-master.available", INSTALLED)
@when_not(NRPE_CONFIGURED)
def update_nrpe_check():
    # NRPE.write() rewrites the check and restarts nagios-nrpe-server: only
    # when the check or what names it (nrpe's host name, the nagios options)
    # changed (watch_inputs), not in every hook.
    inputs = _nrpe_inputs(endpoint_from_flag("nrpe-external-master.available"))
    from charmhelpers.contrib.charmsupport import nrpe
    check = nrpe.NRPE(hostname=nrpe.get_nagios_hostname(), primary=False)
    check.add_check(**NRPE_CHECK)
    check.write()
    _state().nrpe_inputs = inputs
    set_flag(NRPE_CONFIGURED)


@when(NRPE_CONFIGURED)
@when_not("nrpe-external-master.available")
def remove_nrpe_check():
    _remove_nrpe_check()
    _state().nrpe_inputs = None
    clear_flag(NRPE_CONFIGURED)


def _remove_nrpe_check():
    if is_flag_set(NRPE_CONFIGURED):
        from charmhelpers.contrib.charmsupport import nrpe
        check = nrpe.NRPE(hostname=nrpe.get_nagios_hostname(), primary=False)
        check.remove_check(shortname=SERVICE)
        check.write()


_binding = None  # this hook's answer


def _binding_interface(endpoint: str) -> str:
    """The interface of the endpoint's network binding, skipping fan-*
    bridges, else the default route's ('' if neither). Asked of Juju on every
    hook but update-status, which reuses the last answer."""
    global _binding
    if _binding is not None:
        return _binding
    state = _state()
    if _idle_hook() and state.binding_interface is not None:
        _binding = state.binding_interface
        return _binding
    try:
        bindings = hookenv.network_get(endpoint).get("bind-addresses") or []
    except Exception as error:  # an old Juju or no binding: the default route's
        hookenv.log("No network binding for {}: {}".format(endpoint, error))
        bindings = []
    iface = daemon.binding_interface(bindings, daemon.default_route_interface)
    state.binding_interface = iface
    _binding = iface
    return iface


# --- what each step acted on --------------------------------------------------

def _templates() -> Path:
    return Path(hookenv.charm_dir()) / "templates"


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _network_inputs(options, etcd) -> str:
    return _digest(network_config(options), etcd.connection_string(),
                   etcd.client_credentials(), _service_cidr())


def _unit_file_inputs(options, etcd) -> str:
    return _digest(etcd.connection_string(), _flanneld_iface(options),
                   _file_digest(_templates() / "flannel.service"))


def _cni_inputs(confirmed: dict, cni_endpoint) -> str:
    return _digest(cni.published_cidr(confirmed), [r.relation_id for r in cni_endpoint.relations],
                   _file_digest(_templates() / paths.CNI_CONF_NAME))


def _nrpe_inputs(nagios) -> str:
    config = _config()
    return _digest(NRPE_CHECK, nagios.nagios_hostname(), nagios.nagios_host_context(),
                   config.get("nagios_context"), config.get("nagios_servicegroups"))


def check_record():
    """The install record's problem (unreadable, or missing although this
    charm installed through it), or None. While there is one, RECORD_DAMAGED
    keeps every handler that writes through the record from running and
    stop deletes nothing: the unit is blocked, flanneld and the pods carry on."""
    problem = record_problem(paths.install_record_dir(hookenv.charm_dir()),
                             expected=is_flag_set(INSTALLED))
    _problem("record", problem)
    if problem:
        if not is_flag_set(RECORD_DAMAGED):
            hookenv.log("{}: flannel writes and removes no file until it is "
                        "back".format(problem), level=hookenv.WARNING)
        set_flag(RECORD_DAMAGED)
    elif is_flag_set(RECORD_DAMAGED):
        hookenv.log("The install record is readable again")
        clear_flag(RECORD_DAMAGED)
    return problem


def watch_inputs():
    """Before any handler: clear the flag of each step whose inputs changed
    since it acted (or whose result is gone), so that the step runs again
    in this hook, and an idle hook invokes no handler at all."""
    if check_record() or is_flag_set(STOPPED) or is_flag_set(SERIES_UPGRADE):
        return
    options = _options()
    if options is None:
        return  # blocked: nothing is redone from invalid options
    state, record = _state(), _record()
    etcd = endpoint_from_flag("etcd.available")
    if etcd is not None and is_flag_set("etcd.tls.available") and is_flag_set(
            NETWORK_CONFIGURED) and state.network_inputs != _network_inputs(options, etcd):
        clear_flag(NETWORK_CONFIGURED)
    if etcd is not None and _idle_hook() and is_flag_set("etcd.tls.available") and is_flag_set(
            NETWORK_CONFIGURED):
        _look_at_etcd(etcd)
    if etcd is not None and is_flag_set(SERVICE_RUNNING) and (
            state.unit_file_inputs != _unit_file_inputs(options, etcd)
            or not record.holds(paths.SERVICE_FILE) or not _flanneld_active()):
        clear_flag(SERVICE_RUNNING)
    confirmed = state.confirmed_network
    if is_flag_set(CNI_CONFIGURED) and (
            not confirmed or not record.holds(paths.CNI_CONFLIST)
            or state.cni_inputs != _cni_inputs(confirmed, endpoint_from_name("cni"))):
        clear_flag(CNI_CONFIGURED)
    nagios = endpoint_from_flag("nrpe-external-master.available")
    if nagios is not None and is_flag_set(NRPE_CONFIGURED) and (
            state.nrpe_inputs != _nrpe_inputs(nagios)):
        clear_flag(NRPE_CONFIGURED)


hookenv.atstart(watch_inputs)


def keep_pods_startable(lease) -> None:
    """With flanneld on its lease, flannel's old gateways leave cni0
    (pod_bridge.settle_on_lease): whatever changed the lease (it expired
    while flannel was away, the network changed, etcd was rebuilt), the
    bridge plugin refuses every new pod while one is there. Run at the end
    of every hook, just before the status is set from the same lease."""
    state = _state()
    confirmed = state.confirmed_network
    if (lease is None or not confirmed or not is_flag_set(SERVICE_RUNNING)
            or is_flag_set(SERIES_UPGRADE) or is_flag_set(RECORD_DAMAGED)
            or not pod_bridge.exists()):
        _problem("bridge", None)
        _problem("bridge-stale", None)
        return
    network, subnet_len, _ = daemon.network_shape(confirmed)
    ipv6 = daemon.ipv6_shape(confirmed)
    if not lease.leased_in(network, subnet_len, ipv6):
        return   # flanneld is leasing anew: its subnet.env is of the old network
    served = [network] + ([ipv6[0]] if ipv6 else []) + [
        served for served, _ in leftovers.lease_networks(lease)]
    try:
        settled = pod_bridge.settle_on_lease(
            lease.gateways, pod_bridge.FlannelsMarks(networks=tuple(served)), _cni_network_name)
    except (OSError, ValueError, subprocess.SubprocessError) as error:
        _log("Could not look at {}: {}".format(pod_bridge.POD_BRIDGE, error), True)
        return
    for address in settled.removed:
        _log("Took {} off {}: it is the gateway of an earlier lease, and the bridge plugin "
             "refuses new pods beside it; pods of that subnet must be recreated".format(
                 address, pod_bridge.POD_BRIDGE), True)
    _problem("bridge", settled.problem)
    _problem("bridge-stale", "{} still holds flannel's old gateway {}: no new pod starts "
             "until it goes (tried again at every hook)".format(
                 pod_bridge.POD_BRIDGE, ", ".join(map(str, settled.failed)))
             if settled.failed else None)


def finish_hook():
    """After every handler: the bridge settled on flanneld's lease, then the
    status worked out from that same lease."""
    if is_flag_set(STOPPED):
        return
    lease = read_lease(paths.SUBNET_ENV)
    keep_pods_startable(lease)
    assess_status(lease)


def assess_status(lease):
    state = _state()
    try:
        parse_options(_config())
        config_problem = (state.problem("cidr") or state.problem("mtu")
                          or state.problem("network") or state.problem("iface")
                          or state.problem("ipv6"))
    except InvalidOption as invalid:
        config_problem = str(invalid)
    confirmed = state.confirmed_network
    running = is_flag_set(SERVICE_RUNNING)
    cni_configured = is_flag_set(CNI_CONFIGURED)
    status = assess(Observations(
        record_problem=state.problem("record"),
        series_upgrade=is_flag_set(SERIES_UPGRADE),
        resource_problem=state.problem("resource"),
        installed=is_flag_set(INSTALLED),
        config_problem=config_problem,
        # related = the relation exists: before etcd's unit joins (a new unit's
        # hooks up to start) the unit waits for it; blocked only without one
        etcd_related=(is_flag_set("etcd.connected") or is_flag_set("etcd.available")
                      or bool(endpoint_from_name("etcd").relations)),
        etcd_tls_ready=is_flag_set("etcd.available") and is_flag_set("etcd.tls.available"),
        etcd_problem=state.problem("etcd"),
        network_configured=is_flag_set(NETWORK_CONFIGURED),
        service_active=running and _flanneld_active(),
        service_started=running,
        # flanneld's word on its lease (subnet.env), checked against the
        # network etcd confirmed: no etcd round trip in an idle hook.
        cidr=daemon.network_shape(confirmed)[0] if confirmed else None,
        ipv6_cidr=_ipv6_network(confirmed),
        subnet=lease,
        cni_problem=(cni.chain_problem() or cni.runtime_config_problem()
                     or state.problem("bridge")) if cni_configured else None,
        bridge_pending=state.problem("bridge-stale") if cni_configured else None,
        cni_configured=cni_configured,
    ))
    # update-status skips a status-set that would change nothing; any other
    # hook sets it (the bootstrap, or Juju before install, may have set
    # another since the charm last did).
    current = [status.state, status.message]
    if not (_idle_hook() and state.status == current
            and not os.environ.get(BOOTSTRAP_INSTALLED_ENV)):
        hookenv.status_set(status.state, status.message)
    state.status = current


hookenv.atexit(finish_hook)
