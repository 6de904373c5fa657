"""cni0, the pods' bridge, through its life on a node.

The flannel CNI plugin delegates to the bridge plugin, which makes `cni0`
for the first pod and puts this node's lease gateway on it ("10.1.52.1/24",
and with dual-stack "fd10:1:0:5::1/64"). The bridge plugin refuses a pod
when cni0 already holds another IPv4 address, or an IPv6 address whose
network overlaps the gateway's (containernetworking/plugins bridge.go
ensureAddr, v1.1: '"cni0" already has an IP address different from
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

Reading asks the kernel (`ip -j`); functions take the command runner
(`run(argv) -> stdout`) so that tests run them in a network namespace.
"""
from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

POD_BRIDGE = "cni0"
SYS_CLASS_NET = Path("/sys/class/net")
HOST_LOCAL_TABLES = Path("/var/lib/cni/networks")
LAST_RESERVED = "last_reserved_ip."

Run = Callable[[list], str]
Address = ipaddress.IPv4Interface | ipaddress.IPv6Interface
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def run_command(argv: list) -> str:
    """Run a command on this machine; its stdout (a failure raises)."""
    return subprocess.run([str(a) for a in argv], check=True, capture_output=True,
                          text=True, timeout=60).stdout


@dataclass(frozen=True)
class Bridge:
    """What the kernel shows of the bridge: its global addresses (the
    kernel's link-local IPv6 address is never a gateway) and its MTU."""
    name: str
    addresses: tuple = ()     # (Address, ...)
    mtu: Optional[int] = None


def exists(name: str = POD_BRIDGE, sys_net: Path = SYS_CLASS_NET) -> bool:
    """A stat, for hooks that only look when there is a bridge."""
    return (sys_net / name).exists()


def read_bridge(name: str = POD_BRIDGE, run: Run = run_command) -> Optional[Bridge]:
    """The bridge as `ip -j addr show dev NAME` shows it; None if there is none."""
    try:
        shown = json.loads(run(["ip", "-j", "addr", "show", "dev", name]) or "[]")
    except subprocess.CalledProcessError:
        return None
    if not shown:
        return None
    addresses = []
    for entry in shown[0].get("addr_info", []):
        if entry.get("family") not in ("inet", "inet6") or "local" not in entry:
            continue
        if entry.get("scope") == "link":
            continue
        address = ipaddress.ip_interface(f"{entry['local']}/{entry.get('prefixlen', '')}"
                                         .rstrip("/"))
        if address.version == 6 and address.ip.is_link_local:
            continue
        addresses.append(address)
    return Bridge(name=name, addresses=tuple(addresses), mtu=shown[0].get("mtu"))


def ports(name: str = POD_BRIDGE, run: Run = run_command) -> Optional[list[str]]:
    """The links enslaved to the bridge (the pods' veths), None if no such bridge."""
    try:
        run(["ip", "-j", "link", "show", "dev", name])
    except subprocess.CalledProcessError:
        return None
    shown = json.loads(run(["ip", "-j", "link", "show", "master", name]) or "[]")
    return sorted(link.get("ifname", "") for link in shown)


def delete_address(address: Address, name: str = POD_BRIDGE, run: Run = run_command) -> bool:
    """Take an address off the bridge; False if it was not there (or the
    bridge is gone)."""
    try:
        run(["ip", "addr", "del", str(address), "dev", name])
    except subprocess.CalledProcessError:
        return False
    return True


def set_mtu(mtu: int, name: str = POD_BRIDGE, run: Run = run_command) -> bool:
    """The bridge plugin sets the bridge's MTU only when it creates it; a
    bridge left smaller than the pods turns their large packets from other
    nodes away ("fragmentation needed"). False if the kernel refused."""
    try:
        run(["ip", "link", "set", "dev", name, "mtu", str(mtu)])
    except subprocess.CalledProcessError:
        return False
    return True


def delete(name: str = POD_BRIDGE, run: Run = run_command) -> None:
    run(["ip", "link", "delete", name])


# --- whose an address is ------------------------------------------------------------

@dataclass(frozen=True)
class FlannelsMarks:
    """What shows an address on the bridge is flannel's: the pod networks
    flannel served on this node, and the addresses host-local handed out on
    flannel's CNI network."""
    networks: tuple = ()      # (Network, ...)
    handed_out: tuple = ()    # (IPv4Address | IPv6Address, ...)

    def covers(self, address: Address) -> bool:
        return (any(address.version == network.version and address.ip in network
                    for network in self.networks)
                or any(given.version == address.version and given in address.network
                       for given in self.handed_out))

    def with_handed_out(self, handed_out: Iterable) -> "FlannelsMarks":
        return FlannelsMarks(self.networks, tuple(handed_out))


