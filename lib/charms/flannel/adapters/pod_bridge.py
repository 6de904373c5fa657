"""cni0, the pods' bridge, through its life on a node.

The flannel CNI plugin delegates to the bridge plugin, which makes `cni0`
for the first pod and puts this node's lease gateway on it ("10.1.52.1/24",
and with dual-stack "fd10:1:0:5::1/64"). The bridge plugin refuses a pod
when cni0 holds, before the gateway in the kernel's order (or without the
gateway), another IPv4 address, 169.254.x.y included, or an IPv6 address
whose network overlaps the gateway's (containernetworking/plugins bridge.go
ensureAddr, v1.1 to v1.9: '"cni0" already has an IP address different from
10.1.48.1/24'): a gateway left from an earlier lease stops every new pod on
the node. Whatever made flanneld's lease change (a lease that expired while
flannel was away, a network change, etcd rebuilt, subnet.env lost, a refresh
from an older flanneld), this module takes flannel's old gateways off cni0,
and never an address that is not flannel's.

An address is flannel's when a pod network flannel served on the node covers
it, or when its network holds an address host-local handed out on flannel's
CNI network (its table /var/lib/cni/networks/<name> keeps them, and
`last_reserved_ip.N`, after the pods are gone): a unit added back after a
removal knows the network etcd holds now, not the one the node served then.

Reading asks the kernel (`ip -j`) through the Machine, so that tests run
this in a network namespace. Once no pod is left on the bridge, removing
flannel takes the bridge away too (remove_idle): the next CNI may well name
its bridge cni0, and the bridge plugin refuses a bridge holding another
network's address.
"""
from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Optional, Sequence

from ..facts.cni_config import valid_network_name
from ..facts.netconfig import Address
from . import node_files
from .machine import Machine

POD_BRIDGE = "cni0"


class Bridge(NamedTuple):
    """What the kernel shows of the bridge: its addresses in the kernel's
    order (the bridge plugin's order too), IPv4 link-local ones included
    (169.254.x.y, which avahi-autoipd or systemd-networkd may add), IPv6
    link-local ones not (fe80::/64 never overlaps a gateway); and its MTU."""
    name: str
    addresses: tuple = ()     # (Address, ...)
    mtu: Optional[int] = None


def exists(sys_class_net: Path, name: str = POD_BRIDGE) -> bool:
    """A stat, for hooks that only look when there is a bridge."""
    return (sys_class_net / name).exists()


def read_bridge(machine: Machine, name: str = POD_BRIDGE) -> Optional[Bridge]:
    """The bridge as `ip -j addr show dev NAME` shows it; None if there is none."""
    try:
        shown = json.loads(machine.output(["ip", "-j", "addr", "show", "dev", name]) or "[]")
    except subprocess.CalledProcessError:
        return None
    if not shown:
        return None
    addresses = []
    for entry in shown[0].get("addr_info", []):
        if entry.get("family") not in ("inet", "inet6") or "local" not in entry:
            continue
        address = ipaddress.ip_interface(f"{entry['local']}/{entry.get('prefixlen', '')}"
                                         .rstrip("/"))
        if address.version == 6 and address.ip.is_link_local:
            continue
        addresses.append(address)
    return Bridge(name=name, addresses=tuple(addresses), mtu=shown[0].get("mtu"))


def ports(machine: Machine, name: str = POD_BRIDGE) -> Optional[list[str]]:
    """The links enslaved to the bridge (the pods' veths), None if no such bridge."""
    try:
        machine.output(["ip", "-j", "link", "show", "dev", name])
    except subprocess.CalledProcessError:
        return None
    shown = json.loads(machine.output(["ip", "-j", "link", "show", "master", name]) or "[]")
    return sorted(link.get("ifname", "") for link in shown)


def delete_address(machine: Machine, address: Address, name: str = POD_BRIDGE) -> bool:
    """Take an address off the bridge; False if it was not there (or the
    bridge is gone)."""
    try:
        machine.output(["ip", "addr", "del", str(address), "dev", name])
    except subprocess.CalledProcessError:
        return False
    return True


