"""The machine's links and routes as `ip -j` shows them, and flanneld's
routes taken away (host-gw's routes to the other nodes' subnets, which
flanneld leaves when it stops)."""
from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
from typing import Iterable

from ..facts.host_network import Link, links_from, pod_network_routes
from .machine import Machine

# the main table's IPv4 routes, as the reading process's network namespace has them
PROC_NET_ROUTE = "/proc/net/route"


def _ip_json(machine: Machine, *args: str) -> list:
    try:
        shown = machine.run(["ip", "-j", *args], check=False)
        return json.loads(shown.stdout or "[]") if shown.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError):
        return []


def read_links(machine: Machine) -> list[Link]:
    return links_from(_ip_json(machine, "addr", "show"))


def read_routes(machine: Machine, family: int = 4) -> list[dict]:
    """The routes of one family (4 or 6) in every table."""
    return _ip_json(machine, f"-{family}", "route", "show", "table", "all")


def route_destinations(machine: Machine, family: int = 4) -> set[str]:
    """The destinations ("10.1.7.0/24", "fd10:1:0:7::/64") of one family's
    routes of the main table, where flanneld puts its routes: IPv4's read
    from /proc/net/route here (a hook's look at every idle hook), else from
    `ip`."""
    if family == 6 or not machine.is_here:
        return {route.get("dst") for route in _ip_json(machine, f"-{family}", "route", "show")}
    found = set()
    with open(PROC_NET_ROUTE) as table:
        next(table, None)   # the header
        for line in table:
            fields = line.split()   # Iface Destination Gateway Flags ... Mask (hex, host order)
            destination, mask = (ipaddress.IPv4Address(socket.ntohl(int(h, 16)))
                                 for h in (fields[1], fields[7]))
            length = bin(int(mask)).count("1")
            found.add("default" if length == 0 else
                      str(destination) if length == 32 else f"{destination}/{length}")
    return found


def default_route_interface(machine: Machine, families: tuple = (4, 6)) -> str:
    """The interface of the first family's default route that there is
    (flanneld's own choice without -iface: IPv6's when it runs IPv6-only),
    "" if there is none."""
    for family in families:
        routes = _ip_json(machine, f"-{family}", "route", "show", "default")
        found = next((route["dev"] for route in routes if route.get("dev")), "")
        if found:
            return found
    return ""


def remove_pod_network_routes(machine: Machine, networks: Iterable[tuple]) -> list[str]:
    """Delete flanneld's routes into the pod networks ((network, subnet_len)
    pairs); returns what went, for the log."""
    nets = list(networks)
    removed = []
    for family in sorted({n.version for n, _ in nets}):
        routes = json.loads(machine.output(["ip", f"-{family}", "-j", "route", "show"]) or "[]")
        for route in pod_network_routes(routes, nets):
            argv = ["ip", f"-{family}", "route", "del", route["dst"]]
            if route.get("gateway"):
                argv += ["via", route["gateway"]]
            if route.get("dev"):
                argv += ["dev", route["dev"]]
            machine.output(argv)
            removed.append(" ".join(argv[4:]))
    return removed