def handed_out(network_name: str, tables_dir: Path = HOST_LOCAL_TABLES) -> tuple:
    """The addresses host-local's table of flannel's CNI network names: one
    file per pod address, and the last address it reserved in each range
    (kept after the pods are gone)."""
    table = tables_dir / network_name
    if not network_name or network_name in (".", "..") or "/" in network_name:
        return ()
    try:
        entries = os.listdir(table)
    except OSError:
        return ()
    found = []
    for entry in entries:
        text = entry
        if entry.startswith(LAST_RESERVED):
            try:
                text = (table / entry).read_text().strip()
            except OSError:
                continue
        try:
            found.append(ipaddress.ip_address(text))
        except ValueError:
            continue
    return tuple(found)


def blocks(address: Address, gateway: Address) -> bool:
    """Whether the bridge plugin refuses to put `gateway` on a bridge that
    holds `address` (bridge.go ensureAddr): any other IPv4 address, an IPv6
    address whose network overlaps the gateway's."""
    if address.version != gateway.version or address == gateway:
        return False
    return address.version == 4 or address.network.overlaps(gateway.network)


@dataclass(frozen=True)
class Verdict:
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
        elif any(blocks(address, gateway) for gateway in gateways):
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

@dataclass(frozen=True)
class Settled:
    """What settle_on_lease did: the addresses it took off, those it could
    not (gone meanwhile, or refused), and the foreign ones it left."""
    removed: tuple = ()
    failed: tuple = ()
    foreign: tuple = ()

    @property
    def problem(self) -> Optional[str]:
        return foreign_problem(POD_BRIDGE, self.foreign)


@dataclass(frozen=True)
class BeforeStart:
    """What settle_before_start did: the addresses it took off, and the
    bridge's MTU set anew as (old, new), if it was."""
    removed: tuple = ()
    mtu: Optional[tuple] = None

    def __bool__(self) -> bool:
        return bool(self.removed or self.mtu)


def settle_before_start(marks: FlannelsMarks, network_name: Callable[[], str], *,
                        kept: Iterable[Address] = (), dropped: Iterable[Address] = (),
                        could_be_gateway: Callable[[Address], bool] = lambda address: False,
                        pod_mtu: Optional[int] = None, name: str = POD_BRIDGE,
                        run: Run = run_command,
                        tables_dir: Path = HOST_LOCAL_TABLES) -> BeforeStart:
    """While flanneld is stopped, before it starts on a network config:
    `kept`, the gateways of the lease subnet.env names when it fits the
    config (flanneld takes that lease again), stay; `dropped`, those of a
    subnet.env that no longer fits, go. With no lease kept, the coming one
    is unknown: on a bridge no pod uses every flannel address goes (the
    bridge plugin puts the gateway on for the next pod); with pods on it,
    those that `could_be_gateway` in the config stay for them (flanneld may
    lease that subnet again; settle_on_lease decides once it has). The
    bridge's MTU follows `pod_mtu` when known."""
    bridge = read_bridge(name, run)
    if bridge is None:   # no pod yet
        return BeforeStart()
    kept, dropped = tuple(kept), tuple(dropped)
    if not all(marks.covers(address) for address in bridge.addresses):
        marks = marks.with_handed_out(handed_out(network_name(), tables_dir))
    attached = None

    def may_stay(address: Address) -> bool:
        nonlocal attached
        if kept or address in dropped or not could_be_gateway(address):
            return False
        if attached is None:
            attached = bool(ports(name, run))
        return attached

    verdict = judge(bridge, marks, kept, may_stay)
    removed = tuple(address for address in verdict.stale if delete_address(address, name, run))
    mtu = None
    if pod_mtu is not None and bridge.mtu is not None and bridge.mtu != pod_mtu:
        # (a refusal leaves the bridge as it was: new pods still start)
        if set_mtu(pod_mtu, name, run):
            mtu = (bridge.mtu, pod_mtu)
    return BeforeStart(removed=removed, mtu=mtu)


def settle_on_lease(gateways: Iterable[Address], marks: FlannelsMarks,
                    network_name: Callable[[], str], *, name: str = POD_BRIDGE,
                    run: Run = run_command, tables_dir: Path = HOST_LOCAL_TABLES) -> Settled:
    """With flanneld on its lease: every flannel address on the bridge but
    the lease's gateways goes, so that the bridge plugin takes the gateway
    for the next pod (pods of the old subnet cannot reach other nodes any
    more; they are recreated). `network_name()` gives flannel's CNI network
    name, asked only when an address is not covered by the pod networks."""
    bridge = read_bridge(name, run)
    if bridge is None:
        return Settled()
    if not all(marks.covers(address) for address in bridge.addresses):
        marks = marks.with_handed_out(handed_out(network_name(), tables_dir))
    verdict = judge(bridge, marks, gateways)
    removed, failed = [], []
    for address in verdict.stale:
        (removed if delete_address(address, name, run) else failed).append(address)
    return Settled(removed=tuple(removed), failed=tuple(failed), foreign=verdict.foreign)
