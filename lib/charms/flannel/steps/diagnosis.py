"""The check-network and list-leases actions: what etcd holds, and from this
node, whether every other node's lease can be reached (facts/diagnosis.py
says what the measurements mean). Both read only: no file, flag, key or
rule changes.

etcd is reached the way the stop hook reaches it: the endpoints the unit
last wrote to and the client files on disk, so an action works in any
state the unit is in, the etcd relation's hooks aside.
"""
from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field
from typing import Optional

from ..adapters import probes
from ..facts.diagnosis import (Finding, PathProbe, Peer, diagnose, gateway, largest_crossing,
                               summary)
from ..facts.etcd_keys import EtcdUnavailable, Lease
from ..facts.netconfig import VXLAN
from ..facts.paths import SERVICE_NAME
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
        return not self.own_problems and all(f.ok for f in self.findings)

    @property
    def summary(self) -> str:
        return summary(self.findings, self.own_problems)

    def as_results(self) -> dict:
        out = {"summary": self.summary, "status": "ok" if self.ok else "broken",
               "nodes-checked": str(len(self.findings))}
        if self.findings:
            out["nodes"] = {f.peer.key: f.as_results() for f in self.findings}
        return out


def peers_of(lease: Lease, units: dict, *, ipv6: bool) -> list[Peer]:
    """The lease's IPv4 peer, and with `ipv6` (this node is dual-stack) its
    IPv6 one: flanneld keeps each family's address and VTEP apart
    (PublicIPv6, BackendV6Data)."""
    attributes = lease.attributes
    unit = units.get((lease.subnet, lease.public_ip))
    backend = str(attributes.get("BackendType") or VXLAN)

    def vtep(key: str) -> Optional[str]:
        data = attributes.get(key)
        return data.get("VtepMAC") if isinstance(data, dict) else None
    found = [Peer(lease.subnet, lease.public_ip or "", backend, vtep("BackendData"), unit)]
    if ipv6 and lease.ipv6_subnet:
        found.append(Peer(lease.ipv6_subnet, str(attributes.get("PublicIPv6") or ""), backend,
                          vtep("BackendV6Data"), unit))
    return found


@dataclass(frozen=True)
class EtcdLeases:
    lifetimes: list            # (Lease, seconds left or None), every lease
    units: dict                # (IPv4 subnet, address) -> the unit that named itself its holder


def etcd_leases(ctx: HookContext) -> EtcdLeases:
    """Every lease, its seconds left and its unit; raises EtcdUnavailable."""
    endpoints = ctx.remembered_etcd
    if endpoints is None:
        raise EtcdUnavailable("this unit has not written to etcd yet (no etcd relation?)")
    with ctx.etcd_store(endpoints, timeout=5.0, remember=False) as store:
        return EtcdLeases(store.lease_lifetimes(), store.unit_names())


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
    own = str(lease.subnet.network)
    try:
        found = etcd_leases(ctx)
    except EtcdUnavailable as error:
        report.own_problems.append(f"cannot reach etcd: {error.reason}")
        return report
    leases = [held for held, _ in found.lifetimes]
    if not any(held.subnet == own for held in leases):
        report.own_problems.append(f"this node's lease of {own} is gone from etcd: flanneld "
                                   "leases again when it restarts (update-status restarts it)")
    peers = [peer for held in leases if held.subnet != own
             for peer in peers_of(held, found.units, ipv6=lease.ipv6_subnet is not None)]
    link_mtus = {link.name: link.mtu for link in ctx.links}

    def path_of(peer: Peer) -> tuple[Optional[str], int]:
        """The vxlan device and the packet size that must cross, per family:
        over flannel-v6.<VNI>, whose MTU Linux caps below the pods' (pods
        get "packet too big" for larger IPv6 packets), that device's MTU."""
        if ":" not in peer.subnet:
            return confirmed.vxlan_link, lease.mtu
        v6_link = confirmed.vxlan_v6_link
        return v6_link, min(lease.mtu, link_mtus.get(v6_link) or lease.mtu)

    paths = [path_of(peer) for peer in peers]
    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        probed = list(pool.map(lambda peer, path: probe_path(ctx, peer, *path, timeout),
                               peers, paths))
    report.findings = [diagnose(peer, found, pod_mtu=mtu, vxlan_link=link,
                                vxlan_port=confirmed.backend.port)
                       for peer, found, (link, mtu) in zip(peers, probed, paths)]
    return report


def probe_path(ctx: HookContext, peer: Peer, vxlan_link: Optional[str], pod_mtu: int,
               timeout: float) -> PathProbe:
    """Measure the way to one peer, stopping at the first thing missing."""
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
    node_answers = probes.ping(machine, peer.public_ip, timeout=timeout) is probes.Echo.ANSWERED
    if probes.ping(machine, target, timeout=timeout) is not probes.Echo.ANSWERED:
        return PathProbe(route=route, fdb=fdb, neighbour=neighbour, node_answers=node_answers)

    def crosses(size: int) -> bool:
        return probes.ping(machine, target, timeout=timeout, size=size) is probes.Echo.ANSWERED
    full_size = probes.ping(machine, target, timeout=timeout, size=pod_mtu)
    if full_size is probes.Echo.REFUSED:
        return PathProbe(route=route, fdb=fdb, neighbour=neighbour, node_answers=node_answers,
                         gateway_answers=True, full_size_refused=True)
    largest = pod_mtu if full_size is probes.Echo.ANSWERED else largest_crossing(
        crosses, min(PLAIN_PING, pod_mtu), pod_mtu - 1)
    # through the vxlan device a pod's packet one byte too large must be
    # refused here; a direct route's interface is larger than the pods' MTU
    refused = probes.ping(machine, target, timeout=timeout, size=pod_mtu + 1) \
        is probes.Echo.REFUSED if overlay else None
    return PathProbe(route=route, fdb=fdb, neighbour=neighbour, node_answers=node_answers,
                     gateway_answers=True, largest=largest, too_large_refused=refused)


@dataclass(frozen=True)
class LeaseRow:
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
    """Every lease in etcd; whether each node's address answers a ping (a
    lease outlives its node by up to 24 h). Raises EtcdUnavailable."""
    found = etcd_leases(ctx)
    lifetimes = found.lifetimes
    lease = ctx.lease()
    own = str(lease.subnet.network) if lease else None
    can_ping = ctx.machine.has("ping")

    def answers(held: Lease) -> Optional[bool]:
        if held.subnet == own or not held.public_ip or not can_ping:
            return None
        return probes.ping(ctx.machine, held.public_ip,
                           timeout=timeout) is probes.Echo.ANSWERED
    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        answered = list(pool.map(answers, [held for held, _ in lifetimes]))
    return [LeaseRow(held, ttl, held.subnet == own, node,
                     found.units.get((held.subnet, held.public_ip)))
            for (held, ttl), node in zip(lifetimes, answered)]
