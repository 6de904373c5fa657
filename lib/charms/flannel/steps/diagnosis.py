"""The check-network and list-leases actions: every lease where flanneld
keeps them (etcd, or the Nodes: steps/subnets), and from this node,
whether every other node's lease can be reached (facts/diagnosis.py says
what the measurements mean). Both read only: no file, flag, key or rule
changes.
"""
from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional

from ..adapters import probes
from ..facts.diagnosis import (BROKEN, ECHOES, MORE_ECHOES, Echoes, Finding, PathProbe, Peer,
                               Verdict, diagnose, earlier_lease_of_this_node, gateway,
                               largest_crossing, summary)
from ..facts.etcd_keys import Lease
from ..facts.netconfig import VXLAN
from ..facts.paths import SERVICE_NAME
from . import subnets
from .context import HookContext

# Probes in flight at once (each mostly waits for an answer)
PARALLEL = 8
# The size of the plain ping that answered: the MTU search starts from it
PLAIN_PING = 84


@dataclass
class NetworkReport:
    findings: list[Finding] = field(default_factory=list)
    own_problems: list[str] = field(default_factory=list)   # this node's, before any probe

    @property
    def ok(self) -> bool:
        """Nothing broken: a lease of a node gone, or a path whose echoes
        chance could have lost, is no failure."""
        return not self.own_problems and all(f.status != BROKEN for f in self.findings)

    @property
    def summary(self) -> str:
        return summary(self.findings, self.own_problems)

    def as_results(self) -> dict:
        statuses = {f.status for f in self.findings}
        status = "broken" if not self.ok else "unsure" if "unsure" in statuses else "ok"
        out = {"summary": self.summary, "status": status,
               "nodes-checked": str(len(self.findings))}
        if self.findings:
            out["nodes"] = {f.peer.key: f.as_results() for f in self.findings}
        return out


def peers_of(lease: Lease, units: dict, *, ipv6: bool, expires_in: Optional[int] = None
             ) -> list[Peer]:
    """The lease's IPv4 peer, and with `ipv6` (this node is dual-stack) its
    IPv6 one: flanneld keeps each family's address and VTEP apart
    (PublicIPv6, BackendV6Data)."""
    attributes = lease.attributes
    unit = units.get((lease.subnet, lease.public_ip))
    backend = str(attributes.get("BackendType") or VXLAN)

    def vtep(key: str) -> Optional[str]:
        data = attributes.get(key)
        return data.get("VtepMAC") if isinstance(data, dict) else None
    found = [Peer(lease.subnet, lease.public_ip or "", backend, vtep("BackendData"), unit,
                  expires_in)]
    if ipv6 and lease.ipv6_subnet:
        found.append(Peer(lease.ipv6_subnet, str(attributes.get("PublicIPv6") or ""), backend,
                          vtep("BackendV6Data"), unit, expires_in))
    return found


def known_leases(ctx: HookContext) -> subnets.Leases:
    """Every lease, its seconds left and its holder, where flanneld runs.
    Raises LeasesUnreadable."""
    return subnets.leases_of(ctx)


LeasesUnreadable = subnets.LeasesUnreadable


