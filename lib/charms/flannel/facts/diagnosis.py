"""What the check-network action concludes from what it measured: for every
other node's lease, is the way there whole, and if not, the likely cause in
an operator's words. Measuring is steps/diagnosis.py's (adapters/probes.py).

The order of the causes is the order a packet meets them: this node's route
to the lease, the vxlan device's FDB and neighbour entries (flanneld writes
both for each vxlan lease), the other node on the underlay, vxlan's UDP port
between them (the overlay fails while the underlay answers: a firewall, or
VMware NSX, which drops 8472), then the size that crosses with DF set (a
path narrower than the pods' MTU drops big packets silently: a black hole),
and last whether a packet one byte over the pods' MTU is refused here, as
it must be, rather than sent to be lost.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Optional

from .netconfig import VXLAN, VXLAN_OVERHEAD

DEFAULT_VXLAN_PORT = 8472


def icmp_headers(address: str) -> int:
    """What `ping -s` adds to the size it is given: an echo's IP and ICMP
    headers (IPv4 28 bytes, IPv6 48)."""
    return 48 if ":" in address else 28


@dataclass(frozen=True)
class Peer:
    """Another node's lease of one family, as etcd holds it (a dual-stack
    lease is two: its IPv4 subnet and its IPv6 one)."""
    subnet: str                      # "10.1.52.0/24" (or "fd10:1:0:5::/64")
    public_ip: str                   # the node's address flanneld leased it for (PublicIPv6)
    backend: str = VXLAN             # the lease's BackendType
    vtep_mac: Optional[str] = None   # vxlan: the node's flannel.<VNI> (flannel-v6.<VNI>) MAC
    unit: Optional[str] = None       # the flannel unit on that node, if known

    @property
    def key(self) -> str:
        """The lease's name in the action's results (keys allow [a-z0-9-]):
        its subnet, as a node's stale lease may share its address for a day."""
        return re.sub(r"[^a-z0-9]+", "-", self.subnet.lower()).strip("-")


@dataclass(frozen=True)
class Route:
    """This node's route to a peer's subnet (`ip route show exact`)."""
    via: Optional[str]   # the next hop ("10.1.52.0" over vxlan, the node's address direct)
    dev: str

    def overlay(self, vxlan_link: Optional[str]) -> bool:
        return vxlan_link is not None and self.dev == vxlan_link


@dataclass(frozen=True)
class PathProbe:
    """What was measured from this node towards one peer."""
    route: Optional[Route]                 # None: no route to the peer's subnet
    fdb: Optional[bool] = None             # vxlan: an FDB entry sends its VTEP MAC to its address
    neighbour: Optional[bool] = None       # vxlan: the gateway's neighbour entry has its MAC
    node_answers: bool = False             # the node's address answers a ping on the underlay
    gateway_answers: bool = False          # the peer's gateway answers through the route
    largest: Optional[int] = None          # the largest packet (bytes) that crossed with DF
    full_size_refused: bool = False        # a packet of the pods' MTU was refused here
    too_large_refused: Optional[bool] = None   # vxlan: one byte over the MTU was refused here


@dataclass(frozen=True)
class Finding:
    peer: Peer
    gateway: str                  # the address probed through the route
    ok: bool
    cause: str = ""               # why not, in an operator's words ("" when ok)
    largest: Optional[int] = None

    def as_results(self) -> dict:
        out = {"address": self.peer.public_ip, "subnet": self.peer.subnet,
               "gateway": self.gateway, "status": "ok" if self.ok else "broken"}
        if self.peer.unit:
            out["unit"] = self.peer.unit
        if self.cause:
            out["cause"] = self.cause
        if self.largest is not None:
            out["largest-packet"] = str(self.largest)
        return out


def gateway(peer: Peer, route: Optional[Route], vxlan_link: Optional[str]) -> str:
    """The address a probe through this node's route reaches on the peer:
    over vxlan its flannel.<VNI> (the lease's first address, which flanneld
    gives that device), else (host-gw, direct routing) the node itself."""
    if route is not None and route.overlay(vxlan_link):
        return str(ipaddress.ip_network(peer.subnet).network_address)
    return peer.public_ip


