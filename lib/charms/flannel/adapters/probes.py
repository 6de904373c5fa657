"""The check-network action's measurements, each one command on this
machine: a ping (with DF set and a size, or not), this node's route to a
subnet, and a vxlan device's FDB and neighbour entries (iproute2's JSON).
What they mean is facts/diagnosis.py's. A command that cannot run answers
None (unknown), never a false "missing"."""
from __future__ import annotations

import enum
import json
import subprocess
from typing import Optional

from ..facts.diagnosis import Route, icmp_headers
from .machine import Machine

# what the probes run: a node without one of them cannot be checked
COMMANDS = ("ip", "bridge", "ping")


class Echo(enum.Enum):
    ANSWERED = "answered"
    LOST = "lost"          # sent, and nothing came back in time
    REFUSED = "refused"    # not sent: larger than the route's MTU ("message too long")


def missing_commands(machine: Machine) -> list[str]:
    return [command for command in COMMANDS if not machine.has(command)]


def ping(machine: Machine, address: str, *, timeout: float, size: Optional[int] = None
         ) -> Echo:
    """One echo to `address` (IPv4 or IPv6); with `size`, a packet of that
    many bytes (headers included) with DF set. (ping's -q would hide the
    refusal.)"""
    family = "-6" if ":" in address else "-4"
    argv = ["ping", family, "-n", "-c", "1", "-W", f"{timeout:g}"]
    if size is not None:
        argv += ["-M", "do", "-s", str(size - icmp_headers(address))]
    try:
        done = machine.run(argv + [address], check=False)
    except (OSError, subprocess.SubprocessError):
        return Echo.LOST
    if done.returncode == 0:
        return Echo.ANSWERED
    if "message too long" in (done.stderr + done.stdout).lower():
        return Echo.REFUSED
    return Echo.LOST


def _json(machine: Machine, argv: list[str]) -> Optional[list]:
    try:
        done = machine.run(argv, check=False)
        return json.loads(done.stdout or "[]") if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def route_to(machine: Machine, subnet: str) -> Optional[Route]:
    """This node's route to exactly `subnet` (either family), or None."""
    family = "-6" if ":" in subnet else "-4"
    for route in _json(machine, ["ip", "-j", family, "route", "show", "exact", subnet]) or ():
        if "dev" in route:
            return Route(via=route.get("gateway"), dev=route["dev"])
    return None


def fdb_sends(machine: Machine, device: str, mac: str, address: str) -> Optional[bool]:
    """`device`'s FDB sends `mac` to `address` (flanneld's entry for a
    lease); None when `bridge` cannot say."""
    found = _json(machine, ["bridge", "-j", "fdb", "show", "dev", device])
    if found is None:
        return None
    return any(entry.get("mac", "").lower() == mac.lower() and entry.get("dst") == address
               for entry in found)


def neighbour_has(machine: Machine, device: str, address: str, mac: str) -> Optional[bool]:
    """`device`'s neighbour entry for `address` has `mac`; None when `ip`
    cannot say."""
    family = "-6" if ":" in address else "-4"
    found = _json(machine, ["ip", "-j", family, "neigh", "show", "dev", device, address])
    if found is None:
        return None
    return any(entry.get("lladdr", "").lower() == mac.lower() for entry in found)
