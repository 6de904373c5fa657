"""What the check-network action concludes from what it measured: for every
other node's lease, is the way there whole, and if not, the likely cause in
an operator's words. Measuring is steps/diagnosis.py's (adapters/probes.py).

The order of the causes is the order a packet meets them: this node's route
to the lease, the vxlan device's FDB and neighbour entries (flanneld writes
both for each vxlan lease), the other node on the underlay, vxlan's UDP port
between them (the overlay fails while the underlay answers: a firewall, or
VMware NSX, which drops 8472), over host-gw and direct routing the pods'
own addresses on the wire (a network that drops what is not the machines'
own address), then the size that crosses with DF set (a path narrower than
the pods' MTU drops big packets silently: a black hole), and last whether a
packet one byte over the pods' MTU is refused here, as it must be, rather
than sent to be lost.

A lost echo is evidence, not a verdict: networks lose packets. Every
question is asked with several echoes, and "nothing crossed" counts only
when chance cannot explain it: when a path that loses as many echoes as the
node's own address lost (its baseline) would lose all of them less than
once in ten thousand times, and never on fewer than sixteen echoes
(`Echoes.verdict`); that counts echoes as lost each on its own, so the
baseline is asked again between the rounds of a question that gets no
answer, and an outage of the whole path (the baseline silent too) makes
the answer unknown (`PathProbe.steady`). Until then more echoes are sent;
what stays unexplained is said to be unknown, never given a cause.
"""
from __future__ import annotations

import enum
import ipaddress
import re
from typing import NamedTuple, Optional

from .netconfig import VXLAN, VXLAN_OVERHEAD
from .options import MIN_MTU, MIN_POD_MTU

DEFAULT_VXLAN_PORT = 8472
# Echoes per question, and how many more while the answer is in doubt
ECHOES = 4
MORE_ECHOES = 12
# A verdict that nothing crossed stands when chance would explain it less
# often than this (once in ten thousand: a run asks dozens of questions).
CHANCE = 0.0001
# Nothing crossed is a verdict only after this many echoes: a baseline of
# four answered echoes says little of a path's loss.
LOST_AFTER = ECHOES + MORE_ECHOES
# The loss assumed of a path with no baseline (the node's own address):
# half its echoes; ten lost echoes in a row rule it out.
UNKNOWN_LOSS = 0.5
# IPv6 needs every link to carry 1280 bytes (RFC 8200)
IPV6_MIN_MTU = 1280


def icmp_headers(address: str) -> int:
    """What `ping -s` adds to the size it is given: an echo's IP and ICMP
    headers (IPv4 28 bytes, IPv6 48)."""
    return 48 if ":" in address else 28


class Verdict(enum.Enum):
    CROSSED = "crossed"     # an answer came back
    LOST = "lost"           # nothing came back, more than chance explains
    REFUSED = "refused"     # not sent: larger than the route's MTU ("message too long")
    UNSURE = "unsure"       # nothing came back, but chance may explain it


class Echoes(NamedTuple):
    """Echoes sent to one address with one size, and how many came back."""
    sent: int = 0
    answered: int = 0
    refused: bool = False    # ping could not send them: "message too long"

    def __add__(self, other: "Echoes") -> "Echoes":
        return Echoes(self.sent + other.sent, self.answered + other.answered,
                      self.refused or other.refused)

    @property
    def lost(self) -> int:
        return self.sent - self.answered

    def loss_rate(self) -> float:
        """The share of echoes this path loses, estimated with one echo
        lost and one answered more than seen (so that 4 of 4 answered does
        not claim a perfect path)."""
        return (self.lost + 1) / (self.sent + 2)

    def verdict(self, baseline: Optional["Echoes"] = None) -> Verdict:
        """What these echoes say, measured against `baseline`: echoes of
        the same path that did cross (the node's address on the underlay,
        or the smaller packets to the same address)."""
        if self.answered:
            return Verdict.CROSSED
        if self.refused:
            return Verdict.REFUSED
        if self.sent < LOST_AFTER:
            return Verdict.UNSURE
        loss = baseline.loss_rate() if baseline is not None and baseline.answered \
            else UNKNOWN_LOSS
        return Verdict.LOST if loss ** self.sent < CHANCE else Verdict.UNSURE

    def __str__(self) -> str:
        return f"{self.answered}/{self.sent}"


NOT_ASKED = Echoes()