def diagnose(peer: Peer, probe: PathProbe, *, pod_mtu: int, vxlan_link: Optional[str],
             vxlan_port: int = 0) -> Finding:
    """The first thing wrong on the way to `peer`, or ok."""
    route = probe.route
    via = gateway(peer, route, vxlan_link)
    node = f"{peer.unit} ({peer.public_ip})" if peer.unit else peer.public_ip

    def broken(cause: str) -> Finding:
        return Finding(peer, via, False, cause, probe.largest)

    if not peer.public_ip:
        return broken(f"the lease of {peer.subnet} names no node address (PublicIP): no "
                      "node can route to it")
    if route is None:
        return broken(f"this node has no route to {peer.subnet}, {node}'s lease: flanneld has "
                      "not programmed it (update-status restarts flanneld when it finds one "
                      "missing)")
    overlay = route.overlay(vxlan_link)
    if overlay and probe.fdb is False:
        return broken(f"{vxlan_link} has no FDB entry sending {node}'s VTEP {peer.vtep_mac} "
                      f"to {peer.public_ip}: flanneld has not programmed it (restart flanneld)")
    if overlay and probe.neighbour is False:
        return broken(f"{vxlan_link} has no neighbour entry for {via} with {node}'s VTEP "
                      f"{peer.vtep_mac}: flanneld has not programmed it (restart flanneld)")
    if not probe.gateway_answers:
        if not probe.node_answers:
            return broken(f"{node} does not answer on the underlay either: the machine is "
                          "down or the network between the nodes drops its traffic")
        if overlay:
            port = vxlan_port or DEFAULT_VXLAN_PORT
            return broken(f"vxlan traffic to {peer.public_ip} (UDP {port}) is dropped while "
                          "the node answers on the underlay: a firewall or the network "
                          f"blocks UDP {port} (VMware NSX drops 8472: set the port option), or "
                          f"flanneld on {node} is down")
        return broken(f"{via} does not answer through the route to {peer.subnet}")
    if probe.full_size_refused:
        return broken(f"a packet of the pods' MTU ({pod_mtu} bytes) is refused here: "
                      f"{route.dev}'s MTU is smaller than the pods' (restart flanneld)")
    if probe.largest is not None and probe.largest < pod_mtu:
        fix = (f"set the mtu option to {probe.largest + VXLAN_OVERHEAD} or less"
               if overlay else "lower the interface's MTU to the path's")
        return broken(f"MTU black hole: packets up to {probe.largest} bytes reach {node}, "
                      f"larger ones up to the pods' MTU of {pod_mtu} are lost without an "
                      f"error: the path is narrower than flannel's MTU ({fix})")
    if probe.too_large_refused is False:
        return broken(f"a packet of {pod_mtu + 1} bytes (over the pods' MTU of {pod_mtu}) "
                      f"left for {node} instead of being refused here: {route.dev}'s MTU is "
                      "larger than the pods' (restart flanneld)")
    return Finding(peer, via, True, "", probe.largest)


def largest_crossing(crosses, low: int, high: int) -> int:
    """The largest size in [low, high] for which crosses(size) holds,
    assuming it holds for every size below some limit and for none above
    (binary search; low is taken to cross). About log2(high - low) probes."""
    while low < high:
        middle = (low + high + 1) // 2
        if crosses(middle):
            low = middle
        else:
            high = middle - 1
    return low


def summary(findings: list[Finding], own_problems: list[str]) -> str:
    """One line for the action's result and its failure message."""
    broken = [f for f in findings if not f.ok]
    parts = list(own_problems)
    parts += [f"{f.peer.unit or f.peer.public_ip}: {f.cause}" for f in broken]
    if parts:
        return "; ".join(parts)
    if not findings:
        return "no other node holds a lease: nothing to check"
    return f"every node reachable: {len(findings)} checked"
