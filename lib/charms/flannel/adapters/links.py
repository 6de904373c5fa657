"""The machine's links and routes as `ip -j` shows them, and flanneld's
routes taken away (host-gw's routes to the other nodes' subnets, which
flanneld leaves when it stops)."""
from __future__ import annotations

import json
import subprocess
from typing import Iterable

from ..facts.host_network import Link, links_from, pod_network_routes
from .machine import Machine


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


def default_route_interface(machine: Machine) -> str:
    """The interface of the IPv4 default route, "" if there is none."""
    routes = _ip_json(machine, "route", "show", "default")
    return next((route["dev"] for route in routes if route.get("dev")), "")


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
