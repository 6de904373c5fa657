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

from .options import VXLAN_OVERHEAD
from .subnet import read_subnet_env

VXLAN_LINK = "flannel.1"   # with the default VNI 1
_FLANNEL_VXLAN = re.compile(r"flannel(-v6)?\.\d+")
# The bridge the flannel CNI plugin's delegate (bridge) puts pods on; it
# holds the gateway address of this node's lease.
POD_BRIDGE = "cni0"
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


def delete_vxlan_links(keep: Optional[str] = None, keep_mtu: Optional[int] = None) -> list[str]:
    """Delete flanneld's vxlan devices but `keep` (and `keep` too if its MTU
    is not `keep_mtu`, when given); returns the names deleted.

    flanneld leaves its device behind when stopped, and names it after the
    VNI: after a VNI change the old one would stay, holding the node's
    flannel address and routes beside the new one. And it reuses a device it
    finds without comparing its MTU: after an `mtu` change the old device
    would carry on with the old MTU while pods get the new one.
    """
    shown = subprocess.run(["ip", "-j", "-d", "link", "show"], capture_output=True,
                           text=True, check=True)
    links = json.loads(shown.stdout or "[]")
    mtus = {link.get("ifname"): link.get("mtu") for link in links}
    gone = []
    for name in flannel_vxlan_links(links):
        if name != keep or (keep_mtu is not None and mtus.get(name) != keep_mtu):
            deleted = subprocess.run(["ip", "link", "delete", name], capture_output=True,
                                     text=True)
            if deleted.returncode != 0 and "Cannot find device" not in deleted.stderr:
                raise subprocess.CalledProcessError(deleted.returncode, deleted.args,
                                                    deleted.stdout, deleted.stderr)
            gone.append(name)  # (or gone by itself meanwhile)
    return gone


def stale_bridge_addresses(addr_info: Iterable[dict], network: ipaddress.IPv4Network,
                           subnet_len: int) -> list[str]:
    """The IPv4 addresses ("10.1.52.1/24") among a link's `ip -j addr`
    addr_info entries that cannot be the gateway of a lease in `network`:
    outside it, or with another prefix length than `subnet_len` (flanneld
    only keeps a lease whose length is the configured SubnetLen)."""
    stale = []
    for entry in addr_info:
        if entry.get("family") != "inet" or "local" not in entry:
            continue
        address = ipaddress.IPv4Interface(f"{entry['local']}/{entry.get('prefixlen', 32)}")
        if address.network.prefixlen != subnet_len or not address.network.subnet_of(network):
            stale.append(str(address))
    return stale


def delete_bridge_address(address: str, bridge: str = POD_BRIDGE) -> bool:
    """Remove a lease's gateway address ("10.1.52.1/24") from the pods'
    bridge; True if it was there. Once the lease is given back, the next one
    differs, and the bridge plugin refuses a bridge holding another address."""
    done = subprocess.run(["ip", "addr", "del", address, "dev", bridge], capture_output=True)
    return done.returncode == 0


@dataclass
class Forgotten:
    """What forget_old_network removed."""
    bridge_addresses: list[str] = field(default_factory=list)
    subnet_env: bool = False
    vxlan_links: list[str] = field(default_factory=list)
    bridge_mtu: Optional[tuple[int, int]] = None   # (old, new): the bridge's MTU set anew

    def __bool__(self) -> bool:
        return bool(self.bridge_addresses or self.subnet_env or self.vxlan_links
                    or self.bridge_mtu)


def forget_old_network(network: ipaddress.IPv4Network, subnet_len: int,
                       subnet_env: Path, vxlan_link: Optional[str],
                       bridge: str = POD_BRIDGE, pod_mtu: Optional[int] = None) -> Forgotten:
    """While flanneld is stopped, before it starts again: drop what belongs
    to a previous network.

    - The bridge's IPv4 addresses that cannot be a gateway in the new network:
      the bridge plugin refuses to add the new lease's gateway to a bridge
      that holds another address ('"cni0" already has an IP address
      different from ...'), so without this a cidr change needs a reboot
      (LP #1932551).
    - subnet.env, if it describes another network or lease length: until
      flanneld writes the new one, the flannel CNI plugin would hand out old
      addresses (and put the old gateway back on the bridge).
    - flanneld's vxlan devices other than `vxlan_link` (the one of the new
      VNI; None for a backend without one): a VNI change renames the device;
      and `vxlan_link` itself if its MTU is not `pod_mtu` (when known; pods
      get the device's MTU): an `mtu` change, which flanneld would not apply
      to a device it finds.
    - The bridge's MTU, set to `pod_mtu` (FLANNEL_MTU) if it is another:
      the bridge plugin sets it only when it creates the bridge, and a bridge
      left smaller than the pods turns their large packets from other nodes
      away ("fragmentation needed").

    Nothing is touched when both already fit the network, so calling this on
    every (re)start is harmless.
    """
    gone = Forgotten()
    shown = subprocess.run(["ip", "-j", "addr", "show", "dev", bridge],
                           capture_output=True, text=True)
    if shown.returncode == 0 and shown.stdout.strip():   # no bridge: no pod yet
        links = json.loads(shown.stdout)
        addr_info = [a for link in links for a in link.get("addr_info", [])]
        for address in stale_bridge_addresses(addr_info, network, subnet_len):
            subprocess.run(["ip", "addr", "del", address, "dev", bridge],
                           check=True, capture_output=True)
            gone.bridge_addresses.append(address)
        bridge_mtu = links[0].get("mtu") if links else None
        if pod_mtu is not None and bridge_mtu is not None and bridge_mtu != pod_mtu:
            # (a refusal leaves the bridge as it was: new pods still start)
            done = subprocess.run(["ip", "link", "set", "dev", bridge, "mtu", str(pod_mtu)],
                                  capture_output=True)
            if done.returncode == 0:
                gone.bridge_mtu = (bridge_mtu, pod_mtu)
    try:
        env = read_subnet_env(subnet_env)
    except ValueError:   # garbage: flanneld will write it anew
        env = None
        gone.subnet_env = os.path.exists(subnet_env)
    else:
        gone.subnet_env = env is not None and (
            env.network != network or env.subnet.network.prefixlen != subnet_len)
    if gone.subnet_env:
        os.unlink(subnet_env)
    gone.vxlan_links = delete_vxlan_links(keep=vxlan_link,
                                          keep_mtu=pod_mtu if vxlan_link else None)
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