def check_network(ctx: HookContext, *, timeout: float) -> NetworkReport:
    report = NetworkReport()
    lease, confirmed = ctx.lease(), ctx.confirmed
    missing = probes.missing_commands(ctx.machine)
    if missing:
        report.own_problems.append("cannot probe: {} not installed".format(", ".join(missing)))
        return report
    if lease is None or confirmed is None:
        why = ("is not a lease flanneld wrote (garbled?)" if ctx.paths.subnet_env.exists()
               else "is missing (flanneld has not leased a subnet here)")
        report.own_problems.append(f"this node holds no lease: {ctx.paths.subnet_env} {why}")
        return report
    if not ctx.systemd.is_active(SERVICE_NAME):
        report.own_problems.append("flanneld is not running here (journalctl -u flannel)")
    own = str(lease.primary.network)
    try:
        found = known_leases(ctx)
    except LeasesUnreadable as error:
        report.own_problems.append(str(error))
        return report
    leases = [held for held, _ in found.lifetimes]
    if not any(held.subnet == own for held in leases):
        report.own_problems.append(
            f"this node's lease of {own} is gone from {subnets.lease_home(ctx)}: flanneld "
            "leases again when it restarts (update-status restarts it)")
    peers = [peer for held, left in found.lifetimes if held.subnet != own
             for peer in peers_of(held, found.units, ipv6=lease.ipv6_subnet is not None,
                                  expires_in=left)]
    link_mtus = {link.name: link.mtu for link in ctx.links}
    # this node's own address in each family's lease (flannel.<VNI> holds
    # the subnet's first, cni0 its gateway): host-gw and direct routing are
    # probed from it, as a pod's packet leaves
    own_addresses = {}
    for subnet in (lease.subnet, lease.ipv6_subnet):
        if subnet is not None:
            mine = [address.ip for link in ctx.links for address in link.addresses
                    if address.ip in subnet.network]
            own_addresses[subnet.version] = str(min(mine)) if mine else None

    def path_of(peer: Peer) -> tuple[Optional[str], int]:
        """The vxlan device and the packet size that must cross, per family:
        over flannel-v6.<VNI>, whose MTU Linux caps below the pods' (pods
        get "packet too big" for larger IPv6 packets), that device's MTU."""
        if ":" not in peer.subnet:
            return confirmed.vxlan_link, lease.mtu
        v6_link = confirmed.vxlan_v6_link
        return v6_link, min(lease.mtu, link_mtus.get(v6_link) or lease.mtu)

    # a lease naming one of this node's addresses is an earlier one of its own
    here = {str(address.ip) for link in ctx.links for address in link.addresses}
    earlier = {peer.subnet: earlier_lease_of_this_node(peer) for peer in peers
               if peer.public_ip in here}
    probed = [peer for peer in peers if peer.subnet not in earlier]
    paths = [path_of(peer) for peer in probed]

    def measure(peer: Peer, path: tuple[Optional[str], int]) -> PathProbe:
        source = own_addresses.get(6 if ":" in peer.subnet else 4)
        return probe_path(ctx, peer, *path, timeout, pod_source=source)
    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        measured = list(pool.map(measure, probed, paths))
    found_ways = {peer.subnet: diagnose(peer, way, pod_mtu=mtu, vxlan_link=link,
                                        vxlan_port=confirmed.backend.port)
                  for peer, way, (link, mtu) in zip(probed, measured, paths)}
    report.findings = [earlier.get(peer.subnet) or found_ways[peer.subnet] for peer in peers]
    return report


