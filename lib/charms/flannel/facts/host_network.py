"""The machine's own networks and interfaces: what the options must fit.

A pod network that overlaps a network the machine is attached to, routes to,
or the Kubernetes service network sends that traffic to pods (or pods'
traffic nowhere): flanneld takes any cidr, so the charm refuses it first. An
`iface` flanneld cannot carry the overlay on (down, loopback, without an IPv4
address, an IPv6 address) makes flanneld fail or, worse, run on a dead link:
refused before flanneld is restarted.

Both checks are pure functions of `ip -j` output (adapters/links.py reads
it), so tests give them a real machine's or a written one; each returns the
InvalidOption the unit shows as blocked, or None. Also here: which
interface a `network-get` binding means, and which routes are flanneld's.
"""
from __future__ import annotations

import ipaddress
from typing import Callable, Iterable, NamedTuple, Optional, Sequence

from .netconfig import IPV6_MIN_MTU
from .options import InvalidOption

# Devices whose addresses and routes are flannel's or its pods' own.
FLANNEL_DEVICE_PREFIXES = ("flannel.", "flannel-v6.", "cni0", "veth")


class Link(NamedTuple):
    name: str
    up: bool          # administratively up with carrier (operstate UP/UNKNOWN)
    loopback: bool
    addresses: tuple  # ipaddress.IPv4Interface / IPv6Interface, scope global/host
    mtu: int = 0      # 0: not reported


def links_from(addr_show: Iterable[dict]) -> list[Link]:
    """Links from `ip -j addr show` entries."""
    links = []
    for entry in addr_show:
        flags = entry.get("flags", [])
        state = entry.get("operstate", "UNKNOWN")
        addresses = []
        for info in entry.get("addr_info", []):
            if "local" in info and info.get("scope") != "link":
                addresses.append(ipaddress.ip_interface(f"{info['local']}/{info['prefixlen']}"))
        links.append(Link(
            name=entry.get("ifname", ""),
            up="UP" in flags and state in ("UP", "UNKNOWN") and "NO-CARRIER" not in flags,
            loopback="LOOPBACK" in flags or entry.get("link_type") == "loopback",
            addresses=tuple(addresses),
            mtu=int(entry.get("mtu") or 0)))
    return links


def _flannels(device: str) -> bool:
    return device.startswith(FLANNEL_DEVICE_PREFIXES)


def machine_networks(links: Iterable[Link], routes: Iterable[dict],
                     pod_networks: Sequence = (), version: int = 4) -> list[tuple]:
    """The networks of one IP version this machine is attached to or routes
    to, each with where it comes from, for an operator, and whether the
    machine is on it (attached) or routes to it: the default route and
    flannel's own (its devices, the pod networks it serves now) left out."""
    def ours(network) -> bool:
        return any(network.version == pod.version and network.subnet_of(pod)
                   for pod in pod_networks)

    found: dict = {}   # network -> (where, attached)
    for link in links:
        if _flannels(link.name):
            continue
        for address in link.addresses:
            if address.version == version and not ours(address.network) and not link.loopback:
                found.setdefault(address.network,
                                 (f"the network of {link.name} ({address})", True))
    for route in routes:
        dst, dev = route.get("dst", ""), route.get("dev", "")
        if dst in ("", "default") or _flannels(dev) or route.get("type") in (
                "local", "broadcast", "multicast"):
            continue
        try:
            network = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if network.version != version or network.prefixlen == 0 or ours(network):
            continue
        via = f" via {route['gateway']}" if route.get("gateway") else ""
        found.setdefault(network, (f"a route of this machine ({dst}{via} dev {dev})", False))
    return [(network, where, attached) for network, (where, attached) in
            sorted(found.items(), key=lambda item: (item[0].network_address, item[0].prefixlen))]


