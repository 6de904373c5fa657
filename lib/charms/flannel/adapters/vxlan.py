"""flanneld's vxlan devices: flannel.<VNI>, and flannel-v6.<VNI> with IPv6.

flanneld makes them as it starts and leaves them when it stops. It names
them after the VNI, so after a VNI change the old one would stay, holding
the node's flannel address and routes beside the new one; it reuses a
device it finds without comparing its MTU, so after an `mtu` change the old
device would carry on with the old MTU while pods get the new one; and
nothing of flanneld's removes flannel-v6.<VNI> when IPv6 is turned off.
The charm deletes what the running config does not want, while flanneld is
stopped, and all of them on removal.
"""
from __future__ import annotations

import json
import re
import subprocess
from typing import Iterable, Optional

from .machine import Machine

_FLANNEL_VXLAN = re.compile(r"flannel(-v6)?\.\d+")


def flannel_vxlan_links(links: Iterable[dict]) -> list[str]:
    """Names of flanneld's vxlan devices among `ip -j -d link show` entries."""
    return [link["ifname"] for link in links
            if _FLANNEL_VXLAN.fullmatch(link.get("ifname", ""))
            and link.get("linkinfo", {}).get("info_kind") == "vxlan"]


def delete_vxlan_links(machine: Machine,
                       keep: Optional[dict[str, Optional[int]]] = None) -> list[str]:
    """Delete flanneld's vxlan devices but those `keep` names (and those too
    if their MTU is not keep[name], when that is not None); returns the
    names deleted."""
    keep = keep or {}
    links = json.loads(machine.output(["ip", "-j", "-d", "link", "show"]) or "[]")
    mtus = {link.get("ifname"): link.get("mtu") for link in links}
    gone = []
    for name in flannel_vxlan_links(links):
        wanted_mtu = keep.get(name)
        if name not in keep or (wanted_mtu is not None and mtus.get(name) != wanted_mtu):
            try:
                machine.output(["ip", "link", "delete", name])
            except subprocess.CalledProcessError as error:
                if "Cannot find device" not in (error.stderr or ""):
                    raise
            gone.append(name)  # (or gone by itself meanwhile)
    return gone


# --- transmit checksum offload (disable-vxlan-tx-checksumming) ------------------------------
# A vxlan device offers only the generic checksum feature; with it off the
# kernel computes the inner checksums itself, and Linux turns TSO off with it
# ("Actual changes" in ethtool's answer).
TX_CHECKSUM_FEATURE = "tx-checksum-ip-generic"


def tx_checksum_offload(machine: Machine, device: str) -> Optional[bool]:
    """Whether `device` offloads transmit checksums; None when the device is
    gone or does not say. Asked of the kernel here (every hook asks), else
    with `ethtool -k`."""
    if machine.is_here:
        return _tx_checksum_ioctl(device)
    done = machine.run(["ethtool", "-k", device], check=False)
    if done.returncode:
        return None
    for line in done.stdout.splitlines():
        name, _, value = line.strip().partition(":")
        if name == TX_CHECKSUM_FEATURE:
            return value.split()[0] == "on" if value.split() else None
    return None


def set_tx_checksum_offload(machine: Machine, device: str, on: bool) -> None:
    machine.output(["ethtool", "-K", device, TX_CHECKSUM_FEATURE, "on" if on else "off"])


# ethtool's ioctl: ETHTOOL_GTXCSUM answers whether any transmit checksum
# feature is on, which for a vxlan device is TX_CHECKSUM_FEATURE alone
SIOCETHTOOL, ETHTOOL_GTXCSUM = 0x8946, 0x16


def _tx_checksum_ioctl(device: str) -> Optional[bool]:
    import array
    import fcntl
    import socket
    import struct
    value = array.array("I", [ETHTOOL_GTXCSUM, 0])   # struct ethtool_value {cmd, data}
    request = struct.pack("16sP", device.encode()[:15], value.buffer_info()[0]).ljust(40, b"\0")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            fcntl.ioctl(sock.fileno(), SIOCETHTOOL, request)
    except OSError:   # gone (ENODEV), or no answer
        return None
    return bool(value[1])
