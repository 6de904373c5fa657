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
from pathlib import Path

from charmhelpers.core import hookenv, host, unitdata
from charms.reactive import (clear_flag, endpoint_from_flag, endpoint_from_name,
                             get_flags, hook, is_flag_set, set_flag, when, when_not)

# Light modules only: an idle hook (update-status) must not pay for jinja2,
# etcd3gw/requests/TLS or charmhelpers' nrpe; handlers that need them import
# render, network and nrpe when their inputs changed.
from charms.flannel import adoption, cni, daemon, leftovers, paths, resource
from charms.flannel.credentials import client_files, pem_problem, write_client_credentials
from charms.flannel.etcd_probe import EtcdUnavailable, parse_endpoints
from charms.flannel.install_record import InstallRecord, out_of_space, record_problem
from charms.flannel.options import InvalidOption, network_config, parse_options
from charms.flannel.status import Observations, assess
from charms.flannel.subnet import read_lease

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

# Problems found by one handler, shown by the status assessment at hook end.
# Kept in unitdata so a hook that skips a handler still reports its problem.
PROBLEM_KEY = "flannel.problem."
DIGEST_KEY = "flannel.service-inputs"
# The network config etcd was last confirmed to hold: flanneld's inputs are
# what etcd says, not what the options say before etcd has taken them.
NETWORK_KEY = "flannel.network-config"
# What each handler last acted on (a digest of its inputs): a handler whose
# inputs are unchanged and whose flag is set has nothing to do.
NETWORK_INPUTS_KEY = "flannel.network-inputs"
UNIT_FILE_INPUTS_KEY = "flannel.unit-file-inputs"
CNI_INPUTS_KEY = "flannel.cni-inputs"
NRPE_INPUTS_KEY = "flannel.nrpe-inputs"
# The unit file's checksum systemd last loaded (daemon-reload): a hook that
# died after writing the file and before reloading reloads on retry.
UNIT_FILE_LOADED_KEY = "flannel.unit-file-loaded"
# The etcd this unit last wrote to, for the stop hook's lease release (the
# relation may be gone by then; the client files are still on disk).
ETCD_ENDPOINTS_KEY = "flannel.etcd-endpoints"
# The etcd endpoint that answered last, tried first by the next hook: a dead
# member listed first costs one hook its timeout, not every hook.
ETCD_ANSWERED_KEY = "flannel.etcd-answered"
# network-get's answer, asked again on any hook but update-status.
BINDING_KEY = "flannel.binding-interface"
# The interface flanneld was last started on: a new one is a new public IP,
# under which flanneld would lease a new subnet (see _keep_subnet_for_new_address).
FLANNELD_IFACE_KEY = "flannel.flanneld-iface"
# The workload status last set: update-status sets it only when it changes.
STATUS_KEY = "flannel.status"
# Set by the bootstrap (lib/charms/flannel/bootstrap.py INSTALLED_ENV) when
# this hook installed the dependencies and so set a maintenance status.
BOOTSTRAP_INSTALLED_ENV = "FLANNEL_BOOTSTRAP_INSTALLED"
# The charm config as the last hook but update-status read it: Juju runs
# config-changed for every change, so an idle hook need not ask again.
CONFIG_KEY = "flannel.config"
# The CNI network name the old charm's conflist used (adoption): host-local's
# allocation table is named after it.
NETWORK_NAME_KEY = "flannel.cni-network-name"


def _record() -> InstallRecord:
    return InstallRecord(paths.install_record_dir(hookenv.charm_dir()))


def _problem(area: str, message=None) -> None:
    kv = unitdata.kv()
    if kv.get(PROBLEM_KEY + area) != message:
        kv.set(PROBLEM_KEY + area, message)


def _digest(*inputs) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def _unchanged(key: str, digest: str) -> bool:
    return unitdata.kv().get(key) == digest


_service_active = None


def _flanneld_active() -> bool:
    """`systemctl is-active flannel`, asked once per hook."""
    global _service_active
    if _service_active is None:
        _service_active = host.service_running(SERVICE)
    return _service_active


