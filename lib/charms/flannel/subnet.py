"""Parsing of /run/flannel/subnet.env, which flanneld writes once it holds a
lease: the subnet it got is what the unit's status reports."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

REQUIRED = ("FLANNEL_NETWORK", "FLANNEL_SUBNET", "FLANNEL_MTU", "FLANNEL_IPMASQ")


class IncompleteSubnetEnv(ValueError):
    """Some of the four IPv4 variables are missing (flanneld not done yet)."""


@dataclass(frozen=True)
class SubnetEnv:
    network: ipaddress.IPv4Network  # the whole pod network, e.g. 10.1.0.0/16
    subnet: ipaddress.IPv4Interface  # this node's gateway/lease, e.g. 10.1.52.1/24
    mtu: int
    ipmasq: bool


def parse_subnet_env(text: str) -> SubnetEnv:
    """Parse KEY=VALUE lines; blank lines, comments and keys other than the
    four IPv4 ones (FLANNEL_IPV6_*) are ignored. Raises IncompleteSubnetEnv
    (a ValueError) when a variable is missing, ValueError on a bad value."""
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
    return SubnetEnv(
        network=ipaddress.IPv4Network(values["FLANNEL_NETWORK"]),
        subnet=ipaddress.IPv4Interface(values["FLANNEL_SUBNET"]),
        mtu=mtu,
        ipmasq=ipmasq == "true",
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
