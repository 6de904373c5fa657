"""flanneld's word on its lease: /run/flannel/subnet.env, which flanneld
writes once it holds one (the flannel CNI plugin reads it for every pod,
and the unit's status names the subnet in it). Parsing only: adapters/
node_files.py reads the file."""

from __future__ import annotations

import ipaddress
from typing import NamedTuple, Optional, Union

REQUIRED = ("FLANNEL_MTU", "FLANNEL_IPMASQ")
# a lease's subnet of each family: IPv4's, IPv6's (both: dual-stack); an
# IPv6-only flanneld (EnableIPv4 false) writes no FLANNEL_NETWORK or FLANNEL_SUBNET
IPV4 = ("FLANNEL_NETWORK", "FLANNEL_SUBNET")
IPV6 = ("FLANNEL_IPV6_NETWORK", "FLANNEL_IPV6_SUBNET")


class IncompleteSubnetEnv(ValueError):
    """A variable flanneld writes is missing (flanneld not done yet)."""


class SubnetEnv(NamedTuple):
    # the whole IPv4 pod network, e.g. 10.1.0.0/16, and this node's
    # gateway/lease in it, e.g. 10.1.52.1/24; both None when IPv6-only
    network: Optional[ipaddress.IPv4Network]
    subnet: Optional[ipaddress.IPv4Interface]
    mtu: int
    ipmasq: bool
    # dual-stack or IPv6-only: the IPv6 pod network and this node's gateway/lease in it
    ipv6_network: Optional[ipaddress.IPv6Network] = None   # fd10:1::/56
    ipv6_subnet: Optional[ipaddress.IPv6Interface] = None  # fd10:1:0:5::1/64

    @property
    def gateways(self) -> tuple:
        """This node's gateway of each family (the pods' bridge holds them),
        IPv4 first."""
        return tuple(gateway for gateway in (self.subnet, self.ipv6_subnet) if gateway)

    @property
    def primary(self) -> Union[ipaddress.IPv4Interface, ipaddress.IPv6Interface]:
        """The first family's gateway, which names the lease: IPv4's, or
        IPv6's when IPv6-only."""
        return self.gateways[0]

    @property
    def lease_name(self) -> str:
        """The lease as flanneld keys it in etcd, "/" for its "-":
        "10.1.52.0/24", or dual-stack "10.1.52.0/24&fd10:1:0:5::/64"."""
        return "&".join(str(gateway.network) for gateway in self.gateways)

    @property
    def networks(self) -> tuple:
        """(network, subnet length) of each family the lease is in."""
        return tuple((network, gateway.network.prefixlen) for network, gateway in
                     ((self.network, self.subnet), (self.ipv6_network, self.ipv6_subnet))
                     if network is not None and gateway is not None)


def parse_subnet_env(text: str) -> SubnetEnv:
    """Parse KEY=VALUE lines; blank lines, comments and other keys are
    ignored; each family's pair (FLANNEL_NETWORK and FLANNEL_SUBNET,
    FLANNEL_IPV6_NETWORK and FLANNEL_IPV6_SUBNET) is read when both are
    there. Raises IncompleteSubnetEnv (a ValueError) when the MTU, the
    masquerade flag or every family's pair is missing, ValueError on a bad
    value."""
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"line {number} is not KEY=VALUE: {line!r}")
        values[key.strip()] = _unquote(value.strip())
    missing = [key for key in REQUIRED if not values.get(key)]
    ipv4, ipv6 = (tuple(values.get(key) for key in pair) for pair in (IPV4, IPV6))
    if not all(ipv4) and not all(ipv6):
        missing += [key for key in IPV4 if not values.get(key)]
    if missing:
        raise IncompleteSubnetEnv(f"subnet.env lacks {', '.join(missing)}")
    ipmasq = values["FLANNEL_IPMASQ"].lower()
    if ipmasq not in ("true", "false"):
        raise ValueError(f"FLANNEL_IPMASQ is not true or false: {values['FLANNEL_IPMASQ']!r}")
    try:
        mtu = int(values["FLANNEL_MTU"])
    except ValueError:
        raise ValueError(f"FLANNEL_MTU is not a number: {values['FLANNEL_MTU']!r}") from None
    if mtu <= 0:
        raise ValueError(f"FLANNEL_MTU is not positive: {mtu}")
    return SubnetEnv(
        network=ipaddress.IPv4Network(ipv4[0]) if all(ipv4) else None,
        subnet=ipaddress.IPv4Interface(ipv4[1]) if all(ipv4) else None,
        mtu=mtu,
        ipmasq=ipmasq == "true",
        ipv6_network=ipaddress.IPv6Network(ipv6[0]) if all(ipv6) else None,
        ipv6_subnet=ipaddress.IPv6Interface(ipv6[1]) if all(ipv6) else None,
    )


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value
