"""update-status's supervision of flanneld: what flanneld does not notice or
mend by itself, whichever subnet manager it runs on (the mode's look at
its leases: steps/subnets).

- the mode cannot be asked (etcd or the API away): its status names why;
  flanneld runs on, on its lease.
- the mode lost the network (etcd rebuilt empty): written again in this hook.
- this node's lease gone (etcd lost it; a Node deleted and registered again
  lost flanneld's annotations, and the other nodes their routes to it),
  another node's lease this node has no route to, no subnet.env a minute
  after flanneld started (deleted since: flanneld writes it only as it
  starts, and the flannel plugin fails every pod without it), one of
  flanneld's vxlan devices gone (flanneld v0.28.10 makes flannel-v6.<VNI>
  only as it starts, and never again while it runs), or what the mode knows
  only a restart mends (an etcd watch stuck): flanneld is restarted in
  this hook, which leases, annotates and routes anew.
- those restarts wait out a grace after flanneld's own start, and back off
  while their cause outlives them (facts/restarts.py), the status saying so.
- what no restart mends is named instead: every subnet leased (the mode's),
  a host-gw node off this node's network.

It runs whatever the options say (a unit blocked on a mistyped option, or
waiting to switch subnet-manager, is still supervised): it looks at the
mode flanneld runs, and the network it runs.
"""
from __future__ import annotations

from typing import Optional

from ..adapters import links as machine_links
from ..facts import restarts
from ..facts.host_network import on_link, unrouted_subnets
from ..facts.netconfig import HOST_GW
from ..facts.status import Problem
from . import bridge, subnets
from .context import HookContext
from .flags import SERVICE_RUNNING
from .outcome import Outcome

# flanneld writes subnet.env within seconds of its start once it holds a lease
SUBNET_ENV_GRACE = 60
# what keeps the flanneld step from starting flanneld (steps/checks.py)
STARTS_BLOCKED = (Problem.IFACE, Problem.MTU, Problem.IPV6, Problem.COMMANDS, Problem.KERNEL)


def run(ctx: HookContext, *, flanneld_started: bool) -> Outcome:
    """`flanneld_started`: the charm started flanneld with its current
    inputs. Only then, while its mode can be reached and nothing blocks
    flanneld's start, can a restart asked for here happen (the flanneld step
    starts it), and only then is one asked for: a flanneld the charm has not
    started, or cannot start (the etcd relation gone, an option its machine
    refuses), is not restarted, nor its back-off spent."""
    out = Outcome()
    mode = subnets.running(ctx)
    if mode is None:
        return out
    seen = mode.look(out, flanneld_started=flanneld_started)
    unrouted: tuple = ()
    if not seen.unreachable:
        if seen.others:   # flanneld runs on its lease: does it route the others'?
            unrouted = unrouted_subnets(seen.others, None, destinations(ctx))
        unroutable = host_gw_unroutable(ctx, mode, unrouted)
        out.found(Problem.UNROUTABLE, unroutable_text(unroutable))
        unrouted = tuple(subnet for subnet in unrouted if subnet not in unroutable)
    if not (flanneld_started and mode.reachable()) or any(
            ctx.state.problem(problem) for problem in STARTS_BLOCKED):
        return out.found(Problem.RESTARTS, None)
    cause = restart_cause(ctx, seen, unrouted)
    if cause is not None or not seen.unreachable:   # (the mode away: the back-off stands)
        restart_flanneld(ctx, cause, out, lease_gone=seen.lease_gone)
    return out


def destinations(ctx: HookContext) -> set:
    """Where this machine's routes lead, in the family that keys the
    leases (the first of the network flanneld runs)."""
    confirmed = ctx.confirmed
    if confirmed is not None and confirmed.primary_network.version == 6:
        return machine_links.route_destinations(ctx.machine, 6)
    return ctx.route_destinations