def _forget_service_state() -> None:
    global _service_active
    _service_active = None


def _idle_hook() -> bool:
    return hookenv.hook_name() == "update-status"


def _config() -> dict:
    kv = unitdata.kv()
    if _idle_hook() and kv.get(CONFIG_KEY) is not None:
        return kv.get(CONFIG_KEY)
    config = dict(hookenv.config())
    if kv.get(CONFIG_KEY) != config:
        kv.set(CONFIG_KEY, config)
    return config


def _options():
    """The validated options, or None (assess_status shows why)."""
    try:
        return parse_options(_config())
    except InvalidOption:
        return None


def _etcd_settings(etcd, connection_string=None, timeout: float = 5.0):
    from charms.flannel.network import EtcdClientSettings
    files = client_files()
    return EtcdClientSettings.from_connection_string(
        connection_string if etcd is None else etcd.connection_string(),
        str(files.ca_file), str(files.cert_file), str(files.key_file), timeout=timeout)


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
    record = _record()
    for path, member in ((paths.FLANNELD, "flanneld"), (paths.CNI_PLUGIN, "cni-plugin/flannel")):
        try:
            record.install(path, files[member], 0o755)
        except OSError as error:
            # A full disk is the operator's to fix: blocked, and any later
            # hook (update-status at worst) installs once there is room.
            full = out_of_space(error, path, len(files[member]))
            if full is None:
                raise
            _problem("resource", full)
            return
    _problem("resource", None)
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
    for flag in found.flags_to_clear:
        clear_flag(flag)
    kv = unitdata.kv()
    for key in adoption.OLD_DATA_KEYS:
        kv.unset(key)
    if found.network_name:
        kv.set(NETWORK_NAME_KEY, found.network_name)
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
    if conflict:
        return  # blocked; etcd and the running flanneld are left as they were
    from charms.flannel.host_network import cidr_conflict
    from charms.flannel.network import (EtcdUnavailable, NetworkStore, ensure_network_config,
                                        shared_service_cidr)
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
                service = cidr_conflict(options.cidr, (),
                                        shared_service_cidr(store, _service_cidr()))
                if service:
                    raise service   # blocked, before anything is written
                ensure_network_config(store, options)
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
    kv = unitdata.kv()
    confirmed = network_config(options)
    if kv.get(NETWORK_KEY) != confirmed:
        kv.set(NETWORK_KEY, confirmed)
        clear_flag(CNI_CONFIGURED)  # the principal must hear of the new network
    kv.set(ETCD_ENDPOINTS_KEY, etcd.connection_string())
    kv.set(NETWORK_INPUTS_KEY, _network_inputs(options, etcd))
    # flanneld's digest (credentials, network) decides whether it restarts.
    clear_flag(SERVICE_RUNNING)
    set_flag(NETWORK_CONFIGURED)


def _cidr_conflict(options):
    """The cidr against this machine's networks and routes (host_network):
    an InvalidOption, or None. (The service-cidr is checked with etcd's
    record of it, in configure_network.) The network etcd confirmed, which
    this node runs, is not refused: a refresh must not block a working node."""
    confirmed = unitdata.kv().get(NETWORK_KEY) or {}
    if confirmed.get("Network") == str(options.cidr):
        return None
    from charms.flannel import host_network
    networks = host_network.machine_networks(host_network.read_links(),
                                             host_network.read_routes(), _pod_networks())
    return host_network.cidr_conflict(options.cidr, networks)


def _service_cidr():
    cni_endpoint = endpoint_from_name("cni")
    return cni_endpoint.service_cidr() if cni_endpoint.relations else None


def _answered():
    return unitdata.kv().get(ETCD_ANSWERED_KEY)


def _remember_answered(endpoint) -> None:
    if endpoint and _answered() != endpoint:
        unitdata.kv().set(ETCD_ANSWERED_KEY, endpoint)


