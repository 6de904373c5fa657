"""update-status's look at etcd: what flanneld does not notice by itself.

One TLS connection (adapters/etcd_probe.py, the standard library only):
is etcd there, does it still hold the network config, and this node's
lease, and does this node route every other node's lease? The policy:

- etcd away: a waiting status naming it; flanneld runs on, on its lease.
- the config gone (etcd rebuilt empty): flannel.network.configured is
  cleared, and the network is written again in this hook.
- this node's lease gone, or another node's lease it has no route to, or no
  subnet.env a minute after flanneld started (deleted since: flanneld writes
  it only as it starts, and the flannel plugin fails every pod without
  it): flanneld is restarted in this hook, which leases and routes anew.
- flanneld < 0.28.9 whose etcd watch retries a compacted revision without
  end (its journal's tail says so): restarted, which watches anew.
- those restarts wait out a grace after flanneld's own start, and back off
  while their cause outlives them (facts/restarts.py), the status saying so.
- what no restart mends is named instead: every subnet leased (flanneld
  exits "out of subnets"), a host-gw node off this node's network.
- on a unit that saw flannel v0.11's network in etcd's v2 keyspace: once
  every node runs flanneld >= 0.18 the v2 keys go; until then the v3
  copies of v0.11 nodes' leases are kept as long-lived as the v2 leases.

It runs whatever the options say (a unit blocked on a mistyped option still
gets its network and lease back after an etcd rebuild): it looks at the
network flanneld runs, the one etcd last confirmed.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from ..adapters import etcd_probe, journal
from ..facts.etcd_keys import EtcdUnavailable, parse_endpoints, unit_record
from ..facts.flanneld import JOURNAL_TAIL, has_compaction_loop, stuck_on_compaction
from ..facts import restarts
from ..facts.host_network import on_link, unrouted_subnets
from ..facts.netconfig import HOST_GW
from ..facts.paths import SERVICE_NAME
from ..facts.status import Problem
from .context import HookContext
from .flags import NETWORK_CONFIGURED, SERVICE_RUNNING
from .outcome import Outcome

# flanneld writes subnet.env within seconds of its start once etcd answers
SUBNET_ENV_GRACE = 60


@dataclass(frozen=True)
class EtcdHealth:
    problem: Optional[str] = None     # etcd away (EtcdUnavailable's reason)
    answered: Optional[str] = None    # the endpoint that answered
    config_missing: bool = False      # etcd holds no network config (rebuilt empty)
    lost_lease: Optional[str] = None  # this node's lease ("10.1.52.0/24") gone from etcd
    unrouted: tuple = ()              # other nodes' subnets this node has no route to
    leases: Optional[etcd_probe.LeaseList] = None   # every lease, as last listed
    # this node's lease is there, and no key names this unit its holder as
    # it is (etcd rebuilt, the address changed, another etcd)
    unnamed: bool = False


def own_lease(ctx: HookContext) -> Optional[str]:
    """The lease subnet.env names, if it is one of the network etcd
    confirmed (a subnet.env of another network is being re-leased), named
    as flanneld keys it: "10.1.52.0/24", dual-stack with "&" and the IPv6
    subnet."""
    lease, confirmed = ctx.lease(), ctx.confirmed
    if lease is None or confirmed is None or not confirmed.holds(lease):
        return None
    return lease.lease_name


def look(ctx: HookContext, connection_string: str, timeout: float = 3.0) -> EtcdHealth:
    """What etcd says of this node, through the endpoint that answered last
    first. Never raises for etcd being away or refusing."""
    lease_of = own_lease(ctx)
    files = ctx.client_files
    known = etcd_probe.LeaseList.from_stored(ctx.state.lease_list)
    try:
        view = etcd_probe.look(parse_endpoints(connection_string), str(files.ca_file),
                               str(files.cert_file), str(files.key_file), lease_of=lease_of,
                               leases=True, preferred=ctx.state.etcd_answered, known=known,
                               unit=ctx.juju.unit, timeout=timeout)
    except EtcdUnavailable as unavailable:
        return EtcdHealth(problem=unavailable.reason)
    unrouted = ()
    if view.lease and view.subnets:   # flanneld runs on its lease: does it route the others?
        unrouted = unrouted_subnets(view.subnets, lease_of.partition("&")[0],
                                    ctx.route_destinations)
    # (a lease of no address names no holder: nothing to write)
    unnamed = bool(view.lease and view.lease_public_ip) and view.unit_record != unit_record(
        ctx.juju.unit, lease_of, view.lease_public_ip)
    return EtcdHealth(answered=view.endpoint, config_missing=view.config is None,
                      lost_lease=lease_of if view.lease is False else None, unrouted=unrouted,
                      leases=view.leases, unnamed=unnamed)


def run(ctx: HookContext, *, flanneld_started: bool) -> Outcome:
    out = Outcome()
    etcd = ctx.juju.etcd()
    if etcd is None:
        return out
    seen = look(ctx, etcd.connection_string)
    out.found(Problem.ETCD, seen.problem)
    if seen.answered:
        ctx.state.etcd_answered = seen.answered
    if seen.leases is not None:
        ctx.state.lease_list = seen.leases.as_stored()
    if seen.config_missing:
        out.say("etcd holds no flannel network config (rebuilt?): writing it again", True)
        out.clear(NETWORK_CONFIGURED)
    full = None
    if seen.problem is None:   # what no restart mends
        full = out_of_subnets(ctx, seen)
        out.found(Problem.OUT_OF_SUBNETS, full)
        unroutable = host_gw_unroutable(ctx, etcd.connection_string, seen.unrouted)
        out.found(Problem.UNROUTABLE, unroutable_text(unroutable))
        seen = dataclasses.replace(seen, unrouted=tuple(
            subnet for subnet in seen.unrouted if subnet not in unroutable))
    cause = restart_cause(ctx, seen, flanneld_started, full is not None)
    if cause is not None or seen.problem is None:   # (etcd away: the back-off stands)
        restart_flanneld(ctx, cause, out)
    if ctx.state.v2_network_seen and seen.problem is None:
        finish_v2_move(ctx, etcd.connection_string, out)
    if seen.problem is None:
        register(ctx, etcd.connection_string, seen, out)
    return out


def restart_cause(ctx: HookContext, seen: EtcdHealth, flanneld_started: bool, full: bool
                  ) -> Optional[restarts.Cause]:
    """What a restart of flanneld would mend, if anything (`full`: the
    network is out of subnets, which no restart mends). A cause is keyed by
    its kind: the back-off holds while the leases it names come and go."""
    if seen.lost_lease and not full:
        return restarts.Cause("lost-lease", f"etcd lost this node's lease of {seen.lost_lease}")
    if seen.unrouted:
        subnets = ", ".join(seen.unrouted)
        return restarts.Cause("unrouted", f"flanneld has no route to {subnets} that etcd leases")
    leasing = flanneld_started and not full
    if seen.problem is None and leasing and without_subnet_env(ctx):
        return restarts.Cause("no-subnet-env",
                              f"flanneld has written no {ctx.paths.subnet_env} since it started")
    if leasing and watch_stuck(ctx):
        return restarts.Cause(
            "watch-stuck", f"flanneld {ctx.state.flanneld_version}'s etcd watch retries a "
                           "compacted revision without end (flannel-io/flannel#2470, fixed in "
                           "v0.28.9)")
    return None


def restart_flanneld(ctx: HookContext, cause: Optional[restarts.Cause], out: Outcome) -> None:
    """Restart flanneld for `cause` unless it started moments ago or the
    restarts made for the same cause are still waiting out their back-off
    (facts/restarts.py); the status says which."""
    decision = restarts.decide(restarts.Restarts.from_stored(ctx.state.flanneld_restarts),
                               cause, now=ctx.clock(), flanneld_age=ctx.flanneld_age)
    ctx.state.flanneld_restarts = decision.stored
    out.found(Problem.RESTARTS, decision.waiting)
    if decision.restart:
        out.say(f"{cause.text}: restarting flanneld", True)
        ctx.state.flanneld_inputs = None
        out.clear(SERVICE_RUNNING)


def out_of_subnets(ctx: HookContext, seen: EtcdHealth) -> Optional[str]:
    """Why flanneld can lease nothing, when every subnet of the network is
    leased and this node holds none in etcd (whatever a stale subnet.env
    says): flanneld exits "out of subnets", and systemd starts it again
    every five seconds until a lease expires."""
    confirmed = ctx.confirmed
    holds = own_lease(ctx) is not None and not seen.lost_lease
    if confirmed is None or seen.leases is None or holds:
        return None
    held, room = confirmed.subnets_held(seen.leases.subnets), confirmed.leasable
    if held < room:
        return None
    return (f"Out of subnets: {held} leases hold every /{confirmed.subnet_len} flanneld hands "
            f"out of {confirmed.network} (a removed node's lease lives 24 h: list-leases names "
            "them); set a longer subnet-len or a larger cidr")


def host_gw_unroutable(ctx: HookContext, connection_string: str, unrouted: tuple
                       ) -> dict[str, str]:
    """host-gw's leases this node cannot route, whatever restarts: their
    node's address is on no network of flanneld's interface, so the kernel
    refuses the route ("network is unreachable"). {subnet: node address}."""
    confirmed = ctx.confirmed
    if not unrouted or confirmed is None or confirmed.backend.type != HOST_GW:
        return {}
    link = ctx.flanneld_link(ctx.options)
    if link is None:
        return {}
    files = ctx.client_files
    try:
        values = etcd_probe.lease_values(parse_endpoints(connection_string), str(files.ca_file),
                                         str(files.cert_file), str(files.key_file), unrouted,
                                         preferred=ctx.state.etcd_answered)
    except EtcdUnavailable:
        return {}
    found = {}
    for subnet, value in values.items():
        address = value.get("PublicIP")
        if isinstance(address, str) and not on_link(address, link):
            found[subnet] = address
    return found


def unroutable_text(unroutable: dict[str, str]) -> Optional[str]:
    if not unroutable:
        return None
    listed = ", ".join(f"{subnet} (node {address})" for subnet, address in unroutable.items())
    return (f"host-gw cannot route {listed}: not on this node's network (host-gw routes pods "
            "through each node's own address, so every node must share one layer-2 "
            "network); set backend=vxlan, with direct-routing=true to keep host-gw's "
            "routes where nodes share one")


def register(ctx: HookContext, connection_string: str, seen: EtcdHealth, out: Outcome) -> None:
    """Name this unit in etcd as the holder of its lease (list-leases and
    check-network say which unit holds a lease) wherever the look found no
    such name as it should be: a new lease, a new address, an etcd rebuilt
    (whichever unit noticed it first) or another etcd. The name is read at
    every look, in the same connection: no memory of it can go stale."""
    lease_of = own_lease(ctx)
    if not seen.unnamed or lease_of is None:
        return
    try:
        with ctx.etcd_store(connection_string, timeout=3.0) as store:
            registered = store.register_unit(ctx.juju.unit, lease_of)
    except EtcdUnavailable as error:
        out.say(f"Could not name this unit beside its lease in etcd: {error.reason}")
        return
    if registered:
        out.say(f"Named {ctx.juju.unit} the holder of {lease_of} in etcd")
        ctx.state.registered_lease = lease_of


def watch_stuck(ctx: HookContext) -> bool:
    """A flanneld of a version whose etcd watch can loop after a compaction,
    caught in that loop (its journal's tail); a restart watches from the
    current revision. Not asked of other versions."""
    if not has_compaction_loop(ctx.state.flanneld_version) or not ctx.flanneld_active:
        return False
    return stuck_on_compaction(journal.tail(ctx.machine, SERVICE_NAME, JOURNAL_TAIL))


def without_subnet_env(ctx: HookContext) -> bool:
    """flanneld running for over SUBNET_ENV_GRACE seconds with no subnet.env."""
    age = ctx.flanneld_age
    return age is not None and age > SUBNET_ENV_GRACE and not ctx.paths.subnet_env.exists()


def finish_v2_move(ctx: HookContext, connection_string: str, out: Outcome) -> None:
    """Only on a unit that saw flannel v0.11's network (it pays for etcd3gw):
    once every node runs flanneld >= 0.18, delete flannel's v2 keys; until
    then keep the copies of v0.11 nodes' leases alive."""
    from ..facts.v2_network import carried_ttl, copies, moved
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
