"""flanneld as a running thing: its version, its inputs, its vxlan link,
and what a change of network leaves behind (the pods' bridge address, the
old subnet.env)."""
from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

from . import pod_bridge
from .options import VXLAN_OVERHEAD
from .subnet import SubnetEnv, read_subnet_env

# vxlan over IPv6 costs 20 bytes more: Linux caps flannel-v6.<VNI> at its
# interface's MTU less 70, below the MTU flanneld asks for (FLANNEL_MTU).
VXLAN_V6_EXTRA_OVERHEAD = 20

VXLAN_LINK = "flannel.1"   # with the default VNI 1
_FLANNEL_VXLAN = re.compile(r"flannel(-v6)?\.\d+")
_VERSION = re.compile(r"v?\d+\.\d+\.\d+[\w.+-]*")


def flanneld_version(binary: Path, timeout: float = 10.0) -> Optional[str]:
    """The version `flanneld -version` prints (it prints to stderr), or None."""
    try:
        done = subprocess.run([str(binary), "-version"], capture_output=True,
                              text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _VERSION.search(done.stdout + done.stderr)
    return match.group(0) if match else None


# flannel before v0.18 kept its network in etcd's v2 keyspace and wrote its
# --ip-masq and forward rules straight into POSTROUTING and FORWARD
V2_ERA_BEFORE = (0, 18)


def of_the_v2_era(version: Optional[str]) -> bool:
    """Whether a flanneld version ("v0.11.0") is of etcd v2's era."""
    match = re.match(r"v?(\d+)\.(\d+)", version or "")
    return bool(match) and (int(match.group(1)), int(match.group(2))) < V2_ERA_BEFORE


def inputs_digest(checksums: Iterable[Optional[str]], network_config: dict) -> str:
    """One digest of everything flanneld reads at start.

    flanneld must restart when any input changes and only then; comparing one
    digest with the one from its last (re)start says which.
    """
    h = hashlib.sha256()
    for checksum in checksums:
        h.update((checksum or "-").encode())
        h.update(b"\0")
    h.update(json.dumps(network_config, sort_keys=True).encode())
    return h.hexdigest()


def network_shape(config: dict) -> tuple[ipaddress.IPv4Network, int, Optional[int]]:
    """(Network, SubnetLen, VNI) of a flannel network config; VNI is None for
    a backend without a vxlan device. Defaults are flanneld's own."""
    backend = config.get("Backend") or {}
    vni = backend.get("VNI", 1) if backend.get("Type", "vxlan") == "vxlan" else None
    return ipaddress.IPv4Network(config["Network"]), int(config.get("SubnetLen", 24)), vni


def ipv6_shape(config: dict) -> Optional[tuple[ipaddress.IPv6Network, int]]:
    """(IPv6Network, IPv6SubnetLen) of a dual-stack network config, None
    for IPv4 only (flanneld's default)."""
    if not config.get("EnableIPv6") or not config.get("IPv6Network"):
        return None
    return ipaddress.IPv6Network(config["IPv6Network"]), int(config.get("IPv6SubnetLen", 64))


def vxlan_device_mtu(config: dict, underlay_mtu: Optional[int]) -> Optional[int]:
    """The MTU flanneld gives flannel.<VNI> for a network config: the
    backend's MTU (else the MTU of the interface it sends on) less vxlan's
    overhead; None for a backend without a device, or when not known."""
    backend = config.get("Backend") or {}
    if backend.get("Type", "vxlan") != "vxlan":
        return None
    wire = backend.get("MTU") or underlay_mtu
    return int(wire) - VXLAN_OVERHEAD if wire else None


def pod_mtu(config: dict, underlay_mtu: Optional[int]) -> Optional[int]:
    """The MTU flanneld gives pods (FLANNEL_MTU) for a network config: the
    vxlan device's, or for host-gw the interface's; None when not known."""
    backend = config.get("Backend") or {}
    if backend.get("Type", "vxlan") == "vxlan":
        return vxlan_device_mtu(config, underlay_mtu)
    return underlay_mtu


def vxlan_link_name(vni: int) -> str:
    """The vxlan device flanneld makes for `vni`: flannel.<VNI>."""
    return f"flannel.{vni}"


def flannel_vxlan_links(links: Iterable[dict]) -> list[str]:
    """Names of flanneld's vxlan devices (flannel.<VNI>, flannel-v6.<VNI>)
    among `ip -j -d link show` entries."""
    return [link["ifname"] for link in links
            if _FLANNEL_VXLAN.fullmatch(link.get("ifname", ""))
            and link.get("linkinfo", {}).get("info_kind") == "vxlan"]


def vxlan_v6_device_mtu(pod_mtu: Optional[int], underlay_mtu: Optional[int]) -> Optional[int]:
    """The MTU flannel-v6.<VNI> gets for pods of `pod_mtu` on an interface of
    `underlay_mtu`: the pods' MTU, at most what Linux allows a vxlan device
    over IPv6 there (the interface's less 70); None when not known."""
    if pod_mtu is None:
        return None
    if underlay_mtu is None:
        return pod_mtu - VXLAN_V6_EXTRA_OVERHEAD
    return min(pod_mtu, underlay_mtu - VXLAN_OVERHEAD - VXLAN_V6_EXTRA_OVERHEAD)


def delete_vxlan_links(keep: Optional[dict[str, Optional[int]]] = None,
                       run: Optional[pod_bridge.Run] = None) -> list[str]:
    """Delete flanneld's vxlan devices but those `keep` names (and those too
    if their MTU is not keep[name], when that is not None); returns the
    names deleted.

    flanneld leaves its device behind when stopped, and names it after the
    VNI: after a VNI change the old one would stay, holding the node's
    flannel address and routes beside the new one. And it reuses a device it
    finds without comparing its MTU: after an `mtu` change the old device
    would carry on with the old MTU while pods get the new one. And nothing
    of flanneld's removes flannel-v6.<VNI> when IPv6 is turned off.
    """
    run = run or pod_bridge.run_command
    keep = keep or {}
    links = json.loads(run(["ip", "-j", "-d", "link", "show"]) or "[]")
    mtus = {link.get("ifname"): link.get("mtu") for link in links}
    gone = []
    for name in flannel_vxlan_links(links):
        wanted_mtu = keep.get(name)
        if name not in keep or (wanted_mtu is not None and mtus.get(name) != wanted_mtu):
            try:
                run(["ip", "link", "delete", name])
            except subprocess.CalledProcessError as error:
                if "Cannot find device" not in (error.stderr or ""):
                    raise
            gone.append(name)  # (or gone by itself meanwhile)
    return gone


def could_be_gateway(address, network: ipaddress.IPv4Network, subnet_len: int,
                     ipv6: Optional[tuple[ipaddress.IPv6Network, int]] = None) -> bool:
    """Whether a bridge address ("10.1.52.1/24") can be the gateway of a
    lease of a network config: inside the network of its family, with the
    subnets' prefix length (flanneld only keeps a lease of that length)."""
    if address.version == 4:
        return address.network.prefixlen == subnet_len and address.network.subnet_of(network)
    return ipv6 is not None and address.network.prefixlen == ipv6[1] \
        and address.network.subnet_of(ipv6[0])


@dataclass
class Forgotten:
    """What forget_old_network removed."""
    bridge_addresses: list[str] = field(default_factory=list)
    subnet_env: bool = False
    vxlan_links: list[str] = field(default_factory=list)
    bridge_mtu: Optional[tuple[int, int]] = None   # (old, new): the bridge's MTU set anew
    # the lease the dropped subnet.env described (what the node served till now)
    old_lease: Optional[SubnetEnv] = None

    def __bool__(self) -> bool:
        return bool(self.bridge_addresses or self.subnet_env or self.vxlan_links
                    or self.bridge_mtu)


def forget_old_network(network: ipaddress.IPv4Network, subnet_len: int,
                       subnet_env: Path, vxlan_link: Optional[str], *,
                       network_name: Callable[[], str] = lambda: "",
                       pod_mtu: Optional[int] = None,
                       ipv6: Optional[tuple[ipaddress.IPv6Network, int]] = None,
                       underlay_mtu: Optional[int] = None,
                       run: Optional[pod_bridge.Run] = None) -> Forgotten:
    """While flanneld is stopped, before it starts again: drop what belongs
    to a previous network. `ipv6` is the new network's (IPv6Network,
    IPv6SubnetLen), None for IPv4 only; `underlay_mtu` the MTU of the
    interface flanneld sends on (flannel-v6.<VNI>'s MTU follows from it);
    `network_name()` flannel's CNI network name (pod_bridge: whose an
    address on the bridge is).

    - subnet.env, if it describes another network, lease length or IPv6
      setting: until flanneld writes the new one, the flannel CNI plugin
      would hand out old addresses (and put the old gateway back on the
      bridge). flanneld drops a lease that does not fit and leases anew
      (a cidr change, IPv6 turned on or off: the IPv4 subnet changes too).
    - flannel's addresses on the pods' bridge that cannot be the coming
      lease's gateway (pod_bridge.settle_before_start): the bridge plugin
      refuses to put a new gateway on a bridge that holds another IPv4
      address ('"cni0" already has an IP address different from ...'), so
      without this a cidr change needs a reboot (LP #1932551). The bridge's
      MTU follows `pod_mtu`.
    - flanneld's vxlan devices other than `vxlan_link` (the one of the new
      VNI; None for a backend without one) and, with IPv6, its
      flannel-v6.<VNI>: a VNI change renames them, IPv6 turned off leaves
      flannel-v6; and those devices themselves if their MTU is not the one
      `pod_mtu` gives them (when known; pods get flannel.<VNI>'s MTU, and
      flannel-v6.<VNI> is at most 20 bytes smaller): an `mtu` change,
      which flanneld would not apply to a device it finds.

    Nothing is touched when all of it already fits the network, so calling
    this on every (re)start is harmless.
    """
    run = run or pod_bridge.run_command
    gone = Forgotten()
    try:
        env = read_subnet_env(subnet_env)
    except ValueError:   # garbage: flanneld will write it anew
        env = None
        gone.subnet_env = os.path.exists(subnet_env)
    else:
        gone.subnet_env = env is not None and (
            env.network != network or not env.leased_in(network, subnet_len, ipv6)
            or (ipv6 is not None and env.ipv6_network != ipv6[0]))
    if gone.subnet_env:
        gone.old_lease = env
    served = [network] + ([ipv6[0]] if ipv6 else [])
    if env is not None:
        served += [env.network] + ([env.ipv6_network] if env.ipv6_network else [])
    bridge = pod_bridge.settle_before_start(
        pod_bridge.FlannelsMarks(networks=tuple(served)), network_name,
        kept=env.gateways if env is not None and not gone.subnet_env else (),
        dropped=env.gateways if gone.old_lease is not None else (),
        could_be_gateway=lambda address: could_be_gateway(address, network, subnet_len, ipv6),
        pod_mtu=pod_mtu, run=run)
    gone.bridge_addresses = [str(address) for address in bridge.removed]
    gone.bridge_mtu = bridge.mtu
    if gone.subnet_env:
        os.unlink(subnet_env)
    keep_mtu: dict[str, Optional[int]] = {}
    if vxlan_link is not None:
        keep_mtu[vxlan_link] = pod_mtu
        if ipv6:
            keep_mtu[vxlan_link.replace("flannel.", "flannel-v6.", 1)] = \
                vxlan_v6_device_mtu(pod_mtu, underlay_mtu)
    gone.vxlan_links = delete_vxlan_links(keep=keep_mtu, run=run)
    return gone


# --- the interface flanneld uses between hosts -----------------------------------

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


def default_route_interface() -> str:
    """The interface of the IPv4 default route, "" if there is none."""
    shown = subprocess.run(["ip", "-j", "route", "show", "default"], capture_output=True,
                           text=True)
    routes = json.loads(shown.stdout or "[]") if shown.returncode == 0 else []
    return next((route["dev"] for route in routes if route.get("dev")), "")