def _look_at_etcd(etcd) -> None:
    """update-status's one look at etcd (etcd_probe: the standard library,
    one TLS connection): is etcd there, does it still hold the network config
    and this node's lease? etcd away: a waiting status naming it (flanneld
    runs on, on its lease). The config gone (etcd rebuilt empty): write it
    again. The lease gone: restart flanneld, which leases its subnet again
    (it never notices by itself)."""
    from charms.flannel import etcd_probe
    kv = unitdata.kv()
    confirmed = kv.get(NETWORK_KEY)
    env = read_lease(paths.SUBNET_ENV)
    lease_of = None
    if env is not None and confirmed:
        network, subnet_len, _ = daemon.network_shape(confirmed)
        if env.subnet.network.subnet_of(network) and env.subnet.network.prefixlen == subnet_len:
            lease_of = str(env.subnet.network)  # (a subnet.env of another network: re-leasing)
    files = client_files()
    try:
        view = etcd_probe.look(etcd_probe.parse_endpoints(etcd.connection_string()),
                               str(files.ca_file), str(files.cert_file), str(files.key_file),
                               lease_of=lease_of, preferred=_answered())
    except etcd_probe.EtcdUnavailable as problem:
        _problem("etcd", problem.reason)
        return
    _problem("etcd", None)
    _remember_answered(view.endpoint)
    if view.config is None:
        hookenv.log("etcd holds no flannel network config (rebuilt?): writing it again",
                    level=hookenv.WARNING)
        clear_flag(NETWORK_CONFIGURED)
    if view.lease is False:
        hookenv.log("etcd lost this node's lease of {}: restarting flanneld to lease "
                    "it again".format(lease_of), level=hookenv.WARNING)
        kv.unset(DIGEST_KEY)
        clear_flag(SERVICE_RUNNING)


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
    if options.iface:
        # Checked before anything restarts: a flanneld started on a missing,
        # down or address-less interface fails or carries nothing, and the
        # node loses its overlay.
        from charms.flannel import host_network
        unfit = host_network.iface_problem(options.iface, host_network.read_links())
        _problem("iface", str(unfit) if unfit else None)
        if unfit:
            return
    else:
        _problem("iface", None)
    etcd = endpoint_from_flag("etcd.available")
    try:
        # relation data is input: only parsed endpoints reach the unit file
        endpoints = parse_endpoints(etcd.connection_string())
    except EtcdUnavailable as problem:
        _problem("etcd", problem.reason)
        return
    files = client_files()
    record = _record()
    _install_unit_file(record, options, etcd, endpoints)
    kv = unitdata.kv()
    loaded = record.checksum(paths.SERVICE_FILE)
    if kv.get(UNIT_FILE_LOADED_KEY) != loaded:
        # Keyed on what systemd last loaded, not on this hook having written
        # the file: a hook that died in between still reloads on retry.
        # (systemd refuses a unit name here: "Too many arguments".)
        subprocess.check_call(["systemctl", "daemon-reload"])
        host.service("enable", SERVICE)
        kv.set(UNIT_FILE_LOADED_KEY, loaded)
    confirmed = kv.get(NETWORK_KEY)
    if confirmed is None:   # a flag set by someone else (an old charm's): not ours
        clear_flag(NETWORK_CONFIGURED)
        return
    digest = daemon.inputs_digest(
        (record.checksum(p) for p in (paths.FLANNELD, paths.SERVICE_FILE, files.ca_file,
                                      files.cert_file, files.key_file)),
        confirmed)
    if kv.get(DIGEST_KEY) != digest or not _flanneld_active():
        hookenv.log("flanneld inputs changed; (re)starting {}".format(SERVICE))
        host.service_stop(SERVICE)
        network, subnet_len, vni = daemon.network_shape(confirmed)
        forgotten = daemon.forget_old_network(
            network, subnet_len, paths.SUBNET_ENV,
            daemon.vxlan_link_name(vni) if vni else None)
        if forgotten:
            hookenv.log("Dropped what the previous network left: {}".format(forgotten))
        iface = options.iface or _binding_interface("cni")
        if kv.get(FLANNELD_IFACE_KEY) not in (None, iface):
            _best_effort("give the lease back for the new address",
                         lambda: _keep_subnet_for_new_address(etcd, kv.get(FLANNELD_IFACE_KEY),
                                                              iface))
        kv.set(FLANNELD_IFACE_KEY, iface)
        host.service_start(SERVICE)
        _forget_service_state()
        kv.set(DIGEST_KEY, digest)
    set_flag(SERVICE_RUNNING)


