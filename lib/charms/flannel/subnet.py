"""Parsing of /run/flannel/subnet.env, which flanneld writes once it holds a
lease: the subnet it got is what the unit's status reports."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import Optional

REQUIRED = ("FLANNEL_NETWORK", "FLANNEL_SUBNET", "FLANNEL_MTU", "FLANNEL_IPMASQ")


class IncompleteSubnetEnv(ValueError):
    """Some of the four IPv4 variables are missing (flanneld not done yet)."""


@dataclass(frozen=True)
class SubnetEnv:
    network: ipaddress.IPv4Network  # the whole pod network, e.g. 10.1.0.0/16
    subnet: ipaddress.IPv4Interface  # this node's gateway/lease, e.g. 10.1.52.1/24
    mtu: int
    ipmasq: bool
    # dual-stack: the IPv6 pod network and this node's gateway/lease in it
    ipv6_network: Optional[ipaddress.IPv6Network] = None   # fd10:1::/56
    ipv6_subnet: Optional[ipaddress.IPv6Interface] = None  # fd10:1:0:5::1/64

    @property
    def gateways(self) -> tuple:
        """This node's gateway of each family (the pods' bridge holds them)."""
        return (self.subnet,) + ((self.ipv6_subnet,) if self.ipv6_subnet else ())

    @property
    def lease_name(self) -> str:
        """The lease as flanneld keys it in etcd, "/" for its "-":
        "10.1.52.0/24", or dual-stack "10.1.52.0/24&fd10:1:0:5::/64"."""
        return "&".join(str(gateway.network) for gateway in self.gateways)

    def leased_in(self, network: ipaddress.IPv4Network, subnet_len: int,
                  ipv6: Optional[tuple[ipaddress.IPv6Network, int]]) -> bool:
        """Whether this lease is one of a network config's: its IPv4 subnet in
        `network` with `subnet_len`, and an IPv6 subnet in `ipv6`'s network
        with its length exactly when the config has IPv6. flanneld drops a
        lease that is not (a cidr, length or IPv6 change) and leases anew."""
        def inside(gateway, pod_network, length) -> bool:
            return gateway.network.prefixlen == length and gateway.network.subnet_of(pod_network)
        if not inside(self.subnet, network, subnet_len):
            return False
        if ipv6 is None or self.ipv6_subnet is None:
            return ipv6 is None and self.ipv6_subnet is None
        return inside(self.ipv6_subnet, *ipv6)


def parse_subnet_env(text: str) -> SubnetEnv:
    """Parse KEY=VALUE lines; blank lines, comments and other keys are
    ignored; FLANNEL_IPV6_NETWORK and FLANNEL_IPV6_SUBNET (dual-stack) are
    read when both are there. Raises IncompleteSubnetEnv (a ValueError)
    when an IPv4 variable is missing, ValueError on a bad value."""
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
    ipv6 = values.get("FLANNEL_IPV6_NETWORK"), values.get("FLANNEL_IPV6_SUBNET")
    return SubnetEnv(
        network=ipaddress.IPv4Network(values["FLANNEL_NETWORK"]),
        subnet=ipaddress.IPv4Interface(values["FLANNEL_SUBNET"]),
        mtu=mtu,
        ipmasq=ipmasq == "true",
        ipv6_network=ipaddress.IPv6Network(ipv6[0]) if all(ipv6) else None,
        ipv6_subnet=ipaddress.IPv6Interface(ipv6[1]) if all(ipv6) else None,
    )


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def read_subnet_env(path: str | os.PathLike[str]) -> SubnetEnv | None:
    """The parsed file, or None while it is absent or incomplete (flanneld
    has not got a lease yet). A file with bad values raises ValueError."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    try:
        return parse_subnet_env(text)
    except IncompleteSubnetEnv:
        return None


def read_lease(path: str | os.PathLike[str]) -> SubnetEnv | None:
    """flanneld's lease as subnet.env states it, None while the file is
    absent, incomplete or garbled: a garbled file is flanneld's to rewrite,
    never a reason for a hook to fail."""
    try:
        return read_subnet_env(path)
    except ValueError:
        return None