class Asker:
    """Echoes to one peer, a question at a time: ECHOES of them, and while
    nothing came back, MORE_ECHOES more in rounds, each after a few echoes
    of the question's baseline (its last answer, asked again), so that an
    outage of the whole path is not taken for one part of it."""

    def __init__(self, ctx: HookContext, timeout: float):
        self.machine, self.timeout = ctx.machine, timeout

    def echoes(self, address: str, count: int = ECHOES, **how) -> Echoes:
        return probes.ping(self.machine, address, timeout=self.timeout, count=count, **how)

    def ask(self, address: str, baseline: Echoes, again: Callable[[int], Echoes],
            **how) -> tuple[Echoes, Echoes, bool]:
        """(the echoes to `address`, the baseline with its echoes asked
        again between rounds, whether the baseline answered in every round
        as it had before)."""
        asked, steady = self.echoes(address, **how), True
        answering = bool(baseline.answered)
        for _ in range(MORE_ECHOES // ECHOES):
            if asked.verdict(baseline) is not Verdict.UNSURE:
                break
            between = again(ECHOES)
            steady = steady and bool(between.answered) == answering
            baseline = baseline + between
            asked = asked + self.echoes(address, **how)
        return asked, baseline, steady


def probe_path(ctx: HookContext, peer: Peer, vxlan_link: Optional[str], pod_mtu: int,
               timeout: float, *, pod_source: Optional[str] = None) -> PathProbe:
    """Measure the way to one peer, stopping at the first thing missing
    (facts/diagnosis.py says what counts as missing)."""
    machine = ctx.machine
    route = probes.route_to(machine, peer.subnet) if peer.public_ip else None
    if route is None:
        return PathProbe(route=None)
    fdb = neighbour = None
    overlay = route.overlay(vxlan_link)
    target = gateway(peer, route, vxlan_link)
    if overlay and peer.vtep_mac:
        fdb = probes.fdb_sends(machine, route.dev, peer.vtep_mac, peer.public_ip)
        neighbour = probes.neighbour_has(machine, route.dev, target, peer.vtep_mac)
        if fdb is False or neighbour is False:
            return PathProbe(route=route, fdb=fdb, neighbour=neighbour)
    asker = Asker(ctx, timeout)
    node = asker.echoes(peer.public_ip)
    if not node.answered:   # silent so far: more before it counts as down
        node = node + asker.echoes(peer.public_ip, MORE_ECHOES)
    seen = {"route": route, "fdb": fdb, "neighbour": neighbour}
    if target == peer.public_ip:
        gateway_echoes, steady = node, True
    else:
        gateway_echoes, node, steady = asker.ask(
            target, node, lambda count: asker.echoes(peer.public_ip, count))
    seen.update(node=node, gateway=gateway_echoes)
    if gateway_echoes.verdict(node) is not Verdict.CROSSED or not steady:
        return PathProbe(**seen, steady=steady)

    def ask(**how) -> tuple[Echoes, bool]:
        """A question judged against the gateway's plain echoes, asked again
        between its rounds (and kept in seen["gateway"])."""
        asked, baseline, steady = asker.ask(
            how.pop("address", target), seen["gateway"],
            lambda count: asker.echoes(target, count), **how)
        seen["gateway"] = baseline
        return asked, steady
    if not overlay and pod_source is not None:
        # TTL 1: the peer answers from its pods' bridge, or, without one, with
        # a TTL exceeded; either way back to a pod-network address
        pod_path, steady = ask(address=peer.pod_gateway, source=pod_source, ttl=1,
                               answering=(peer.pod_gateway, peer.public_ip))
        seen.update(pod_path=pod_path, pod_source=pod_source)
        if pod_path.verdict(seen["gateway"]) is not Verdict.CROSSED or not steady:
            return PathProbe(**seen, steady=steady)

    def crosses(size: int) -> Optional[bool]:
        """Whether packets of `size` cross, on full evidence (None: unsure)."""
        asked, steady = ask(size=size)
        verdict = asked.verdict(seen["gateway"])
        return None if verdict is Verdict.UNSURE or not steady else verdict is Verdict.CROSSED

    def seems_to_cross(size: int) -> bool:
        """One round, for the search: the edge it finds is asked again in full."""
        return bool(asker.echoes(target, size=size).answered)
    full_size, steady = ask(size=pod_mtu)
    seen.update(full_size=full_size)
    full = full_size.verdict(seen["gateway"])
    if full in (Verdict.REFUSED, Verdict.UNSURE) or not steady:
        return PathProbe(**seen, steady=steady)
    if full is Verdict.LOST:
        # the edge found, then seen again in full: a loss inside the search
        # moves it, and the size above it then crosses
        largest = largest_crossing(seems_to_cross, min(PLAIN_PING, pod_mtu), pod_mtu - 1)
        confirmed = largest is not None and crosses(largest) is True and \
            crosses(largest + 1) is False
        return PathProbe(**seen, largest=largest, edge_confirmed=confirmed or None)
    # through the vxlan device a pod's packet one byte too large must be
    # refused here (not sent: no loss to judge); a direct route's interface
    # is larger than the pods' MTU
    refused = None
    if overlay:
        over = asker.echoes(target, 1, size=pod_mtu + 1)
        refused = over.refused if over.sent or over.refused else None
    return PathProbe(**seen, largest=pod_mtu, too_large_refused=refused)


class LeaseRow(NamedTuple):
    lease: Lease
    expires_in: Optional[int]
    this_node: bool
    node_answers: Optional[bool]   # None: not asked (this node)
    unit: Optional[str] = None     # the unit that named itself its holder

    @property
    def unheld(self) -> bool:
        """No unit holds it and its node does not answer: a node gone, whose
        lease lives on until it expires."""
        return self.unit is None and not self.this_node and self.node_answers is False

    def as_results(self) -> dict:
        out = {"subnet": self.lease.subnet, "address": self.lease.public_ip or "",
               "backend": str(self.lease.attributes.get("BackendType") or ""),
               "unit": self.unit or "none"}
        if self.lease.ipv6_subnet:
            out["ipv6-subnet"] = self.lease.ipv6_subnet
        if self.expires_in is not None:
            out["expires-in"] = str(self.expires_in)
        if self.this_node:
            out["this-node"] = "yes"
        elif self.node_answers is not None:
            out["node-answers"] = "yes" if self.node_answers else "no"
        return out


def list_leases(ctx: HookContext, *, timeout: float) -> list[LeaseRow]:
    """Every lease (etcd's, or the Nodes'); whether each node's address
    answers a ping (an etcd lease outlives its node by up to 24 h). Raises
    LeasesUnreadable."""
    found = known_leases(ctx)
    lifetimes = found.lifetimes
    lease = ctx.lease()
    own = str(lease.primary.network) if lease else None
    can_ping = ctx.machine.has("ping")

    asker = Asker(ctx, timeout)

    def answers(held: Lease) -> Optional[bool]:
        """Whether the node answers: a lost echo or two is no "no"."""
        if held.subnet == own or not held.public_ip or not can_ping:
            return None
        echoes = asker.echoes(held.public_ip)
        if not echoes.answered:
            echoes = echoes + asker.echoes(held.public_ip, MORE_ECHOES)
        return echoes.verdict() is Verdict.CROSSED
    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        answered = list(pool.map(answers, [held for held, _ in lifetimes]))
    return [LeaseRow(held, ttl, held.subnet == own, node,
                     found.units.get((held.subnet, held.public_ip)))
            for (held, ttl), node in zip(lifetimes, answered)]
