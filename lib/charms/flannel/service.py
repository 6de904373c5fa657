"""flannel.service: its unit file loaded by systemd, and flanneld (re)started
when what it reads changed, and only then.

    load_unit_file(record, state, systemd)
    restart_if_changed(record, state, systemd, confirmed=..., iface=..., ...)
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Callable, Optional

from . import daemon, leftovers, paths
from .credentials import ClientFiles
from .install_record import InstallRecord
from .systemd import Systemd
from .unit_state import UnitState

SERVICE = paths.SERVICE_NAME
Log = Callable[[str], None]


def load_unit_file(record: InstallRecord, state: UnitState, systemd: Systemd) -> bool:
    """daemon-reload and enable, if systemd has not loaded the unit file on
    disk yet; True if it did now. Keyed on what systemd last loaded, not on
    this hook having written the file: a hook that died in between reloads
    on retry. Raises CalledProcessError if the reload failed."""
    loaded = record.checksum(paths.SERVICE_FILE)
    if state.unit_file_loaded == loaded:
        return False
    systemd.daemon_reload()
    systemd.do("enable", SERVICE)
    state.unit_file_loaded = loaded
    return True


def flanneld_inputs(record: InstallRecord, files: ClientFiles, confirmed: dict) -> str:
    """One digest of everything flanneld reads at start: its binary, its unit
    file, the etcd client files and the network etcd confirmed."""
    return daemon.inputs_digest(
        (record.checksum(p) for p in (paths.FLANNELD, paths.SERVICE_FILE, files.ca_file,
                                      files.cert_file, files.key_file)),
        confirmed)


def restart_if_changed(record: InstallRecord, state: UnitState, systemd: Systemd, *,
                       confirmed: dict, iface: str, files: ClientFiles,
                       active: Callable[[], bool],
                       underlay_mtu: Optional[int] = None,
                       moved: Callable[[Optional[str], str], None] = lambda old, new: None,
                       drop_v011_rules: bool = False,
                       network_name: Callable[[], str] = lambda: "",
                       log: Log = lambda message: None,
                       subnet_env: Path = paths.SUBNET_ENV) -> bool:
    """(Re)start flanneld if its inputs changed since it last started, or it
    is not `active()` (asked only when they did not); True if it did. While
    it is stopped: what the previous network left goes
    (daemon.forget_old_network; `underlay_mtu`, the MTU of the interface
    flanneld sends on, tells which vxlan device MTU the config means when
    it names none), and if flanneld moves to another interface
    (a new public IP) `moved(old, new)` runs, to give its lease back so that
    it takes the same subnet again; `network_name()` is flannel's CNI
    network name (whose an address on the pods' bridge is). With drop_v011_rules (a node refreshed
    from a flanneld of etcd v2's era) flannel v0.11's iptables rules for
    the pod network go too."""
    digest = flanneld_inputs(record, files, confirmed)
    if state.flanneld_inputs == digest and active():
        return False
    log("flanneld inputs changed; (re)starting {}".format(SERVICE))
    systemd.do("stop", SERVICE)
    served = [network for network, _ in leftovers.pod_networks(confirmed, subnet_env)]
    network, subnet_len, vni = daemon.network_shape(confirmed)
    ipv6 = daemon.ipv6_shape(confirmed)
    forgotten = daemon.forget_old_network(
        network, subnet_len, subnet_env, daemon.vxlan_link_name(vni) if vni else None,
        network_name=network_name, pod_mtu=daemon.pod_mtu(confirmed, underlay_mtu), ipv6=ipv6,
        underlay_mtu=underlay_mtu)
    if forgotten:
        log("Dropped what the previous network left: {}".format(forgotten))
    if forgotten.old_lease is not None:
        try:   # flanneld starts below whatever this finds: it writes its own rules
            for line in leftovers.forget_old_rules(forgotten.old_lease, network, subnet_len,
                                                   ipv6):
                log("Dropped the previous network's {}".format(line))
        except (OSError, subprocess.SubprocessError) as error:
            log("Could not drop the previous network's iptables rules or routes: "
                "{}".format(error))
    try:   # a refreshed node's: flanneld v0.27 never removes them
        for line in leftovers.remove_v011_rules(served) if drop_v011_rules else []:
            log("Dropped flannel v0.11's iptables rule {}".format(line))
    except (OSError, subprocess.SubprocessError) as error:
        log("Could not drop flannel v0.11's iptables rules: {}".format(error))
    if state.flanneld_iface not in (None, iface):
        moved(state.flanneld_iface, iface)
    state.flanneld_iface = iface
    systemd.do("start", SERVICE)
    state.flanneld_inputs = digest
    state.flanneld_started = int(time.time())
    return True
