"""Removing flannel from a node: undo exactly what this charm and its
flanneld did, and nothing else (LP #1866869).

    tear_down(record, systemd, ...) -> files left (only without a record)

Each step after the service's stop may fail (etcd gone, a device deleted
meanwhile) without stopping the others: the files still go, or a forced
removal would leave them all behind.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable, Optional

from . import daemon, leftovers, paths, pod_bridge
from .credentials import ClientFiles
from .install_record import InstallRecord
from .options import backend_change_pending
from .subnet import read_lease
from .systemd import Systemd

SERVICE = paths.SERVICE_NAME
# (message, warning)
Log = Callable[[str, bool], None]


def best_effort(what: str, step: Callable[[], object], log: Log) -> None:
    try:
        step()
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        log("Could not {}: {}".format(what, error), True)


def tear_down(record: Optional[InstallRecord], systemd: Systemd, *,
              served: leftovers.ServedNetwork,
              record_problem: Optional[str], masked: bool, v011_rules: bool = False,
              release_lease: Callable[[], None], remove_nrpe_check: Callable[[], None],
              log: Log) -> list[str]:
    """Stop flannel and take away what it made: the service, its lease (when
    a backend change waits for it), vxlan devices, iptables rules, routes,
    the nrpe check, every file in the install record, subnet.env and, last,
    an idle pod bridge; systemd forgets the unit. `served` is read before
    anything goes. With a `record_problem` (and no `record`: it cannot be
    read) no file is removed, since nothing proves which are flannel's:
    returns those left. With v011_rules (a node refreshed from flannel
    v0.11 whose flanneld never restarted since) its iptables rules go too."""
    if masked:
        systemd.do("unmask", SERVICE)   # pre-series-upgrade masked it: the mask link is ours too
    if paths.SERVICE_FILE.exists():
        systemd.do("stop", SERVICE)
        systemd.do("disable", SERVICE)
    best_effort("release the lease", release_lease, log)
    best_effort("delete flanneld's vxlan devices", daemon.delete_vxlan_links, log)
    # flanneld cleans its iptables rules when it starts, not when it exits
    best_effort("remove flanneld's iptables rules", lambda: [
        log("Removed flanneld's iptables rule: {}".format(line), False)
        for line in leftovers.remove_iptables_rules(
            networks=[network for network, _ in served.networks] if v011_rules else ())], log)
    best_effort("remove flanneld's routes", lambda: [
        log("Removed flanneld's route {}".format(line), False)
        for line in leftovers.remove_pod_network_routes(served.networks)], log)
    best_effort("remove the nrpe check", remove_nrpe_check, log)
    left = []
    if record_problem or record is None:
        # Without a record nothing proves which files flannel wrote (an older
        # worker ships its own /opt/cni/bin/flannel): delete none of them.
        left = [str(p) for p in paths.WRITTEN_FILES if os.path.lexists(str(p))]
        if left:
            log("{}: removed no file, since flannel cannot prove it wrote them; left {}".format(
                record_problem or "no install record", ", ".join(left)), True)
    else:
        report = record.remove_all(keep_directories=paths.RUNTIME_DIRECTORIES)
        for path in report.left_changed:
            log("Left {}: it changed since flannel installed it".format(path), True)
        for path in report.changed_removed:
            log("Removed {}, changed since flannel wrote it: only flannel writes it".format(
                path), True)
    # flanneld's lease file would make a later plugin hand out stale addresses.
    if paths.SUBNET_ENV.exists():
        paths.SUBNET_ENV.unlink()
    # Last, with no conflist left to make a new pod bring it back.
    best_effort("remove the idle pod bridge", lambda: [
        log("Removed {}: no pod is left on it".format(line), False)
        for line in leftovers.remove_idle_bridge(served)], log)
    # systemd forgets the unit whose file went (and that it failed, if it had)
    best_effort("reload systemd", systemd.daemon_reload, log)
    # ("not loaded" when it never failed: nothing to say)
    best_effort("forget flannel.service's failure",
                lambda: systemd.do("reset-failed", SERVICE, quiet=True), log)
    return left


def release_lease_for_backend_change(*, wanted: Optional[dict], confirmed: Optional[dict],
                                     endpoints: Optional[str], files: ClientFiles,
                                     preferred: Optional[str], log: Log,
                                     subnet_env: Path = paths.SUBNET_ENV,
                                     prefix: Optional[str] = None) -> Optional[str]:
    """While a backend change waits for every node to leave, give this node's
    lease back: flanneld does not on stop, and a lease lives 24 h, during
    which the change stays refused. Without such a change the lease is kept,
    so that a unit added back gets the same subnet and the pods here keep
    their addresses. Returns the subnet given back. Best effort: etcd may be
    gone already (logged)."""
    if wanted is None or not backend_change_pending(wanted, confirmed):
        return None   # (and etcd3gw, 0.15 s of imports, stays unloaded)
    from .network import (DEFAULT_PREFIX, EtcdClientSettings, EtcdUnavailable, NetworkStore,
                          give_lease_back)
    env = read_lease(subnet_env)
    if env is None or not endpoints or not files.key_file.exists():
        return None
    subnet = str(env.subnet.network)
    try:
        settings = EtcdClientSettings.from_client_files(endpoints, files, timeout=3.0)
        with NetworkStore(settings, prefix or DEFAULT_PREFIX, preferred=preferred) as store:
            released = give_lease_back(store, subnet)
    except EtcdUnavailable as error:
        log("Could not release the lease of {}: {}".format(subnet, error.reason), True)
        return None
    if released:
        log("Released the lease of {} in etcd".format(subnet), False)
    # The next lease differs (whoever gave this one back): its gateway could
    # not join a bridge holding this one.
    for gateway in env.gateways:
        pod_bridge.delete_address(gateway)
    return subnet if released else None