class Peer(NamedTuple):
    """Another node's lease of one family, as etcd holds it (a dual-stack
    lease is two: its IPv4 subnet and its IPv6 one)."""
    subnet: str                      # "10.1.52.0/24" (or "fd10:1:0:5::/64")
    public_ip: str                   # the node's address flanneld leased it for (PublicIPv6)
    backend: str = VXLAN             # the lease's BackendType
    vtep_mac: Optional[str] = None   # vxlan: the node's flannel.<VNI> (flannel-v6.<VNI>) MAC
    unit: Optional[str] = None       # the flannel unit on that node, if known
    expires_in: Optional[int] = None   # seconds until etcd drops the lease

    @property
    def key(self) -> str:
        """The lease's name in the action's results (keys allow [a-z0-9-]):
        its subnet, as a node's stale lease may share its address for a day."""
        return re.sub(r"[^a-z0-9]+", "-", self.subnet.lower()).strip("-")

    @property
    def pod_gateway(self) -> str:
        """The address the node's pods' bridge holds (the lease's first host)."""
        return str(ipaddress.ip_network(self.subnet).network_address + 1)


class Route(NamedTuple):
    """This node's route to a peer's subnet (`ip route show exact`)."""
    via: Optional[str]   # the next hop ("10.1.52.0" over vxlan, the node's address direct)
    dev: str

    def overlay(self, vxlan_link: Optional[str]) -> bool:
        return vxlan_link is not None and self.dev == vxlan_link


class PathProbe(NamedTuple):
    """What was measured from this node towards one peer."""
    route: Optional[Route]                 # None: no route to the peer's subnet
    fdb: Optional[bool] = None             # vxlan: an FDB entry sends its VTEP MAC to its address
    neighbour: Optional[bool] = None       # vxlan: the gateway's neighbour entry has its MAC
    node: Echoes = NOT_ASKED               # the node's address on the underlay
    gateway: Echoes = NOT_ASKED            # the peer's gateway, through the route
    # host-gw and direct routing: from this node's pod-network address to the
    # peer's pods' bridge (None: not asked; see pod_source)
    pod_path: Optional[Echoes] = None
    pod_source: Optional[str] = None       # this node's pod-network address it was sent from
    full_size: Echoes = NOT_ASKED          # packets of the pods' MTU, DF set
    largest: Optional[int] = None          # the largest packet (bytes) that crossed with DF
    # the black hole's edge seen again: `largest` crossed and one byte more
    # was lost, in a second round (None: no edge searched, or not sure)
    edge_confirmed: Optional[bool] = None
    too_large_refused: Optional[bool] = None   # vxlan: one byte over the MTU was refused here
    # every round of a question that got no answer had its baseline answer
    # between its echoes: no outage of the whole path in the meantime
    steady: bool = True

    @property
    def evidence(self) -> str:
        """Echoes answered of sent, per question asked."""
        parts = [(name, echoes) for name, echoes in (
            ("underlay", self.node), ("gateway", self.gateway),
            ("pod-path", self.pod_path or NOT_ASKED), ("full-size", self.full_size))
            if echoes.sent or echoes.refused]
        return ", ".join(f"{name} {'refused' if e.refused else e}" for name, e in parts)

    @property
    def lossy(self) -> bool:
        """Some echoes were lost on a path that answered."""
        asked = (self.node, self.gateway, self.pod_path or NOT_ASKED, self.full_size)
        return any(echoes.answered and echoes.lost for echoes in asked)


OK, BROKEN, UNSURE, GONE = "ok", "broken", "unsure", "gone"


class Finding(NamedTuple):
    peer: Peer
    gateway: str                  # the address probed through the route
    status: str                   # OK, BROKEN (a cause named), UNSURE, GONE
    cause: str = ""               # why not, in an operator's words ("" when ok)
    largest: Optional[int] = None
    evidence: str = ""            # echoes answered of sent, per question
    note: str = ""                # what was not checked, and why
    lossy: bool = False           # echoes were lost on a path that answered

    @property
    def ok(self) -> bool:
        return self.status == OK

    def as_results(self) -> dict:
        out = {"address": self.peer.public_ip, "subnet": self.peer.subnet,
               "gateway": self.gateway, "status": self.status}
        if self.peer.unit:
            out["unit"] = self.peer.unit
        if self.cause:
            out["cause"] = self.cause
        if self.largest is not None:
            out["largest-packet"] = str(self.largest)
        if self.evidence:
            out["echoes"] = self.evidence
        if self.note:
            out["note"] = self.note
        if self.status == GONE and self.peer.expires_in is not None:
            out["expires-in"] = str(self.peer.expires_in)
        return out


def gateway(peer: Peer, route: Optional[Route], vxlan_link: Optional[str]) -> str:
    """The address a probe through this node's route reaches on the peer:
    over vxlan its flannel.<VNI> (the lease's first address, which flanneld
    gives that device), else (host-gw, direct routing) the node itself."""
    if route is not None and route.overlay(vxlan_link):
        return str(ipaddress.ip_network(peer.subnet).network_address)
    return peer.public_ip