def _install_unit_file(record: InstallRecord, options, etcd, endpoints) -> None:
    """Render flannel.service when what it says changed (jinja2 only then)."""
    inputs = _unit_file_inputs(options, etcd)
    # the bytes on disk, not only the record: a unit file edited since is
    # rendered again (and systemd reloaded: its checksum is no longer loaded)
    if _unchanged(UNIT_FILE_INPUTS_KEY, inputs) and record.holds(paths.SERVICE_FILE):
        return
    from charms.flannel import render
    files = client_files()
    unit_file = render.render_service(
        _templates(), endpoints=endpoints, ca_file=files.ca_file,
        cert_file=files.cert_file, key_file=files.key_file,
        iface=options.iface or _binding_interface("cni"))
    rewritten = record.install(paths.SERVICE_FILE, unit_file.encode(), 0o644, sole=True)
    kv = unitdata.kv()
    if rewritten and kv.get(UNIT_FILE_INPUTS_KEY) == inputs:
        # the same bytes the charm wrote before, over someone's edit that
        # systemd may have loaded and flanneld run: reload, and restart
        kv.unset(UNIT_FILE_LOADED_KEY)
        kv.unset(DIGEST_KEY)
    kv.set(UNIT_FILE_INPUTS_KEY, inputs)


@when(INSTALLED, SERVICE_RUNNING, "endpoint.cni.joined")
@when_not(CNI_CONFIGURED, SERIES_UPGRADE, RECORD_DAMAGED)
def configure_cni():
    if _options() is None:
        return
    # The network etcd confirmed, which pods actually use: during a refused
    # or pending change the principal keeps it, not the option's new value.
    confirmed = unitdata.kv().get(NETWORK_KEY)
    if not confirmed:
        return
    from charms.flannel import render
    cni_endpoint = endpoint_from_name("cni")
    name = adoption.cni_network_name(paths.CNI_CONFLIST, unitdata.kv().get(NETWORK_NAME_KEY))
    conflist = render.render_conflist(_templates(), network_name=name)
    _record().install(paths.CNI_CONFLIST, conflist.encode(), 0o644, sole=True)
    cni_endpoint.set_config(cidr=confirmed["Network"], cni_conf_file=paths.CNI_CONFLIST.name)
    unitdata.kv().set(CNI_INPUTS_KEY, _cni_inputs(confirmed, cni_endpoint))
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
    if is_flag_set(SERIES_UPGRADE):
        # pre-series-upgrade masked it: the mask link is the charm's too
        host.service("unmask", SERVICE)
    if paths.SERVICE_FILE.exists():
        host.service_stop(SERVICE)
        host.service("disable", SERVICE)
    # What flannel served here, read before its files and state go.
    served = _served_network()
    # Each step may fail (etcd gone, a device deleted meanwhile): the files
    # still go, or a forced removal would leave them all behind.
    _best_effort("release the lease", _release_lease)
    _best_effort("delete flanneld's vxlan devices", daemon.delete_vxlan_links)
    # flanneld cleans its iptables rules when it starts, not when it exits
    _best_effort("remove flanneld's iptables rules", _remove_iptables_rules)
    _best_effort("remove flanneld's routes", lambda: _remove_routes(served))
    _best_effort("remove the nrpe check", _remove_nrpe_check)
    damaged = unitdata.kv().get(PROBLEM_KEY + "record")  # watch_inputs, this hook
    left = []
    if damaged:
        # Without a record nothing proves which files flannel wrote (an older
        # worker ships its own /opt/cni/bin/flannel): delete none of them.
        left = [str(p) for p in paths.WRITTEN_FILES if os.path.lexists(str(p))]
        if left:
            hookenv.log("{}: removed no file, since flannel cannot prove it wrote them; "
                        "left {}".format(damaged, ", ".join(left)), level=hookenv.WARNING)
    else:
        report = _record().remove_all(keep_directories=paths.RUNTIME_DIRECTORIES)
        for path in report.left_changed:
            hookenv.log("Left {}: it changed since flannel installed it".format(path),
                        level=hookenv.WARNING)
        for path in report.changed_removed:
            hookenv.log("Removed {}, changed since flannel wrote it: only flannel "
                        "writes it".format(path), level=hookenv.WARNING)
    # flanneld's lease file would make a later plugin hand out stale addresses.
    if paths.SUBNET_ENV.exists():
        paths.SUBNET_ENV.unlink()
    # Last, with no conflist left to make a new pod bring it back.
    _best_effort("remove the idle pod bridge", lambda: _remove_idle_bridge(served))
    # systemd forgets the unit whose file went (and that it failed, if it had)
    _best_effort("reload systemd", lambda: subprocess.run(
        ["systemctl", "daemon-reload"], check=True, capture_output=True))
    _best_effort("forget flannel.service's failure", lambda: subprocess.run(
        ["systemctl", "reset-failed", SERVICE], check=False, capture_output=True))
    for flag in OWN_FLAGS:
        clear_flag(flag)
    kv = unitdata.kv()
    kv.unsetrange(prefix=PROBLEM_KEY)
    for key in (DIGEST_KEY, NETWORK_KEY, NETWORK_INPUTS_KEY, UNIT_FILE_INPUTS_KEY,
                CNI_INPUTS_KEY, NRPE_INPUTS_KEY, UNIT_FILE_LOADED_KEY, ETCD_ENDPOINTS_KEY,
                BINDING_KEY, STATUS_KEY, CONFIG_KEY, NETWORK_NAME_KEY, ETCD_ANSWERED_KEY,
                FLANNELD_IFACE_KEY):
        kv.unset(key)
    set_flag(STOPPED)
    if left:
        hookenv.status_set("blocked", "Flannel stopped; {}: left {}".format(
            damaged, ", ".join(left)))
    else:
        hookenv.status_set("maintenance", "Flannel removed.")