def restart_cause(ctx: HookContext, seen: subnets.LeaseLook, unrouted: tuple
                  ) -> Optional[restarts.Cause]:
    """What a restart of flanneld (started by the charm) would mend, if
    anything; a cause names what it is about (facts/restarts.py: the
    back-off holds while that stays)."""
    if seen.lost and not seen.unmendable:
        return restarts.Cause("lost-lease", seen.lost, frozenset([seen.lost]))
    if unrouted:
        return restarts.Cause("unrouted", f"flanneld has no route to {', '.join(unrouted)} "
                                          f"that {subnets.lease_home(ctx)} leases",
                              frozenset(unrouted))
    leasing = not seen.unmendable
    if not seen.unreachable and leasing and without_subnet_env(ctx):
        return restarts.Cause("no-subnet-env",
                              f"flanneld has written no {ctx.paths.subnet_env} since it started")
    gone = devices_gone(ctx) if leasing else []
    if gone:
        return restarts.Cause("device-gone", f"flanneld's {', '.join(gone)} is gone (flanneld "
                                             "makes it only as it starts)", frozenset(gone))
    return seen.cause


def restart_flanneld(ctx: HookContext, cause: Optional[restarts.Cause], out: Outcome, *,
                     lease_gone: bool = False) -> None:
    """Restart flanneld for `cause` unless it started moments ago or the
    restarts made for the same cause are still waiting out their back-off
    (facts/restarts.py); the status says which. With `lease_gone` (the
    subnet flanneld runs on is no longer its node's), the lease is given up
    first: its gateway off cni0 and subnet.env gone, so that the first new
    pod gets the new lease's gateway (flanneld writes subnet.env moments
    after it starts, and the bridge plugin refuses a second gateway)."""
    decision = restarts.decide(restarts.Restarts.from_stored(ctx.state.flanneld_restarts),
                               cause, now=ctx.clock(), flanneld_age=ctx.flanneld_age)
    ctx.state.flanneld_restarts = decision.stored
    out.found(Problem.RESTARTS, decision.waiting)
    if decision.restart:
        out.say(f"{cause.text}: restarting flanneld", True)
        if lease_gone:
            for gateway in bridge.give_up_lease(ctx):
                out.say(f"Took {gateway} off cni0: this node's lease of it is gone", True)
        ctx.state.flanneld_inputs = None
        out.clear(SERVICE_RUNNING)


def without_subnet_env(ctx: HookContext) -> bool:
    """flanneld running for over SUBNET_ENV_GRACE seconds with no subnet.env."""
    age = ctx.flanneld_age
    return age is not None and age > SUBNET_ENV_GRACE and not ctx.paths.subnet_env.exists()


def devices_gone(ctx: HookContext) -> list[str]:
    """The vxlan devices flanneld makes for the network it runs that are
    not there, once it has run past its grace (a stat each)."""
    confirmed, age = ctx.confirmed, ctx.flanneld_age
    if confirmed is None or age is None or age < restarts.GRACE:
        return []
    return [name for name in (confirmed.vxlan_link, confirmed.vxlan_v6_link)
            if name and not (ctx.paths.sys_class_net / name).exists()]


def host_gw_unroutable(ctx: HookContext, mode, unrouted: tuple) -> dict[str, str]:
    """host-gw's leases this node cannot route, whatever restarts: their
    node's address is on no network of flanneld's interface, so the kernel
    refuses the route ("network is unreachable"). {subnet: node address}."""
    confirmed = ctx.confirmed
    if not unrouted or confirmed is None or confirmed.backend.type != HOST_GW:
        return {}
    link = ctx.flanneld_link(ctx.options)
    if link is None:
        return {}
    return {subnet: address for subnet, address in mode.addresses_of(unrouted).items()
            if not on_link(address, link)}


def unroutable_text(unroutable: dict[str, str]) -> Optional[str]:
    if not unroutable:
        return None
    listed = ", ".join(f"{subnet} (node {address})" for subnet, address in unroutable.items())
    return (f"host-gw cannot route {listed}: not on this node's network (host-gw routes pods "
            "through each node's own address, so every node must share one layer-2 "
            "network); set backend=vxlan, with direct-routing=true to keep host-gw's "
            "routes where nodes share one")