def cidr_conflict(cidr, networks: Iterable[tuple], service_cidr: Optional[str] = None,
                  option: str = "cidr") -> Optional[InvalidOption]:
    """Why `cidr` (IPv4, or IPv6 for `option` ipv6-cidr) cannot be the pod
    network here, or None: it overlaps a network the machine is on, or
    covers one it routes to (a route wider than the cidr, a VPN's
    10.0.0.0/8 say, loses to flannel's longer prefixes and breaks nothing),
    or the service-cidr of its family (a dual-stack one is "v4,v6")."""
    for network, where, attached in networks:
        if network.version != cidr.version:
            continue
        if cidr.overlaps(network) and (attached or network.subnet_of(cidr)):
            return InvalidOption(
                option, f"{cidr} overlaps {network}, {where}; use a range this "
                        "machine neither is on nor routes to")
    for item in (service_cidr or "").split(","):
        try:
            service = ipaddress.ip_network(item.strip(), strict=False)
        except ValueError:
            continue
        if service.version == cidr.version and cidr.overlaps(service):
            return InvalidOption(
                option, f"{cidr} overlaps the Kubernetes service-cidr {service} the "
                        "control plane publishes; use a range outside it")
    return None


def find_link(iface: str, links: Iterable[Link]) -> Optional[Link]:
    """The link `iface` names (a link name, or an address one holds)."""
    try:
        address = ipaddress.ip_address(iface)
    except ValueError:
        return next((link for link in links if link.name == iface), None)
    return next((link for link in links if any(a.ip == address for a in link.addresses)),
                None)


def iface_problem(iface: str, links: Iterable[Link], ipv4: bool = True,
                  ipv6: bool = False) -> Optional[InvalidOption]:
    """Why flanneld cannot carry the overlay on `iface` (a link name or an
    address of one), or None. IPv6-only (not `ipv4`), an IPv6 address of it
    is what flanneld sends from (ipv6_problem checks it has one), and an
    IPv4 address names no interface to flanneld (it exits: "no interface
    with given IPv6 found")."""
    links = list(links)
    try:
        address = ipaddress.ip_address(iface)
    except ValueError:
        address = None
    if address is not None and address.version == 6 and ipv4:
        return InvalidOption("iface", f'"{iface}" is an IPv6 address; flannel carries '
                                      "its overlay over IPv4: give an IPv4 address or "
                                      "an interface name")
    if address is not None and address.version == 4 and not ipv4 and ipv6:
        return InvalidOption("iface", f'"{iface}" is an IPv4 address; IPv6-only (cidr "") '
                                      "flanneld sends from an IPv6 address: give one of this "
                                      "machine's IPv6 addresses or an interface name")
    link = find_link(iface, links)
    if link is None:
        what = "an address" if address is not None else "an interface"
        return InvalidOption("iface", f'"{iface}" is not {what} of this machine')
    if link.loopback or (address is not None and address.is_loopback):
        return InvalidOption("iface", f'"{iface}" is the loopback interface; use one '
                                      "that reaches the other machines")
    if not link.up:
        return InvalidOption("iface", f'"{iface}" is down ({link.name} has no carrier '
                                      "or is not up); bring it up or choose another")
    if ipv4 and not any(a.version == 4 for a in link.addresses):
        return InvalidOption("iface", f'"{iface}" has no IPv4 address; flanneld needs '
                                      "one to reach the other machines")
    return None


def ipv6_problem(link: Optional[Link]) -> Optional[InvalidOption]:
    """Why flanneld cannot carry IPv6 pod traffic on `link` (its interface),
    or None: it sends to the other nodes from a global IPv6 address of the
    interface (a unique local one will do), and with none it either exits
    or falls back to the link-local address, which no other subnet reaches."""
    if link is None or any(a.version == 6 for a in link.addresses):
        return None
    return InvalidOption("ipv6-cidr", f"IPv6 needs a global IPv6 address on {link.name}, "
                                      "which flanneld sends on, and it has none; give it one, "
                                      'set iface to one that has, or set ipv6-cidr to ""')