def duration(seconds: int) -> str:
    """"23 h 59 min" for a lease's time left."""
    hours, minutes = divmod(max(seconds, 0) // 60, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def mtu_advice(largest: int, ipv6: bool) -> str:
    """What to do about a vxlan path that carries at most `largest` bytes of
    a pod's packet: an mtu value the charm accepts, or why none fits."""
    if largest + VXLAN_OVERHEAD < MIN_MTU:
        return (f"the path is too narrow for vxlan: the smallest mtu the charm accepts, "
                f"{MIN_MTU}, gives pods {MIN_POD_MTU} bytes, and needs a path that carries "
                f"{MIN_MTU} bytes between the nodes; raise the network's MTU between them")
    if ipv6 and largest < IPV6_MIN_MTU:
        return (f"the path is too narrow for IPv6 pods, which need {IPV6_MIN_MTU} bytes: "
                f"it must carry {IPV6_MIN_MTU + VXLAN_OVERHEAD + 20} bytes between the nodes; "
                "raise the network's MTU between them")
    return f"set the mtu option to {largest + VXLAN_OVERHEAD} or less"


def diagnose(peer: Peer, probe: PathProbe, *, pod_mtu: int, vxlan_link: Optional[str],
             vxlan_port: int = 0) -> Finding:
    """The first thing wrong on the way to `peer`, or ok. A lease that no
    unit holds, where this node routes but the node's gateway never answers,
    is a removed node's (flannel's units name themselves beside their
    lease): gone, not broken."""
    found = _diagnose(peer, probe, pod_mtu=pod_mtu, vxlan_link=vxlan_link,
                      vxlan_port=vxlan_port)
    silent = probe.route is not None and probe.gateway.verdict(probe.node) is not Verdict.CROSSED
    if peer.unit is None and found.status in (BROKEN, UNSURE) and silent and \
            probe.fdb is not False and probe.neighbour is not False:
        left = (f"; etcd drops it in {duration(peer.expires_in)}"
                if peer.expires_in is not None else "")
        return Finding(peer, found.gateway, GONE,
                       "no flannel unit holds this lease and its node does not answer through "
                       f"flannel ({found.evidence}): a node removed, whose lease lives on{left} "
                       "(or a unit that has not named itself yet: each does at its first "
                       "update-status after leasing)", found.largest, found.evidence,
                       lossy=found.lossy)
    return found


def earlier_lease_of_this_node(peer: Peer) -> Finding:
    """A lease that names one of this node's own addresses but is not the
    one flanneld holds now: an earlier one (another network, another
    subnet length), left to expire. Not probed: it would be this node."""
    left = (f": etcd drops it in {duration(peer.expires_in)}"
            if peer.expires_in is not None else "")
    return Finding(peer, peer.public_ip, GONE,
                   f"an earlier lease of this node's own address {peer.public_ip}, not the "
                   f"one flanneld holds now{left}")


def _diagnose(peer: Peer, probe: PathProbe, *, pod_mtu: int, vxlan_link: Optional[str],
              vxlan_port: int) -> Finding:
    route = probe.route
    via = gateway(peer, route, vxlan_link)
    node = f"{peer.unit} ({peer.public_ip})" if peer.unit else peer.public_ip
    evidence = probe.evidence

    def finding(status: str, cause: str, note: str = "") -> Finding:
        return Finding(peer, via, status, cause, probe.largest, evidence, note, probe.lossy)

    def broken(cause: str) -> Finding:
        return finding(BROKEN, cause)

    def unsure(what: str) -> Finding:
        return finding(UNSURE, f"cannot tell: {what} ({evidence}); no cause is named on "
                               "echoes that chance could have lost: run check-network again")

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
    if not probe.steady:
        return unsure(f"the way to {node}: it fell silent for a while, the underlay too, "
                      "while it was asked")
    node_verdict = probe.node.verdict()
    gateway_verdict = probe.gateway.verdict(probe.node)
    if gateway_verdict is not Verdict.CROSSED:
        if node_verdict is Verdict.LOST:
            return broken(f"{node} does not answer on the underlay either: the machine is "
                          "down or the network between the nodes drops its traffic")
        if node_verdict is not Verdict.CROSSED or gateway_verdict is not Verdict.LOST:
            return unsure(f"whether {via} answers through the route to {peer.subnet}")
        if overlay:
            port = vxlan_port or DEFAULT_VXLAN_PORT
            return broken(f"vxlan traffic to {peer.public_ip} (UDP {port}) is dropped while "
                          "the node answers on the underlay: a firewall or the network "
                          f"blocks UDP {port} (VMware NSX drops 8472: set the port option), or "
                          f"flanneld on {node} is down")
        return broken(f"{via} does not answer through the route to {peer.subnet}")
    note = ""
    if not overlay:
        if probe.pod_path is None:
            note = ("pods' addresses on the wire not checked: this node holds no address of "
                    "its lease (no pod has started here, so cni0 holds no gateway)")
        else:
            pod_verdict = probe.pod_path.verdict(probe.gateway)
            if pod_verdict is Verdict.UNSURE:
                return unsure(f"whether packets between pod addresses cross to {node}")
            if pod_verdict is Verdict.LOST:
                how = ("host-gw" if peer.backend != VXLAN else "direct routing")
                return broken(
                    f"packets between pod addresses ({probe.pod_source} to {peer.pod_gateway})"
                    f" are dropped on the way to {node} while the nodes answer each other: "
                    f"{how} puts pods' addresses on the network between the nodes, and it "
                    "drops what is not a machine's own address (anti-spoofing, a cloud's "
                    "source/destination check: turn it off for the nodes' interfaces), or set "
                    + ("backend=vxlan" if peer.backend != VXLAN else "direct-routing=false")
                    + " to carry pods' packets inside vxlan")
    full = probe.full_size.verdict(probe.gateway)
    if full is Verdict.REFUSED:
        return broken(f"a packet of the pods' MTU ({pod_mtu} bytes) is refused here: "
                      f"{route.dev}'s MTU is smaller than the pods' (restart flanneld)")
    if full is Verdict.UNSURE or (full is Verdict.LOST and not probe.edge_confirmed):
        return unsure(f"whether packets of the pods' MTU ({pod_mtu} bytes) reach {node}")
    if full is Verdict.LOST and probe.largest is not None:
        ipv6 = ":" in peer.subnet
        fix = mtu_advice(probe.largest, ipv6) if overlay else \
            f"lower {route.dev}'s MTU on every node to what the path carries"
        return broken(f"MTU black hole: packets up to {probe.largest} bytes reach {node}, "
                      f"larger ones up to the pods' MTU of {pod_mtu} are lost without an "
                      f"error: the path is narrower than flannel's MTU ({fix})")
    if probe.too_large_refused is False:
        return broken(f"a packet of {pod_mtu + 1} bytes (over the pods' MTU of {pod_mtu}) "
                      f"left for {node} instead of being refused here: {route.dev}'s MTU is "
                      "larger than the pods' (restart flanneld)")
    return finding(OK, "", note)


def largest_crossing(crosses, low: int, high: int) -> Optional[int]:
    """The largest size in [low, high] for which crosses(size) is True,
    assuming it holds for every size below some limit and for none above
    (binary search; low is taken to cross). About log2(high - low) probes.
    crosses() answers None when it cannot tell: the search gives up (None)."""
    while low < high:
        middle = (low + high + 1) // 2
        answer = crosses(middle)
        if answer is None:
            return None
        if answer:
            low = middle
        else:
            high = middle - 1
    return low


def summary(findings: list[Finding], own_problems: list[str]) -> str:
    """One line for the action's result and its failure message."""
    parts = list(own_problems)
    parts += [f"{f.peer.unit or f.peer.public_ip}: {f.cause}" for f in findings
              if f.status == BROKEN]
    if parts:
        return "; ".join(parts)
    checked = [f for f in findings if f.status != GONE]
    unsure = [f for f in checked if f.status == UNSURE]
    gone = [f for f in findings if f.status == GONE]
    if not findings:
        line = "no other node holds a lease: nothing to check"
    elif unsure:
        line = "cannot tell for {}: echoes were lost, and no cause is named on echoes " \
               "chance could have lost (run it again)".format(
                   ", ".join(f"{f.peer.unit or f.peer.public_ip} ({f.evidence})"
                             for f in unsure))
    else:
        line = f"every node reachable: {len(checked)} checked"
        lossy = [f for f in checked if f.lossy]
        if lossy:
            line += " (echoes lost on the way to {}, none beyond chance)".format(
                ", ".join(f.peer.unit or f.peer.public_ip for f in lossy))
    if gone:
        line += "; {} of nodes gone, held by no unit: {}".format(
            "a lease" if len(gone) == 1 else f"{len(gone)} leases",
            ", ".join(f.peer.subnet + (f" (etcd drops it in {duration(f.peer.expires_in)})"
                                       if f.peer.expires_in is not None else "")
                      for f in gone))
    return line
