"""New pods can start on flanneld's lease: flannel's old gateways leave
cni0 (adapters/pod_bridge.py) at the end of every hook, just before the
status is worked out from the same lease. Whatever changed the lease (it
expired while flannel was away, the network changed, etcd was rebuilt),
the bridge plugin refuses every new pod while one is there."""
from __future__ import annotations

import subprocess
from typing import Optional

from ..adapters import pod_bridge
from ..facts.status import Problem
from ..facts.subnet_env import SubnetEnv
from .context import HookContext
from .outcome import Outcome


def run(ctx: HookContext, lease: Optional[SubnetEnv], *, flanneld_started: bool) -> Outcome:
    out = Outcome()
    confirmed = ctx.confirmed
    if lease is None or confirmed is None or not flanneld_started \
            or not pod_bridge.exists(ctx.paths.sys_class_net):
        return out.found(Problem.BRIDGE, None).found(Problem.BRIDGE_STALE, None)
    if not confirmed.holds(lease):
        return out   # flanneld is leasing anew: its subnet.env is of the old network
    served = [network for network, _ in ctx.served_networks()]
    try:
        settled = pod_bridge.settle_on_lease(
            lease.gateways, pod_bridge.FlannelsMarks(networks=tuple(served)),
            ctx.cni_network_name, machine=ctx.machine, tables_dir=ctx.paths.host_local_tables)
    except (OSError, ValueError, subprocess.SubprocessError) as error:
        return out.say(f"Could not look at {pod_bridge.POD_BRIDGE}: {error}", True)
    for address in settled.removed:
        out.say(f"Took {address} off {pod_bridge.POD_BRIDGE}: it is the gateway of an earlier "
                "lease, and the bridge plugin refuses new pods beside it; pods of that subnet "
                "must be recreated", True)
    out.found(Problem.BRIDGE, settled.problem)
    return out.found(Problem.BRIDGE_STALE, "{} still holds flannel's old gateway {}: no new pod "
                     "starts until it goes (tried again at every hook)".format(
                         pod_bridge.POD_BRIDGE, ", ".join(map(str, settled.failed)))
                     if settled.failed else None)


def give_up_lease(ctx: HookContext) -> list:
    """flanneld's lease (subnet.env's) is gone for good, flanneld stopped (a
    subnet-manager change, a removal while a backend change waits): its
    gateways off cni0, so that the next lease's gateway can join the
    bridge, and subnet.env removed. Returns the gateways taken off."""
    lease = ctx.lease()
    removed = [gateway for gateway in (lease.gateways if lease else ())
               if pod_bridge.delete_address(ctx.machine, gateway)]
    if ctx.paths.subnet_env.exists():
        ctx.paths.subnet_env.unlink()
    return removed
