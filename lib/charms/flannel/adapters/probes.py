"""The check-network action's measurements, each one command on this
machine: echoes (with DF set and a size, or not; from a pod-network
address, with a TTL), this node's route to a subnet, and a vxlan device's
FDB and neighbour entries (iproute2's JSON).
What they mean is facts/diagnosis.py's. A command that cannot run answers
None (unknown), never a false "missing"."""
from __future__ import annotations

import json
import re
import subprocess
from typing import Iterable, Optional

from ..facts.diagnosis import Echoes, Route, icmp_headers
from .machine import Machine

# what the probes run: a node without one of them cannot be checked
COMMANDS = ("ip", "bridge", "ping")


# echoes of one question leave this far apart (seconds): root's ping allows it
ECHO_INTERVAL = 0.05
# "From 10.1.9.1 icmp_seq=2 Time to live exceeded" (IPv6: "Time exceeded: Hop
# limit"), or the peer's word that it has no route on: the packet reached it
# and the error came back. Not "Packet filtered" and its kin: a firewall's.
_ICMP_ERROR = re.compile(r"^From (\S+?):? icmp_seq=\d+ (?:Time to live exceeded|Time exceeded"
                         r"|Destination (?:Net|Host) Unreachable|Destination unreachable: "
                         r"(?:No route|Address unreachable))", re.MULTILINE)
_STATISTICS = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")


def missing_commands(machine: Machine) -> list[str]:
    return [command for command in COMMANDS if not machine.has(command)]


def ping(machine: Machine, address: str, *, timeout: float, size: Optional[int] = None,
         count: int = 1, source: Optional[str] = None, ttl: Optional[int] = None,
         answering: Iterable[str] = ()) -> Echoes:
    """`count` echoes to `address` (IPv4 or IPv6), ECHO_INTERVAL apart,
    each waited for up to `timeout` seconds; with `size`, packets of that
    many bytes (headers included) with DF set; from `source` (an address of
    this node's); with `ttl`, that TTL (hop limit). An ICMP error from one
    of `answering` (a TTL exceeded on arrival there) counts as an answer:
    it came back the way an echo reply would. (ping's -q would hide the
    refusal and the errors.)"""
    family = "-6" if ":" in address else "-4"
    argv = ["ping", family, "-n", "-c", str(count), "-W", f"{timeout:g}"]
    if count > 1:
        argv += ["-i", f"{ECHO_INTERVAL:g}"]
    if size is not None:
        argv += ["-M", "do", "-s", str(size - icmp_headers(address))]
    if source is not None:
        argv += ["-I", source]
    if ttl is not None:
        argv += ["-t", str(ttl)]
    try:
        done = machine.run(argv + [address], check=False)
    except (OSError, subprocess.SubprocessError):
        return Echoes()   # nothing sent: no evidence either way
    text = done.stdout + done.stderr
    if "message too long" in text.lower():
        return Echoes(count, 0, refused=True)
    statistics = _STATISTICS.search(done.stdout)
    if statistics is None:   # ping did not get as far as sending (no route, bad source)
        return Echoes()
    sent, answered = int(statistics.group(1)), int(statistics.group(2))
    errors = set(answering)
    answered += sum(1 for origin in _ICMP_ERROR.findall(done.stdout) if origin in errors)
    return Echoes(sent, min(answered, sent))


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
