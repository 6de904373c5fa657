"""The commands a node needs for what the options ask of flanneld and the
charm, and the status naming the one it lacks.

flanneld writes its rules by running `iptables-restore` (iptables mode) or
`nft` (nftables mode, flanneld >= 0.25, through knftables), and exits at
start without them; flanneld (v0.27 to v0.28.10) in nftables mode also runs iptables and
ip6tables as it starts (to clean up the other mode's chains) and exits
when either is missing (docs/reference/flanneld.md). The charm turns
vxlan checksum offload off with ethtool.
"""
from __future__ import annotations

from typing import Callable, Optional

from .options import NetworkOptions

Has = Callable[[str], bool]


def rules_command_problem(options: NetworkOptions, has: Has) -> Optional[str]:
    """Why flanneld could not start here with these options, for want of a
    command, or None."""
    if options.nftables:
        if not has("nft"):
            return ("enable-nftables needs nft (nftables 1.0.1 or later), which this machine "
                    "lacks: install nftables, or set enable-nftables to false")
        for command in ("iptables", "ip6tables"):
            if not has(command):
                return (f"enable-nftables: flanneld still runs {command} as it starts, "
                        "and this machine lacks it: install iptables")
        return None
    for command in ("iptables",) + (("ip6tables",) if options.ipv6_cidr else ()):
        if not has(command):
            return (f"flanneld writes its rules with {command}, which this machine lacks: "
                    "install iptables, or set enable-nftables to true")
    return None


def offload_command_problem(has: Has) -> Optional[str]:
    """Why the charm cannot turn vxlan checksum offload off here, or None."""
    if not has("ethtool"):
        return ("disable-vxlan-tx-checksumming needs ethtool, which this machine lacks: "
                "install ethtool, or set disable-vxlan-tx-checksumming to false")
    return None