def set_mtu(machine: Machine, mtu: int, name: str = POD_BRIDGE) -> bool:
    """The bridge plugin sets the bridge's MTU only when it creates it; a
    bridge left smaller than the pods turns their large packets from other
    nodes away ("fragmentation needed"). False if the kernel refused."""
    try:
        machine.output(["ip", "link", "set", "dev", name, "mtu", str(mtu)])
    except subprocess.CalledProcessError:
        return False
    return True


# --- whose an address is ------------------------------------------------------------

class FlannelsMarks(NamedTuple):
    """What shows an address on the bridge is flannel's: the pod networks
    flannel served on this node, and the addresses host-local handed out on
    flannel's CNI network."""
    networks: tuple = ()      # (IPv4Network | IPv6Network, ...)
    handed_out: tuple = ()    # (IPv4Address | IPv6Address, ...)

    def covers(self, address: Address) -> bool:
        return (any(address.version == network.version and address.ip in network
                    for network in self.networks)
                or any(given.version == address.version and given in address.network
                       for given in self.handed_out))

    def with_handed_out(self, handed_out: Iterable) -> "FlannelsMarks":
        return FlannelsMarks(self.networks, tuple(handed_out))


def blocks(address: Address, gateway: Address, held: Sequence[Address] = ()) -> bool:
    """Whether the bridge plugin refuses to put `gateway` on a bridge that
    holds `address` (bridge.go ensureAddr, v1.1 to v1.9): it reads the
    bridge's addresses of the gateway's family in the kernel's order
    (`held`), is done at the gateway itself, and refuses at the first
    other IPv4 address or IPv6 address whose network overlaps the
    gateway's. So an address listed after the gateway stops nothing while
    the gateway is there. (The kernel lists an IPv4 address of scope link
    before those of scope global, whenever it was added.)"""
    if address.version != gateway.version or address == gateway:
        return False
    if gateway in held and address in held and held.index(gateway) < held.index(address):
        return False
    return address.version == 4 or address.network.overlaps(gateway.network)


class Verdict(NamedTuple):
    """flannel's addresses to take off the bridge, and the addresses that
    are not flannel's and stop the bridge plugin taking the gateway."""
    stale: tuple = ()
    foreign: tuple = ()


def judge(bridge: Bridge, marks: FlannelsMarks, gateways: Iterable[Address] = (),
          may_stay: Callable[[Address], bool] = lambda address: False) -> Verdict:
    """`gateways`: the lease's, which stay (none while the coming lease is
    unknown); `may_stay(address)`: a flannel address kept although it is no
    gateway of the lease (one that running pods use and flanneld may lease
    again)."""
    gateways = tuple(gateways)
    stale, foreign = [], []
    for address in bridge.addresses:
        if address in gateways:
            continue
        if marks.covers(address):
            if not may_stay(address):
                stale.append(address)
        elif any(blocks(address, gateway, bridge.addresses) for gateway in gateways):
            foreign.append(address)
    return Verdict(stale=tuple(stale), foreign=tuple(foreign))


def foreign_problem(bridge: str, foreign: Iterable[Address]) -> Optional[str]:
    """The status naming addresses that stop every new pod and are not
    flannel's to remove; None if there are none."""
    foreign = [str(address) for address in foreign]
    if not foreign:
        return None
    return (f"{bridge} holds {', '.join(foreign)}, which is not flannel's: the bridge plugin "
            f"refuses every new pod until it goes (ip addr del {foreign[0]} dev {bridge})")


# --- steps ----------------------------------------------------------------------------

class Settled(NamedTuple):
    """What settle_on_lease did: the addresses it took off, those it could
    not (gone meanwhile, or refused), and the foreign ones it left."""
    removed: tuple = ()
    failed: tuple = ()
    foreign: tuple = ()

    @property
    def problem(self) -> Optional[str]:
        return foreign_problem(POD_BRIDGE, self.foreign)


class BeforeStart(NamedTuple):
    """What settle_before_start did: the addresses it took off, and the
    bridge's MTU set anew as (old, new), if it was."""
    removed: tuple = ()
    mtu: Optional[tuple] = None

    def __bool__(self) -> bool:
        return bool(self.removed or self.mtu)


