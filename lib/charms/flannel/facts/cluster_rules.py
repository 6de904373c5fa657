"""What every node's network must agree with, whichever subnet manager
keeps the leases: one backend at a time, and pods off the Kubernetes
service network. Each rule returns the InvalidOption the unit shows as
blocked, or None; steps/network.py applies them to what the mode found
(steps/subnets: Cluster)."""
from __future__ import annotations

from typing import Mapping, Optional

from .host_network import cidr_conflict
from .netconfig import NetworkConfig
from .options import InvalidOption


def backend_change_problem(wanted: NetworkConfig,
                           backends: Mapping[str, int]) -> Optional[InvalidOption]:
    """A backend change while nodes hold leases of another backend:
    flanneld cannot migrate, and nodes on the old backend would lose their
    routes to the new ones (and a cluster changing unit by unit has both
    meanwhile). `backends`: backend type -> nodes holding a lease of it."""
    new = wanted.backend.type
    others = {old: held for old, held in backends.items() if old != new and held > 0}
    if not others:
        return None
    old = max(others, key=lambda backend: others[backend])
    live = sum(others.values())
    holders = "1 node holds a lease" if live == 1 else f"{live} nodes hold leases"
    return InvalidOption(
        "backend",
        f"cannot change from {old} to {new} while {holders}; "
        f"set backend back to {old}, or remove flannel from every node "
        "(each unit releases its lease as it stops) and add it back",
    )


def service_cidr_problem(network: NetworkConfig,
                         services: Optional[str]) -> Optional[InvalidOption]:
    """The pod networks over the cluster's service network, if they are."""
    for option, cidr in (("cidr", network.network), ("ipv6-cidr", network.ipv6_network)):
        over_services = cidr_conflict(cidr, (), services, option=option) \
            if cidr and services else None
        if over_services:
            return over_services
    return None