def _best_effort(what: str, step) -> None:
    try:
        step()
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        hookenv.log("Could not {}: {}".format(what, error), level=hookenv.WARNING)


def _pod_networks() -> list:
    """The pod networks flanneld served here: the one etcd confirmed, and
    the one its subnet.env names (they differ mid-change)."""
    return [network for network, _ in _served_network().networks]


def _served_network() -> "leftovers.ServedNetwork":
    """What flannel served on this node (etcd's confirmed network, subnet.env,
    the CNI network name), for the teardown's steps."""
    import ipaddress
    networks = {}
    confirmed = unitdata.kv().get(NETWORK_KEY) or {}
    if confirmed.get("Network"):
        network, subnet_len, _ = daemon.network_shape(confirmed)
        networks[network] = subnet_len
    env = read_lease(paths.SUBNET_ENV)
    if env is not None:
        networks.setdefault(ipaddress.ip_network(env.network), env.subnet.network.prefixlen)
    name = adoption.cni_network_name(paths.CNI_CONFLIST, unitdata.kv().get(NETWORK_NAME_KEY))
    return leftovers.ServedNetwork(networks=tuple(sorted(networks.items(), key=str)),
                                   cni_network_name=name)


def _remove_iptables_rules() -> None:
    for line in leftovers.remove_iptables_rules():
        hookenv.log("Removed flanneld's iptables rule: {}".format(line))


def _remove_routes(served) -> None:
    for line in leftovers.remove_pod_network_routes(served.networks):
        hookenv.log("Removed flanneld's route {}".format(line))


def _remove_idle_bridge(served) -> None:
    for line in leftovers.remove_idle_bridge(served):
        hookenv.log("Removed {}: no pod is left on it".format(line))