def settle_before_start(marks: FlannelsMarks, network_name: Callable[[], str], *,
                        kept: Iterable[Address] = (), dropped: Iterable[Address] = (),
                        could_be_gateway: Callable[[Address], bool] = lambda address: False,
                        pod_mtu: Optional[int] = None, machine: Machine,
                        tables_dir: Path, name: str = POD_BRIDGE) -> BeforeStart:
    """While flanneld is stopped, before it starts on a network config:
    `kept`, the gateways of the lease subnet.env names when it fits the
    config (flanneld takes that lease again), stay; `dropped`, those of a
    subnet.env that no longer fits, go. With no lease kept, the coming one
    is unknown: on a bridge no pod uses every flannel address goes (the
    bridge plugin puts the gateway on for the next pod); with pods on it,
    those that `could_be_gateway` in the config stay for them (flanneld may
    lease that subnet again; settle_on_lease decides once it has). The
    bridge's MTU follows `pod_mtu` when known."""
    bridge = read_bridge(machine, name)
    if bridge is None:   # no pod yet
        return BeforeStart()
    kept, dropped = tuple(kept), tuple(dropped)
    if not all(marks.covers(address) for address in bridge.addresses):
        marks = marks.with_handed_out(node_files.handed_out(network_name(), tables_dir))
    attached = None

    def may_stay(address: Address) -> bool:
        nonlocal attached
        if kept or address in dropped or not could_be_gateway(address):
            return False
        if attached is None:
            attached = bool(ports(machine, name))
        return attached

    verdict = judge(bridge, marks, kept, may_stay)
    removed = tuple(address for address in verdict.stale
                    if delete_address(machine, address, name))
    mtu = None
    if pod_mtu is not None and bridge.mtu is not None and bridge.mtu != pod_mtu:
        # (a refusal leaves the bridge as it was: new pods still start)
        if set_mtu(machine, pod_mtu, name):
            mtu = (bridge.mtu, pod_mtu)
    return BeforeStart(removed=removed, mtu=mtu)


def settle_on_lease(gateways: Iterable[Address], marks: FlannelsMarks,
                    network_name: Callable[[], str], *, machine: Machine, tables_dir: Path,
                    name: str = POD_BRIDGE) -> Settled:
    """With flanneld on its lease: every flannel address on the bridge but
    the lease's gateways goes, so that the bridge plugin takes the gateway
    for the next pod (pods of the old subnet cannot reach other nodes any
    more; they are recreated). `network_name()` gives flannel's CNI network
    name, asked only when an address is not covered by the pod networks."""
    bridge = read_bridge(machine, name)
    if bridge is None:
        return Settled()
    if not all(marks.covers(address) for address in bridge.addresses):
        marks = marks.with_handed_out(node_files.handed_out(network_name(), tables_dir))
    verdict = judge(bridge, marks, gateways)
    removed, failed = [], []
    for address in verdict.stale:
        (removed if delete_address(machine, address, name) else failed).append(address)
    return Settled(removed=tuple(removed), failed=tuple(failed), foreign=verdict.foreign)


def remove_idle(machine: Machine, networks: Iterable, network_name: str, tables_dir: Path,
                name: str = POD_BRIDGE) -> list[str]:
    """With no pod left on the bridge: delete it if it is flannel's (an
    address of flannel's on it: `networks`, the pod networks it served,
    or host-local's table of flannel's `network_name`), and that table if
    it holds no address. Returns what went, for the log; nothing while a
    pod is attached."""
    attached = ports(machine, name)
    if attached:
        return []
    removed = []
    if attached is not None:
        shown = read_bridge(machine, name)
        marks = FlannelsMarks(networks=tuple(networks),
                              handed_out=node_files.handed_out(network_name, tables_dir))
        if shown is not None and any(marks.covers(address) for address in shown.addresses):
            machine.output(["ip", "link", "delete", name])
            removed.append(f"bridge {name}")
    table = tables_dir / network_name
    if valid_network_name(network_name) and table.is_dir():
        if not node_files.pod_addresses_in(table):
            shutil.rmtree(table, ignore_errors=True)
            removed.append(f"host-local table {table}")
    return removed
