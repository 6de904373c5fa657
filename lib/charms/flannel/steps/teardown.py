"""Removing flannel from a node: undo exactly what this charm and its
flanneld did, and nothing else (LP #1866869).

The sequence: flannel.service stopped (unmasked first after a series
upgrade's pause), the lease given back while a backend change waits for
every node to leave, flanneld's vxlan devices, iptables rules, nft tables
and routes, the Nagios check, every file in the install record (each one
that stood there before put back), subnet.env and, last, an idle pod
bridge; systemd forgets the unit. Each step after the service's stop may fail (etcd gone, a
device deleted meanwhile) without stopping the others: the files still go,
or a forced removal would leave them all behind. With a damaged record no
file is removed, since nothing proves which are flannel's.
"""
from __future__ import annotations

import os
import subprocess
from typing import Callable

from ..adapters import iptables, links, nftables, pod_bridge, vxlan
from ..facts.etcd_keys import EtcdUnavailable
from ..facts.kube_nodes import KubeUnavailable
from ..facts.paths import SERVICE_NAME
from ..facts.status import BLOCKED, MAINTENANCE, Problem, Status
from . import bridge, subnets
from .context import HookContext
from .flags import OWN, STOPPED
from .outcome import Outcome

REMOVED = "Flannel removed."


def run(ctx: HookContext, *, masked: bool, remove_nrpe_check: Callable[[], None]) -> Outcome:
    out = Outcome()
    state = ctx.state
    # what flannel served here, read before its files and state go
    networks = ctx.served_networks()
    name = ctx.cni_network_name()
    damaged = state.problem(Problem.RECORD)
    systemd = ctx.systemd
    if masked:
        systemd.do("unmask", SERVICE_NAME)   # pre-series-upgrade masked it: the mask is ours too
    if ctx.paths.service_file.exists():
        systemd.do("stop", SERVICE_NAME)
        systemd.do("disable", SERVICE_NAME)

    def best_effort(what: str, step: Callable[[], object]) -> None:
        try:
            step()
        except (OSError, subprocess.SubprocessError, ValueError, EtcdUnavailable,
                KubeUnavailable) as error:
            out.say(f"Could not {what}: {error}", True)

    def log_each(prefix: str, lines) -> None:
        for line in lines:
            out.say(f"{prefix}{line}")

    mode, changing = subnets.running(ctx), backend_change_waits(ctx)
    if mode is not None:
        # the lease kept for a unit added back (its pods keep their addresses),
        # but while a backend change waits for every node to leave
        best_effort(f"leave subnet-manager={mode.name}",
                    lambda: mode.leave(out, keep_lease=not changing))
    if changing:
        # the next lease differs (whoever gave this one back): its gateway could
        # not join a bridge holding this one
        best_effort("take the lease's gateway off cni0", lambda: bridge.give_up_lease(ctx))
    best_effort("delete flanneld's vxlan devices",
                lambda: vxlan.delete_vxlan_links(ctx.machine))
    # flanneld cleans its iptables rules when it starts, not when it exits
    best_effort("remove flanneld's iptables rules", lambda: log_each(
        "Removed flanneld's iptables rule: ", iptables.remove_iptables_rules(
            ctx.machine, networks=[n for n, _ in networks] if state.v011_rules else ())))
    best_effort("remove flanneld's nft tables", lambda: log_each(
        "Removed flanneld's ", nftables.remove_nft_tables(ctx.machine)))
    best_effort("remove flanneld's routes", lambda: log_each(
        "Removed flanneld's route ", links.remove_pod_network_routes(ctx.machine, networks)))
    best_effort("remove the nrpe check", remove_nrpe_check)
    left = []
    if damaged:
        # Without a record nothing proves which files flannel wrote (a worker
        # of 2020 ships its own /opt/cni/bin/flannel): delete none of them.
        left = [str(p) for p in ctx.paths.written_files if os.path.lexists(str(p))]
        if left:
            out.say("{}: removed no file, since flannel cannot prove it wrote them; left "
                    "{}".format(damaged, ", ".join(left)), True)
    else:
        report = ctx.record.remove_all(keep_directories=ctx.paths.runtime_directories)
        for path in report.left_changed:
            out.say(f"Left {path}: it changed since flannel installed it", True)
        for path in report.changed_removed:
            out.say(f"Removed {path}, changed since flannel wrote it: only flannel writes it",
                    True)
    # flanneld's lease file would make a later plugin hand out stale addresses
    if ctx.paths.subnet_env.exists():
        ctx.paths.subnet_env.unlink()
    # last, with no conflist left to make a new pod bring it back
    best_effort("remove the idle pod bridge", lambda: log_each(
        "Removed (no pod is left on it): ", pod_bridge.remove_idle(
            ctx.machine, [n for n, _ in networks], name, ctx.paths.host_local_tables)))
    # systemd forgets the unit whose file went (and that it failed, if it had)
    best_effort("reload systemd", systemd.daemon_reload)
    # ("not loaded" when it never failed: nothing to say)
    best_effort("forget flannel.service's failure",
                lambda: systemd.do("reset-failed", SERVICE_NAME, quiet=True))
    state.forget()
    out.clear(*OWN).set(STOPPED)
    out.status = (Status(BLOCKED, "Flannel stopped; {}: left {}".format(damaged, ", ".join(left)))
                  if left else Status(MAINTENANCE, REMOVED))
    return out


def backend_change_waits(ctx: HookContext) -> bool:
    """The options' backend is not the one flanneld runs: the change waits
    for every node to give its lease up (steps/network.py refuses it until
    then), and this node's would otherwise live on for 24 h."""
    options, confirmed = ctx.options, ctx.confirmed
    return options is not None and confirmed is not None and \
        options.network_config().backend.type != confirmed.backend.type