def _keep_subnet_for_new_address(etcd, old_iface: str, new_iface: str) -> None:
    """flanneld keys its lease by its public IP: started on another
    interface (an `iface` change, a binding that moved) it finds no lease of
    its own and leases a new subnet, and cni0's gateway of the old one makes
    the bridge plugin refuse every new pod. With the old lease given back
    (flanneld is stopped here), flanneld takes the subnet its subnet.env
    names again ("Found previously leased subnet"): pods keep their
    addresses and new ones start at once."""
    from charms.flannel.network import EtcdUnavailable, NetworkStore
    env = read_lease(paths.SUBNET_ENV)
    if env is None:
        return
    subnet = str(env.subnet.network)
    from charms.flannel import host_network
    mine = {str(a.ip) for link in host_network.read_links() for a in link.addresses}
    try:
        with NetworkStore(_etcd_settings(etcd, timeout=3.0), preferred=_answered()) as store:
            held = [lease for lease in store.leases() if lease.get("Subnet") == subnet]
            if not held or held[0].get("PublicIP") not in mine:
                # expired and leased by another node since: not ours to give back
                return
            if store.release_lease(subnet):
                hookenv.log("flanneld moves from {} to {}: gave the lease of {} back so that "
                            "it leases the same subnet under its new address".format(
                                old_iface or "the default route's interface",
                                new_iface or "the default route's interface", subnet))
    except EtcdUnavailable as error:
        hookenv.log("Could not give the lease of {} back: {}".format(subnet, error.reason),
                    level=hookenv.WARNING)


def _release_lease() -> None:
    """While a backend change waits for every node to leave, give this node's
    lease back to etcd: flanneld does not on stop, and a lease lives 24 h,
    during which the change stays refused. Without such a change the lease
    is kept, so that a unit added back gets the same subnet and the pods
    here keep their addresses. Best effort: etcd may be gone already."""
    from charms.flannel.network import EtcdUnavailable, NetworkStore, backend_change_pending
    options, confirmed = _options(), unitdata.kv().get(NETWORK_KEY)
    if options is None or not backend_change_pending(network_config(options), confirmed):
        return
    env = read_lease(paths.SUBNET_ENV)
    endpoints = unitdata.kv().get(ETCD_ENDPOINTS_KEY)
    if env is None or not endpoints or not client_files().key_file.exists():
        return
    subnet = str(env.subnet.network)
    try:
        with NetworkStore(_etcd_settings(None, endpoints, timeout=3.0),
                          preferred=_answered()) as store:
            if store.release_lease(subnet):
                hookenv.log("Released the lease of {} in etcd".format(subnet))
    except EtcdUnavailable as error:
        hookenv.log("Could not release the lease of {}: {}".format(subnet, error.reason),
                    level=hookenv.WARNING)
        return
    # The next lease differs: its gateway could not join a bridge holding this one.
    daemon.delete_bridge_address(str(env.subnet))


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
    unitdata.kv().set(NRPE_INPUTS_KEY, inputs)
    set_flag(NRPE_CONFIGURED)


@when(NRPE_CONFIGURED)
@when_not("nrpe-external-master.available")
def remove_nrpe_check():
    _remove_nrpe_check()
    unitdata.kv().unset(NRPE_INPUTS_KEY)
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
    kv = unitdata.kv()
    if _idle_hook() and kv.get(BINDING_KEY) is not None:
        _binding = kv.get(BINDING_KEY)
        return _binding
    try:
        bindings = hookenv.network_get(endpoint).get("bind-addresses") or []
    except Exception as error:  # an old Juju or no binding: the default route's
        hookenv.log("No network binding for {}: {}".format(endpoint, error))
        bindings = []
    iface = daemon.binding_interface(bindings, daemon.default_route_interface)
    kv.set(BINDING_KEY, iface)
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
    return _digest(etcd.connection_string(), options.iface or _binding_interface("cni"),
                   _file_digest(_templates() / "flannel.service"))


