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
"""
import subprocess
from pathlib import Path

from charmhelpers.contrib.charmsupport import nrpe
from charmhelpers.core import hookenv, host, unitdata
from charms.reactive import (clear_flag, endpoint_from_flag, endpoint_from_name,
                             hook, is_flag_set, set_flag, when, when_not)

from charms.flannel import daemon, paths, render, resource
from charms.flannel.credentials import client_files, write_client_credentials
from charms.flannel.install_record import InstallRecord
from charms.flannel.network import (EtcdClientSettings, EtcdUnavailable, NetworkStore,
                                    ensure_network_config, network_config)
from charms.flannel.options import InvalidOption, parse_options
from charms.flannel.status import Observations, assess
from charms.flannel.subnet import read_subnet_env

SERVICE = paths.SERVICE_NAME
INSTALLED = "flannel.installed"
NETWORK_CONFIGURED = "flannel.network.configured"
SERVICE_RUNNING = "flannel.service.running"
CNI_CONFIGURED = "flannel.cni.configured"
SERIES_UPGRADE = "flannel.series-upgrade"
STOPPED = "flannel.stopped"
NRPE_CONFIGURED = "flannel.nrpe.configured"
OWN_FLAGS = (INSTALLED, NETWORK_CONFIGURED, SERVICE_RUNNING, CNI_CONFIGURED,
             SERIES_UPGRADE, NRPE_CONFIGURED)

# Problems found by one handler, shown by the status assessment at hook end.
# Kept in unitdata so a hook that skips a handler still reports its problem.
PROBLEM_KEY = "flannel.problem."
DIGEST_KEY = "flannel.service-inputs"
# The network config etcd was last confirmed to hold: flanneld's inputs are
# what etcd says, not what the options say before etcd has taken them.
NETWORK_KEY = "flannel.network-config"


def _record() -> InstallRecord:
    return InstallRecord(paths.install_record_dir(hookenv.charm_dir()))


def _problem(area: str, message=None) -> None:
    unitdata.kv().set(PROBLEM_KEY + area, message)


def _options():
    """The validated options, or None (assess_status shows why)."""
    try:
        return parse_options(hookenv.config())
    except InvalidOption:
        return None


def _etcd_settings(etcd) -> EtcdClientSettings:
    files = client_files()
    return EtcdClientSettings.from_connection_string(
        etcd.connection_string(), str(files.ca_file), str(files.cert_file), str(files.key_file))


@hook("install")
def fresh_install():
    clear_flag(STOPPED)


@when_not(INSTALLED, SERIES_UPGRADE, STOPPED)
def install_flannel():
    try:
        name = resource.resource_name()
        files = resource.read_resource(hookenv.resource_get(name) or None, name)
    except resource.ResourceProblem as problem:
        _problem("resource", str(problem))
        return
    record = _record()
    record.install(paths.FLANNELD, files["flanneld"], 0o755)
    record.install(paths.CNI_PLUGIN, files["cni-plugin/flannel"], 0o755)
    _problem("resource", None)
    version = daemon.flanneld_version(paths.FLANNELD)
    if version:
        hookenv.application_version_set(version)
    set_flag(INSTALLED)


@hook("upgrade-charm")
def reinstall_on_upgrade():
    # The resource may be new: install again through the same record; the
    # service restarts only if flanneld's inputs changed.
    clear_flag(INSTALLED)


@when(INSTALLED, "etcd.available", "etcd.tls.available")
@when_not(SERIES_UPGRADE)
def configure_network():
    options = _options()
    if options is None:
        return  # blocked; etcd and the running flanneld are left as they were
    etcd = endpoint_from_flag("etcd.available")
    # A change here reaches flanneld through run_flanneld's input digest.
    write_client_credentials(_record(), *etcd.client_credentials())
    try:
        with NetworkStore(_etcd_settings(etcd)) as store:
            ensure_network_config(store, options)
    except (InvalidOption, EtcdUnavailable) as problem:
        # A backend change on a running network, or etcd away: flanneld keeps
        # running as it is until etcd holds what the options ask for.
        _problem("network", str(problem) if isinstance(problem, InvalidOption) else None)
        _problem("etcd", problem.reason if isinstance(problem, EtcdUnavailable) else None)
        clear_flag(NETWORK_CONFIGURED)
        return
    _problem("network", None)
    _problem("etcd", None)
    kv = unitdata.kv()
    confirmed = network_config(options)
    if kv.get(NETWORK_KEY) != confirmed:
        kv.set(NETWORK_KEY, confirmed)
        clear_flag(NETWORK_CONFIGURED)  # a change run_flanneld sees, whatever the order
    set_flag(NETWORK_CONFIGURED)


@when(NETWORK_CONFIGURED)
@when_not("etcd.available")
def forget_network():
    # Without etcd the config can't be checked; re-adding the relation (maybe
    # to another etcd) must write it again.
    clear_flag(NETWORK_CONFIGURED)


@when(INSTALLED, NETWORK_CONFIGURED, "etcd.available")
@when_not(SERIES_UPGRADE)
def run_flanneld():
    options = _options()
    if options is None:
        return
    etcd = endpoint_from_flag("etcd.available")
    files = client_files()
    record = _record()
    unit_file = render.render_service(
        Path(hookenv.charm_dir()) / "templates",
        endpoints=etcd.connection_string(),
        ca_file=files.ca_file, cert_file=files.cert_file, key_file=files.key_file,
        iface=options.iface or _binding_interface("cni"))
    if record.install(paths.SERVICE_FILE, unit_file.encode(), 0o644):
        # systemd refuses a unit name here ("Too many arguments").
        subprocess.check_call(["systemctl", "daemon-reload"])
        host.service("enable", SERVICE)
    kv = unitdata.kv()
    confirmed = kv.get(NETWORK_KEY)
    digest = daemon.inputs_digest(
        (record.checksum(p) for p in (paths.FLANNELD, paths.SERVICE_FILE, files.ca_file,
                                      files.cert_file, files.key_file)),
        confirmed)
    if kv.get(DIGEST_KEY) != digest or not host.service_running(SERVICE):
        hookenv.log("flanneld inputs changed; (re)starting {}".format(SERVICE))
        host.service_stop(SERVICE)
        network, subnet_len, vni = daemon.network_shape(confirmed)
        forgotten = daemon.forget_old_network(
            network, subnet_len, paths.SUBNET_ENV,
            daemon.vxlan_link_name(vni) if vni else None)
        if forgotten:
            hookenv.log("Dropped what the previous network left: {}".format(forgotten))
        host.service_start(SERVICE)
        kv.set(DIGEST_KEY, digest)
    set_flag(SERVICE_RUNNING)


@when(INSTALLED, SERVICE_RUNNING, "endpoint.cni.joined")
@when_not(SERIES_UPGRADE)
def configure_cni():
    options = _options()
    if options is None:
        return
    conflist = render.render_conflist(Path(hookenv.charm_dir()) / "templates")
    _record().install(paths.CNI_CONFLIST, conflist.encode(), 0o644)
    endpoint_from_name("cni").set_config(cidr=str(options.cidr),
                                         cni_conf_file=paths.CNI_CONFLIST.name)
    set_flag(CNI_CONFIGURED)


@hook("stop")
def remove_flannel():
    """Undo exactly what this charm did, and nothing else (LP #1866869)."""
    if paths.SERVICE_FILE.exists():
        host.service_stop(SERVICE)
        host.service("disable", SERVICE)
    daemon.delete_vxlan_links()
    _remove_nrpe_check()
    report = _record().remove_all(keep_directories=paths.RUNTIME_DIRECTORIES)
    for path in report.left_changed:
        hookenv.log("Left {}: it changed since flannel installed it".format(path),
                    level=hookenv.WARNING)
    # flanneld's lease file would make a later plugin hand out stale addresses.
    if paths.SUBNET_ENV.exists():
        paths.SUBNET_ENV.unlink()
    for flag in OWN_FLAGS:
        clear_flag(flag)
    kv = unitdata.kv()
    kv.unsetrange(prefix=PROBLEM_KEY)
    kv.unset(DIGEST_KEY)
    kv.unset(NETWORK_KEY)
    set_flag(STOPPED)
    hookenv.status_set("maintenance", "Flannel removed.")


@hook("pre-series-upgrade")
def pause_for_series_upgrade():
    host.service_pause(SERVICE)
    set_flag(SERIES_UPGRADE)


@hook("post-series-upgrade")
def resume_after_series_upgrade():
    host.service_resume(SERVICE)
    clear_flag(SERIES_UPGRADE)


@when("nrpe-external-master.available", INSTALLED)
def update_nrpe_check():
    check = nrpe.NRPE(hostname=nrpe.get_nagios_hostname(), primary=False)
    check.add_check(shortname=SERVICE, description="flanneld is running",
                    check_cmd="check_procs -c 1: -C flanneld")
    check.write()
    set_flag(NRPE_CONFIGURED)


@when(NRPE_CONFIGURED)
@when_not("nrpe-external-master.available")
def remove_nrpe_check():
    _remove_nrpe_check()
    clear_flag(NRPE_CONFIGURED)


def _remove_nrpe_check():
    if is_flag_set(NRPE_CONFIGURED):
        check = nrpe.NRPE(hostname=nrpe.get_nagios_hostname(), primary=False)
        check.remove_check(shortname=SERVICE)
        check.write()


def _binding_interface(endpoint: str) -> str:
    """The interface of the endpoint's network binding ('' if Juju has none)."""
    try:
        bindings = hookenv.network_get(endpoint).get("bind-addresses") or []
    except Exception as error:  # an old Juju or no binding: flanneld picks one
        hookenv.log("No network binding for {}: {}".format(endpoint, error))
        return ""
    return bindings[0].get("interface-name", "") if bindings else ""


def assess_status():
    if is_flag_set(STOPPED):
        return
    kv = unitdata.kv()
    options = None
    try:
        options = parse_options(hookenv.config())
        config_problem = kv.get(PROBLEM_KEY + "network")
    except InvalidOption as invalid:
        config_problem = str(invalid)
    status = assess(Observations(
        series_upgrade=is_flag_set(SERIES_UPGRADE),
        resource_problem=kv.get(PROBLEM_KEY + "resource"),
        installed=is_flag_set(INSTALLED),
        config_problem=config_problem,
        etcd_related=is_flag_set("etcd.connected") or is_flag_set("etcd.available"),
        etcd_tls_ready=is_flag_set("etcd.available") and is_flag_set("etcd.tls.available"),
        etcd_problem=kv.get(PROBLEM_KEY + "etcd"),
        network_configured=is_flag_set(NETWORK_CONFIGURED),
        service_active=is_flag_set(SERVICE_RUNNING) and host.service_running(SERVICE),
        cidr=options.cidr if options else None,
        subnet=read_subnet_env(paths.SUBNET_ENV),
    ))
    hookenv.status_set(status.state, status.message)


hookenv.atexit(assess_status)
