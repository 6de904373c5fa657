"""Whether flanneld's vxlan devices go without transmit checksum offload
(disable-vxlan-tx-checksumming): `auto` decides from the kernel.

Before Linux 5.7, netfilter's NAT rewrote the zero UDP checksum of a vxlan
packet whose checksum the NIC was to fill in (tx offload), and such packets
left with a bad checksum: Service traffic through kube-proxy's SNAT stalled
(flannel issues 1279 and 1282). Linux 5.7 fixed it (ea64d8d6c675, "netfilter:
nat: never update the UDP checksum when it's 0"); Calico's felix turns
offload off on kernels before 5.7 only. With offload off the kernel sums
every packet itself and TSO goes with it: pod-to-pod TCP measured at a third
of the nodes' own (docs/reference/configuration.md).
"""
from __future__ import annotations

import re
from typing import NamedTuple, Optional

# the first kernel with the fix
FIXED_IN = (5, 7)
AUTO = "auto"


class OffloadChoice(NamedTuple):
    off: bool     # offload off on flanneld's vxlan devices
    why: str      # for the log, and the debug action's report


def kernel_version(release: Optional[str]) -> Optional[tuple[int, int]]:
    """(major, minor) of a kernel release ("5.15.0-91-generic"), or None."""
    found = re.match(r"(\d+)\.(\d+)", release or "")
    return (int(found.group(1)), int(found.group(2))) if found else None


def choose(setting: Optional[bool], kernel_release: Optional[str]) -> OffloadChoice:
    """`setting`: the option (True: off, False: on, None: auto)."""
    if setting is not None:
        return OffloadChoice(setting, "disable-vxlan-tx-checksumming={}".format(
            "true" if setting else "false"))
    version = kernel_version(kernel_release)
    if version is None:   # not known to be fixed: as before auto, off
        return OffloadChoice(True, f"auto: kernel release {kernel_release!r} unknown")
    fixed = version >= FIXED_IN
    return OffloadChoice(not fixed, "auto: kernel {} {} Linux 5.7's fix of NAT on offloaded "
                                    "vxlan checksums".format(kernel_release.strip(),
                                                             "has" if fixed else "predates"))