def _cni_inputs(confirmed: dict, cni_endpoint) -> str:
    return _digest(confirmed["Network"], [r.relation_id for r in cni_endpoint.relations],
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
    etcd = endpoint_from_flag("etcd.available")
    if etcd is not None and is_flag_set("etcd.tls.available") and is_flag_set(
            NETWORK_CONFIGURED) and not _unchanged(NETWORK_INPUTS_KEY,
                                                   _network_inputs(options, etcd)):
        clear_flag(NETWORK_CONFIGURED)
    if etcd is not None and _idle_hook() and is_flag_set("etcd.tls.available") and is_flag_set(
            NETWORK_CONFIGURED):
        _look_at_etcd(etcd)
    if etcd is not None and is_flag_set(SERVICE_RUNNING) and (
            not _unchanged(UNIT_FILE_INPUTS_KEY, _unit_file_inputs(options, etcd))
            or not _record().holds(paths.SERVICE_FILE) or not _flanneld_active()):
        clear_flag(SERVICE_RUNNING)
    confirmed = unitdata.kv().get(NETWORK_KEY)
    if is_flag_set(CNI_CONFIGURED) and (
            not confirmed or not _record().holds(paths.CNI_CONFLIST)
            or not _unchanged(CNI_INPUTS_KEY, _cni_inputs(confirmed, endpoint_from_name("cni")))):
        clear_flag(CNI_CONFIGURED)
    nagios = endpoint_from_flag("nrpe-external-master.available")
    if nagios is not None and is_flag_set(NRPE_CONFIGURED) and not _unchanged(
            NRPE_INPUTS_KEY, _nrpe_inputs(nagios)):
        clear_flag(NRPE_CONFIGURED)


hookenv.atstart(watch_inputs)


def assess_status():
    if is_flag_set(STOPPED):
        return
    kv = unitdata.kv()
    try:
        parse_options(_config())
        config_problem = (kv.get(PROBLEM_KEY + "cidr") or kv.get(PROBLEM_KEY + "network")
                          or kv.get(PROBLEM_KEY + "iface"))
    except InvalidOption as invalid:
        config_problem = str(invalid)
    confirmed = kv.get(NETWORK_KEY)
    running = is_flag_set(SERVICE_RUNNING)
    status = assess(Observations(
        record_problem=kv.get(PROBLEM_KEY + "record"),
        series_upgrade=is_flag_set(SERIES_UPGRADE),
        resource_problem=kv.get(PROBLEM_KEY + "resource"),
        installed=is_flag_set(INSTALLED),
        config_problem=config_problem,
        # related = the relation exists: before etcd's unit joins (a new unit's
        # hooks up to start) the unit waits for it; blocked only without one
        etcd_related=(is_flag_set("etcd.connected") or is_flag_set("etcd.available")
                      or bool(endpoint_from_name("etcd").relations)),
        etcd_tls_ready=is_flag_set("etcd.available") and is_flag_set("etcd.tls.available"),
        etcd_problem=kv.get(PROBLEM_KEY + "etcd"),
        network_configured=is_flag_set(NETWORK_CONFIGURED),
        service_active=running and _flanneld_active(),
        service_started=running,
        # flanneld's word on its lease (subnet.env), checked against the
        # network etcd confirmed: no etcd round trip in an idle hook.
        cidr=daemon.network_shape(confirmed)[0] if confirmed else None,
        subnet=read_lease(paths.SUBNET_ENV),
        cni_problem=cni.chain_problem() if is_flag_set(CNI_CONFIGURED) else None,
    ))
    # update-status skips a status-set that would change nothing; any other
    # hook sets it (the bootstrap, or Juju before install, may have set
    # another since the charm last did).
    current = [status.state, status.message]
    if not (_idle_hook() and kv.get(STATUS_KEY) == current
            and not os.environ.get(BOOTSTRAP_INSTALLED_ENV)):
        hookenv.status_set(status.state, status.message)
    if kv.get(STATUS_KEY) != current:
        kv.set(STATUS_KEY, current)


hookenv.atexit(assess_status)
