"""The status at the end of every hook: each problem the hook sees or a
step recorded, the highest-ranked shown (facts/status.py), else active with
the node's subnet. And what the hook learned for the idle hooks to come."""
from __future__ import annotations

import ipaddress
from typing import NamedTuple, Optional

from ..adapters import node_files
from ..facts.flanneld import defects_note
from ..facts.status import Problem, Status, choose, record_text
from ..facts.subnet_env import SubnetEnv
from . import subnets
from .context import HookContext


class Seen(NamedTuple):
    """What the flags say, as the handler read them."""
    installed: bool = False
    series_upgrade: bool = False
    network_configured: bool = False
    service_started: bool = False      # flanneld started with its current inputs
    cni_configured: bool = False


def gather(ctx: HookContext, seen: Seen, lease: Optional[SubnetEnv]) -> list:
    """Every (problem, text) this hook sees: a problem of a later step
    while an earlier one is not done is left out when it cannot be told."""
    confirmed = ctx.confirmed
    leased = lease is not None and confirmed is not None and confirmed.holds(lease)
    # (update-status finds a network out of subnets; flanneld, restarted by
    # systemd, may lease one any time a lease expires); a mode neither wanted
    # nor running has no step to find its problems gone
    hidden = subnets.hidden_problems(ctx)
    found = [(problem, record_text(text) if problem is Problem.RECORD else text)
             for problem, text in ctx.state.recorded_problems()
             if not (problem is Problem.OUT_OF_SUBNETS and leased) and problem not in hidden]
    if seen.series_upgrade:
        found.append((Problem.SERIES_UPGRADE, None))
    if not seen.installed:
        found.append((Problem.INSTALLING, None))
    if ctx.invalid_option is not None:
        found.append((Problem.OPTIONS, str(ctx.invalid_option)))
    found += subnets.wanted(ctx).waiting()
    if not seen.network_configured:
        found.append((Problem.NETWORK_PENDING, None))
    if not (seen.service_started and ctx.flanneld_active):
        # started with its inputs but not running: it exited, not starting
        found.append((Problem.SERVICE_FAILING if seen.service_started
                      else Problem.SERVICE_STARTING, None))
    elif ctx.flanneld_ready is False:
        found.append((Problem.NOT_READY, None))
    if not seen.cni_configured:
        found.append((Problem.CNI_PENDING, None))
    else:
        cni = node_files.chain_problem(ctx.paths.cni_bin_dir) or \
            node_files.runtime_config_problem(ctx.paths.cni_conf_dir, ctx.paths.cni_conflist)
        if cni:
            found.append((Problem.CNI, cni))
    # flanneld's word on its lease, checked against the network etcd
    # confirmed: a subnet.env left from before a network change is stale
    # until flanneld leases anew (no etcd round trip in an idle hook)
    if not leased:
        found.append((Problem.NEGOTIATING, None))
    return found


def status(ctx: HookContext, seen: Seen, lease: Optional[SubnetEnv]) -> Status:
    notes = [defects_note(ctx.state.flanneld_version), pods_left_note(ctx, lease)]
    return choose(gather(ctx, seen, lease), lease.gateways if lease else (),
                  "; ".join(note for note in notes if note))


def pods_left_note(ctx: HookContext, lease: Optional[SubnetEnv]) -> str:
    """After a subnet-manager change, while pods still run on addresses of
    the lease before it (host-local's table): "2 pods keep addresses from
    before subnet-manager=etcd: recreate them". Reading only: the mark
    goes at the hook's end (remember) once none is left."""
    left = ctx.state.subnet_manager_left
    if not left or lease is None:
        return ""
    table = ctx.paths.host_local_tables / ctx.cni_network_name()
    subnets = [gateway.network for gateway in lease.gateways]
    outside = [a for a in node_files.pod_addresses_in(table)
               if not any(ipaddress.ip_address(a) in subnet for subnet in subnets)]
    if not outside:
        return ""
    pods = "1 pod keeps an address" if len(outside) == 1 else \
        f"{len(outside)} pods keep addresses"
    return f"{pods} from before subnet-manager={left}: recreate them"


def remember(ctx: HookContext) -> None:
    """What an idle hook reuses: Juju runs config-changed, and a relation
    hook, for every change of the config and the relations' data, and the
    binding is asked again in any other hook; flanneld's main process,
    while it runs, stands for systemd's word on its unit."""
    if "flanneld_service" in vars(ctx):   # asked in this hook
        service = ctx.flanneld_service
        started = service.main_pid and ctx.machine.process_started(service.main_pid)
        ctx.state.flanneld_process = [service.main_pid, started] \
            if service.active and started is not None else None
    if ctx.state.subnet_manager_left:
        lease = ctx.lease()
        if lease is not None and not pods_left_note(ctx, lease):
            ctx.state.subnet_manager_left = None
    if ctx.idle:
        return
    ctx.state.config = ctx.config
    # only what this hook asked: a change it did not read must not stand for
    # the relation in the idle hooks after it (they ask Juju what is missing)
    relations = {}
    if "etcd_seen" in vars(ctx):
        relations["etcd"] = list(ctx.etcd_seen) if ctx.etcd_seen else None
    if "service_cidr" in vars(ctx):
        relations["service-cidr"] = ctx.service_cidr
    ctx.state.relations = relations or None
    if "binding_interface" in vars(ctx):   # asked in this hook
        ctx.state.binding_interface = ctx.binding_interface
