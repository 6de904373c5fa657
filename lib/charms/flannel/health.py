"""update-status's look at etcd: what an idle hook must act on.

One TLS connection (etcd_probe, the standard library only): is etcd there,
does it still hold the network config, and this node's lease? flanneld
notices neither a rebuilt etcd nor a lost lease by itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from . import etcd_probe
from .credentials import ClientFiles
from .daemon import ipv6_shape, network_shape
from .subnet import read_lease


@dataclass(frozen=True)
class EtcdHealth:
    # etcd is away (EtcdUnavailable's reason): a waiting status naming it;
    # flanneld runs on, on its lease
    problem: Optional[str] = None
    answered: Optional[str] = None    # the endpoint that answered
    # etcd holds no network config (rebuilt empty): write it again
    config_missing: bool = False
    # this node's subnet ("10.1.52.0/24") whose lease etcd no longer holds:
    # restart flanneld, which leases it again
    lost_lease: Optional[str] = None
    # other nodes' subnets etcd holds leases of and this node has no route
    # to: restart flanneld, which lists the leases again and routes them all
    unrouted: tuple = ()


def own_lease(subnet_env: Path, confirmed: Optional[dict]) -> Optional[str]:
    """The subnet subnet.env says flanneld leased, if it belongs to the
    network etcd confirmed (a subnet.env of another network is being
    re-leased: not this node's lease any more). A dual-stack lease is named
    as flanneld keys it, both subnets: "10.1.52.0/24&fd10:1:0:5::/64"."""
    env = read_lease(subnet_env)
    if env is None or not confirmed:
        return None
    network, subnet_len, _ = network_shape(confirmed)
    if not env.leased_in(network, subnet_len, ipv6_shape(confirmed)):
        return None
    return env.lease_name


def unrouted_subnets(subnets: Iterable[str], own: Optional[str], routes: Iterable[dict]
                     ) -> tuple:
    """The leased subnets ("10.1.7.0/24") but this node's own that no route
    of this node (`ip -j -4 route show` entries) leads to. flanneld routes
    every other node's subnet (vxlan through flannel.<VNI>, host-gw and
    direct routing through the interface) as it hears of the lease; one it
    never heard of stays unreachable from this node's pods. flanneld v0.27.4
    misses the next lease events after a lease of the other IPv6 shape goes
    (seen when IPv6 is turned on or off: a node keeps the route to another's
    old lease and never gets one to its new lease)."""
    destinations = {route.get("dst") for route in routes}
    return tuple(s for s in subnets if s != own and s not in destinations)


def look_at_etcd(connection_string: str, files: ClientFiles, confirmed: Optional[dict],
                 subnet_env: Path, preferred: Optional[str] = None, *,
                 prefix: str = etcd_probe.DEFAULT_PREFIX, timeout: float = 3.0,
                 routes: Callable[[], list] = lambda: []) -> EtcdHealth:
    """What etcd says of this node, through the endpoint that answered last
    (`preferred`) first. Never raises for etcd being away or refusing."""
    lease_of = own_lease(subnet_env, confirmed)
    # `routes`: this node's IPv4 routes (host_network.read_routes), compared
    # with the leases etcd holds
    try:
        view = etcd_probe.look(etcd_probe.parse_endpoints(connection_string),
                               str(files.ca_file), str(files.cert_file), str(files.key_file),
                               prefix=prefix, lease_of=lease_of, preferred=preferred,
                               timeout=timeout)
    except etcd_probe.EtcdUnavailable as unavailable:
        return EtcdHealth(problem=unavailable.reason)
    unrouted = ()
    if view.lease and view.subnets:   # flanneld runs on its lease: does it route the others?
        unrouted = unrouted_subnets(view.subnets, lease_of.partition("&")[0], routes())
    return EtcdHealth(answered=view.endpoint, config_missing=view.config is None,
                      lost_lease=lease_of if view.lease is False else None, unrouted=unrouted)