def ipv6_mtu_problem(config, link: Link) -> Optional[InvalidOption]:
    """Why IPv6 pods on `link` (flanneld's interface) would get less than
    IPv6's 1280 bytes (Linux takes IPv6 off a device below it), or None:
    over vxlan their MTU is what flannel-v6.<VNI> carries on that link
    (NetworkConfig.pods_mtu)."""
    pods = config.pods_mtu(link.mtu or None)
    if pods is None or pods >= IPV6_MIN_MTU:
        return None
    need = link.mtu + IPV6_MIN_MTU - pods
    return InvalidOption("ipv6-cidr", f"IPv6 pods would get {pods} bytes over {link.name} "
                                      f"(MTU {link.mtu}), less than IPv6's {IPV6_MIN_MTU}: give "
                                      f"{link.name} an MTU of at least {need}, set iface to a "
                                      'larger one, or set ipv6-cidr to ""')


def no_interface_problem(options, iface: str) -> Optional[InvalidOption]:
    """flanneld's interface cannot be found (no `cni` binding names one and
    the machine has no default route; or the one named is not there): what
    needs it (an mtu, IPv6) cannot be checked, and flanneld would not start."""
    needs = "mtu" if options.mtu else "ipv6-cidr"
    where = f'"{iface}" is not an interface of this machine' if iface else \
        "no cni binding names an interface and this machine has no default route"
    return InvalidOption("iface", f"flanneld's interface cannot be found ({where}), so "
                                  f"{needs} cannot be checked against it and flanneld would not "
                                  "start; set iface")


def mtu_problem(mtu: int, link: Optional[Link]) -> Optional[InvalidOption]:
    """Why vxlan packets of `mtu` bytes cannot leave on `link` (flanneld's
    interface), or None: bigger than the link, they are fragmented or
    dropped on the way, and pods see large transfers stall."""
    if not mtu or link is None or not link.mtu or mtu <= link.mtu:
        return None
    return InvalidOption("mtu", f"{mtu} is more than the MTU of {link.name} ({link.mtu}), "
                                "which flanneld sends vxlan packets on; use at most "
                                f"{link.mtu}, or 0 for the interface's")


def binding_interface(bind_addresses: Iterable[dict], default_route: Callable[[], str]) -> str:
    """The interface of a `network-get` binding flanneld should use: the
    first one that is not a fan bridge (`fan-*`: Juju's fan overlay, which
    flannel's vxlan cannot ride), else the default route's interface (as the
    old charm did); "" when there is neither (flanneld then picks one)."""
    for bound in bind_addresses:
        name = bound.get("interface-name") or bound.get("interfacename") or ""
        if name and not name.startswith("fan-"):
            return name
    return default_route()


def pod_network_routes(routes: Iterable[dict], networks: Iterable[tuple],
                       bridge: str = "cni0") -> list[dict]:
    """The routes (`ip -j route show` entries) that are flanneld's: to one
    node's subnet of a pod network (the network's subnet length, inside
    it), not through the pods' own bridge. networks: (network, subnet_len)."""
    nets = list(networks)
    out = []
    for route in routes:
        dst = route.get("dst", "")
        if dst in ("", "default") or route.get("dev") == bridge:
            continue
        try:
            prefix = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if any(prefix.version == n.version and prefix.subnet_of(n) and prefix.prefixlen == length
               for n, length in nets):
            out.append(route)
    return out


def on_link(address: str, link: Link) -> bool:
    """Whether `address` is on a network of `link`'s addresses (reachable
    without a router, as host-gw's next hops must be)."""
    try:
        wanted = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(wanted in held.network for held in link.addresses)


def unrouted_subnets(subnets: Iterable[str], own: Optional[str], destinations: Iterable[str]
                     ) -> tuple:
    """The leased subnets ("10.1.7.0/24") but this node's own that no route
    of this node leads to (`destinations`: its IPv4 routes' "10.1.7.0/24"). flanneld routes
    every other node's subnet (vxlan through flannel.<VNI>, host-gw and
    direct routing through the interface) as it hears of the lease; one it
    never heard of stays unreachable from this node's pods. flanneld v0.27.4
    misses the next lease events after a lease of the other IPv6 shape goes
    (seen when IPv6 is turned on or off: a node keeps the route to another's
    old lease and never gets one to its new lease)."""
    destinations = set(destinations)
    return tuple(s for s in subnets if s != own and s not in destinations)
