"""The check-network action's measurements, each one command on this
machine: a ping (with DF set and a size, or not), this node's route to a
subnet, and a vxlan device's FDB and neighbour entries. What they mean is
facts/diagnosis.py's."""
from __future__ import annotations

import enum
import subprocess
from typing import Optional

from ..facts.diagnosis import ICMP_HEADERS, Route
from .machine import Machine


class Echo(enum.Enum):
    ANSWERED = "answered"
    LOST = "lost"          # sent, and nothing came back in time
    REFUSED = "refused"    # not sent: larger than the route's MTU ("message too long")


def ping(machine: Machine, address: str, *, timeout: float, size: Optional[int] = None
         ) -> Echo:
    """One IPv4 echo to `address`; with `size`, a packet of that many bytes
    (headers included) with DF set."""
    argv = ["ping", "-n", "-c", "1", "-W", f"{timeout:g}"]
    if size is not None:
        argv += ["-M", "do", "-s", str(size - ICMP_HEADERS)]
    try:
        done = machine.run(argv + [address], check=False)
    except (OSError, subprocess.SubprocessError):
        return Echo.LOST
    if done.returncode == 0:
        return Echo.ANSWERED
    if "message too long" in (done.stderr + done.stdout).lower():
        return Echo.REFUSED
    return Echo.LOST


def route_to(machine: Machine, subnet: str) -> Optional[Route]:
    """This node's route to exactly `subnet`, or None."""
    done = machine.run(["ip", "-4", "route", "show", "exact", subnet], check=False)
    for line in done.stdout.splitlines():
        words = line.split()
        if not words or words[0] != subnet and words[0] != subnet.split("/")[0]:
            continue
        via = words[words.index("via") + 1] if "via" in words else None
        dev = words[words.index("dev") + 1] if "dev" in words else ""
        return Route(via=via, dev=dev)
    return None


def fdb_sends(machine: Machine, device: str, mac: str, address: str) -> bool:
    """`device`'s FDB sends `mac` to `address` (flanneld's entry for a lease)."""
    done = machine.run(["bridge", "fdb", "show", "dev", device], check=False)
    for line in done.stdout.splitlines():
        words = line.split()
        if words and words[0].lower() == mac.lower() and "dst" in words and \
                words[words.index("dst") + 1] == address:
            return True
    return False


def neighbour_has(machine: Machine, device: str, address: str, mac: str) -> bool:
    """`device`'s neighbour entry for `address` has `mac`."""
    done = machine.run(["ip", "-4", "neigh", "show", "dev", device, address], check=False)
    return any("lladdr" in line.split() and
               line.split()[line.split().index("lladdr") + 1].lower() == mac.lower()
               for line in done.stdout.splitlines())
