"""Validation of the charm's network options.

parse_options() turns the raw config into NetworkOptions or raises
InvalidOption, whose text becomes the unit's blocked status verbatim, so
every reason is written for an operator reading `juju status`. The rules
are flanneld v0.27's own (checked against the real flanneld in
tests/sandbox/test_sb_flanneld_config_rules.py), and stricter where the
test says so.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import NamedTuple, Optional

from .netconfig import HOST_GW, IPV6_MIN_MTU, VXLAN, VXLAN_OVERHEAD, Backend, NetworkConfig

BACKENDS = (VXLAN, HOST_GW)
# Where flanneld keeps the leases: etcd (flanneld's -etcd-* flags) or the
# Kubernetes API (-kube-subnet-mgr: each Node's spec.podCIDRs, allocated by
# kube-controller-manager, and flanneld's annotations on it)
ETCD, KUBERNETES = "etcd", "kubernetes"
SUBNET_MANAGERS = (ETCD, KUBERNETES)
# flanneld's own rules (CheckNetworkConfig in flannel's pkg/subnet/config.go,
# v0.27): SubnetLen at most 30, and at least the Network's prefix + 2 so that
# the network holds four subnets (flanneld never leases the first one). A
# config outside them is refused by every flanneld, which then retries
# "Couldn't fetch network config" forever.
MAX_SUBNET_LEN = 30
MIN_SUBNETS_BITS = 2
# VXLAN identifiers are 24 bits, but flanneld names its device flannel.<VNI>
# and Linux refuses names over 15 characters (flanneld fails with "failed to
# create vxlan device: numerical result out of range"): seven digits at most.
MAX_VNI = 9_999_999
# With IPv6 on, flanneld also makes flannel-v6.<VNI>: four digits at most.
MAX_VNI_WITH_IPV6 = 9_999
# flanneld's IPv6 rules (same CheckNetworkConfig): IPv6SubnetLen at most 126,
# at least the IPv6Network's prefix + 2; the network at most a /124.
MAX_IPV6_SUBNET_LEN = 126
DEFAULT_IPV6_SUBNET_LEN = 64
# flanneld's SubnetLen when a config gives none (pkg/subnet/config.go)
DEFAULT_SUBNET_LEN = 24
MAX_PORT = 65535
VXLAN_KERNEL_PORT = 8472  # what port 0 means to flanneld's vxlan backend
# A pod link below IPv4's minimum datagram size (RFC 791) breaks IPv4 itself.
MIN_POD_MTU = 576
MIN_MTU = MIN_POD_MTU + VXLAN_OVERHEAD
MAX_MTU = 65535   # Linux's largest

# Used when a key is absent (Juju always sends every key; tests may not).
DEFAULTS: Mapping[str, object] = {
    "cidr": "10.1.0.0/16",
    "subnet-len": 24,
    "backend": "vxlan",
    "iface": "",
    "port": 0,
    "vni": 1,
    "mtu": 0,
    "direct-routing": False,
    "ipv6-cidr": "",
    "ipv6-subnet-len": DEFAULT_IPV6_SUBNET_LEN,
    "enable-nftables": False,
    "disable-vxlan-tx-checksumming": "auto",
    "subnet-manager": ETCD,
}

# Ranges a pod network must not overlap: packets there never reach a pod.
_UNUSABLE = (
    (ipaddress.IPv4Network("0.0.0.0/8"), "0.0.0.0/8 (this-network)"),
    (ipaddress.IPv4Network("127.0.0.0/8"), "127.0.0.0/8 (loopback)"),
    (ipaddress.IPv4Network("169.254.0.0/16"), "169.254.0.0/16 (link-local)"),
    (ipaddress.IPv4Network("224.0.0.0/4"), "224.0.0.0/4 (multicast)"),
    (ipaddress.IPv4Network("240.0.0.0/4"), "240.0.0.0/4 (reserved)"),
)
_UNUSABLE_V6 = (
    (ipaddress.IPv6Network("::/8"), "::/8 (loopback, unspecified, IPv4-mapped)"),
    (ipaddress.IPv6Network("fe80::/10"), "fe80::/10 (link-local)"),
    (ipaddress.IPv6Network("ff00::/8"), "ff00::/8 (multicast)"),
)

# Linux accepts up to 15 bytes without '/', ':' or whitespace (dev_valid_name);
# require a sane first character as well.
_IFACE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,14}")


class InvalidOption(ValueError):
    """A config option the charm cannot use; str() is the blocked status."""

    def __init__(self, option: str, reason: str) -> None:
        self.option = option
        self.reason = reason
        self.message = f"Invalid {option}: {reason}"
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


class NetworkOptions(NamedTuple):
    cidr: Optional[ipaddress.IPv4Network]   # None: IPv6-only (subnet-manager=kubernetes)
    subnet_len: int
    backend: str  # "vxlan" | "host-gw"
    vni: int
    port: int  # 0 = the kernel's default vxlan port
    iface: str  # "" = let the charm pick the binding's interface
    mtu: int = 0  # the vxlan packets' MTU on the wire; 0 = the interface's (flanneld's choice)
    direct_routing: bool = False  # vxlan: plain routes to nodes on the same subnet
    ipv6_cidr: Optional[ipaddress.IPv6Network] = None  # dual-stack's IPv6 pod network; None: off
    ipv6_subnet_len: int = DEFAULT_IPV6_SUBNET_LEN
    nftables: bool = False   # flanneld's rules in nft tables instead of iptables chains
    # tx checksum offload off on flanneld's vxlan devices (True), on (False),
    # or as the kernel needs (None: facts/offload.py); each node's own devices,
    # not part of the network config
    tx_checksum_off: Optional[bool] = None
    subnet_manager: str = ETCD   # etcd | kubernetes: not part of the network config

    def network_config(self) -> NetworkConfig:
        """The network config these options ask etcd to hold."""
        vxlan = self.backend == VXLAN
        return NetworkConfig(
            # IPv6-only: no IPv4 subnets, and flanneld's SubnetLen default, so
            # that the config written reads back as the same (facts/netconfig.py)
            network=self.cidr, subnet_len=self.subnet_len if self.cidr else DEFAULT_SUBNET_LEN,
            backend=Backend(type=self.backend, vni=self.vni if vxlan else 1,
                            port=self.port if vxlan else 0, mtu=self.mtu if vxlan else 0,
                            direct_routing=self.direct_routing and vxlan),
            ipv6_network=self.ipv6_cidr,
            ipv6_subnet_len=self.ipv6_subnet_len if self.ipv6_cidr is not None else None,
            nftables=self.nftables)


def parse_options(config: Mapping[str, object]) -> NetworkOptions:
    """Validate each option on its own first, then their combinations."""

    def get(key: str) -> object:
        value = config.get(key)
        return DEFAULTS[key] if value is None else value

    subnet_manager = _parse_subnet_manager(get("subnet-manager"))
    cidr = _parse_cidr(get("cidr"), subnet_manager)
    subnet_len = _parse_int("subnet-len", get("subnet-len"))
    if not 1 <= subnet_len <= MAX_SUBNET_LEN:
        raise InvalidOption(
            "subnet-len",
            f"{subnet_len} is out of range; use a prefix length from 1 to {MAX_SUBNET_LEN}",
        )
    backend = _parse_backend(get("backend"))
    iface = _parse_iface(get("iface"))
    port = _parse_int("port", get("port"))
    if not 0 <= port <= MAX_PORT:
        raise InvalidOption(
            "port",
            f"{port} is out of range; use 1 to {MAX_PORT}, "
            f"or 0 for the kernel default {VXLAN_KERNEL_PORT}",
        )
    vni = _parse_int("vni", get("vni"))
    if not 1 <= vni <= MAX_VNI:
        raise InvalidOption(
            "vni",
            f"{vni} is out of range; use 1 to {MAX_VNI} (flanneld's device "
            "flannel.<vni> must fit Linux's 15-character names)",
        )
    mtu = _parse_mtu(get("mtu"), backend)
    direct_routing = _parse_direct_routing(get("direct-routing"), backend)
    ipv6_cidr = _parse_ipv6_cidr(get("ipv6-cidr"))
    ipv6_subnet_len = DEFAULT_IPV6_SUBNET_LEN
    if ipv6_cidr is not None:   # (unused, and not checked, while IPv6 is off)
        ipv6_subnet_len = _parse_int("ipv6-subnet-len", get("ipv6-subnet-len"))
        if not 1 <= ipv6_subnet_len <= MAX_IPV6_SUBNET_LEN:
            raise InvalidOption(
                "ipv6-subnet-len", f"{ipv6_subnet_len} is out of range; use a prefix length "
                                   f"from 1 to {MAX_IPV6_SUBNET_LEN}")
        _check_ipv6_combination(ipv6_cidr, ipv6_subnet_len, vni, backend)
        if mtu and mtu - VXLAN_OVERHEAD < IPV6_MIN_MTU:
            raise InvalidOption(
                "mtu", f"{mtu} leaves pods {mtu - VXLAN_OVERHEAD} bytes, less than IPv6's "
                       f"{IPV6_MIN_MTU} (Linux takes IPv6 off a smaller device); use at least "
                       f"{IPV6_MIN_MTU + VXLAN_OVERHEAD} with ipv6-cidr, or 0 for the "
                       "interface's")

    nftables = _parse_bool("enable-nftables", get("enable-nftables"))
    tx_checksum_off = _parse_offload(get("disable-vxlan-tx-checksumming"))

    if cidr is None and ipv6_cidr is None:
        raise InvalidOption(
            "cidr", "it is empty, and so is ipv6-cidr: set cidr (an IPv4 network such as "
                    "10.1.0.0/16), ipv6-cidr for IPv6-only, or both for dual-stack")
    shortest = cidr.prefixlen + MIN_SUBNETS_BITS if cidr else 0
    if subnet_len < shortest:
        if shortest > MAX_SUBNET_LEN:
            raise InvalidOption(
                "cidr",
                f"{cidr} is too small for flannel; use a prefix of "
                f"/{MAX_SUBNET_LEN - MIN_SUBNETS_BITS} or shorter",
            )
        raise InvalidOption(
            "subnet-len",
            f"{subnet_len} leaves cidr {cidr} fewer than four subnets, which flanneld "
            f"refuses; use {shortest} to {MAX_SUBNET_LEN}",
        )
    return NetworkOptions(
        cidr=cidr, subnet_len=subnet_len, backend=backend, vni=vni, port=port, iface=iface,
        mtu=mtu, direct_routing=direct_routing, ipv6_cidr=ipv6_cidr,
        ipv6_subnet_len=ipv6_subnet_len, nftables=nftables, tx_checksum_off=tx_checksum_off,
        subnet_manager=subnet_manager,
    )


def _check_ipv6_combination(ipv6_cidr: ipaddress.IPv6Network, subnet_len: int, vni: int,
                            backend: str) -> None:
    shortest = ipv6_cidr.prefixlen + MIN_SUBNETS_BITS
    if subnet_len < shortest:
        raise InvalidOption(
            "ipv6-subnet-len",
            f"{subnet_len} leaves ipv6-cidr {ipv6_cidr} fewer than four subnets, which "
            f"flanneld refuses; use {shortest} to {MAX_IPV6_SUBNET_LEN}")
    if backend == "vxlan" and vni > MAX_VNI_WITH_IPV6:
        raise InvalidOption(
            "vni", f"{vni} is too long for IPv6: flanneld's device flannel-v6.{vni} would "
                   f"pass Linux's 15 characters; use 1 to {MAX_VNI_WITH_IPV6}, or set "
                   "ipv6-cidr to \"\"")


def _quoted(value: object) -> str:
    # Strings are quoted so that an operator sees stray spaces; others as-is.
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _parse_int(option: str, value: object) -> int:
    # bool is an int subclass; a True here is a mistake, not a 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOption(option, f"{_quoted(value)} is not a whole number")
    return value


def _parse_cidr(value: object, subnet_manager: str = ETCD) -> Optional[ipaddress.IPv4Network]:
    if not isinstance(value, str):
        raise InvalidOption("cidr", f"{_quoted(value)} is not an IPv4 network")
    text = value
    if not text and subnet_manager == KUBERNETES:
        return None   # IPv6-only, if ipv6-cidr is set (checked with it)
    if not text:
        # flanneld's etcd subnet manager (v0.27, v0.28) cannot lease IPv6-only
        # nodes: with no IPv4 public IP every node takes the first one's lease
        raise InvalidOption(
            "cidr", "it is empty, and flanneld cannot run IPv6-only with etcd (every node "
                    "would get the same IPv6 subnet); set an IPv4 network such as 10.1.0.0/16 "
                    "(with ipv6-cidr for dual-stack), or subnet-manager=kubernetes for IPv6-only")
    if "," in text:   # Calico's dual-stack form
        raise InvalidOption(
            "cidr", f"{_quoted(text)} holds more than one network; put the IPv4 pod network "
                    "in cidr and the IPv6 one in ipv6-cidr")
    try:
        address = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise InvalidOption("cidr", f"{_quoted(text)} is not an IPv4 network") from None
    if address.version == 6:
        raise InvalidOption(
            "cidr",
            f"{_quoted(text)} is an IPv6 network; cidr is the IPv4 pod network "
            "such as 10.1.0.0/16, and ipv6-cidr the IPv6 one",
        )
    assert isinstance(address, ipaddress.IPv4Network)
    if "/" not in text:
        raise InvalidOption(
            "cidr", f"{_quoted(text)} has no prefix length; write it like {text}/16"
        )
    if str(address.network_address) != text.split("/", 1)[0]:
        raise InvalidOption(
            "cidr", f"{_quoted(text)} has host bits set; did you mean {address}?"
        )
    for unusable, label in _UNUSABLE:
        if address.overlaps(unusable):
            raise InvalidOption(
                "cidr",
                f"{_quoted(text)} overlaps {label}; use a private range such as 10.1.0.0/16",
            )
    return address


def _parse_ipv6_cidr(value: object) -> Optional[ipaddress.IPv6Network]:
    if not isinstance(value, str):
        raise InvalidOption("ipv6-cidr", f"{_quoted(value)} is not an IPv6 network")
    text = value
    if text == "":
        return None   # IPv4 only
    if "%" in text:   # a zone (fe80::1%eth0): Python takes it, flanneld (Go) does not
        raise InvalidOption("ipv6-cidr", f"{_quoted(text)} is not an IPv6 network")
    try:
        address = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise InvalidOption("ipv6-cidr", f"{_quoted(text)} is not an IPv6 network") from None
    if address.version == 4:
        raise InvalidOption("ipv6-cidr", f"{_quoted(text)} is an IPv4 network; the IPv4 pod "
                                         "network is cidr: give an IPv6 network such as "
                                         "fd10:1::/56")
    assert isinstance(address, ipaddress.IPv6Network)
    if "/" not in text:
        raise InvalidOption("ipv6-cidr",
                            f"{_quoted(text)} has no prefix length; write it like {text}/56")
    if address.network_address != ipaddress.IPv6Address(text.split("/", 1)[0]):
        raise InvalidOption("ipv6-cidr",
                            f"{_quoted(text)} has host bits set; did you mean {address}?")
    for unusable, label in _UNUSABLE_V6:
        if address.overlaps(unusable):
            raise InvalidOption("ipv6-cidr", f"{_quoted(text)} overlaps {label}; use a unique "
                                             "local range such as fd10:1::/56")
    if address.prefixlen > MAX_IPV6_SUBNET_LEN - MIN_SUBNETS_BITS:
        raise InvalidOption("ipv6-cidr", f"{address} is too small for flannel; use a prefix "
                                         f"of /{MAX_IPV6_SUBNET_LEN - MIN_SUBNETS_BITS} "
                                         "or shorter")
    return address


def _parse_mtu(value: object, backend: str) -> int:
    mtu = _parse_int("mtu", value)
    if mtu == 0:
        return 0
    if not MIN_MTU <= mtu <= MAX_MTU:
        raise InvalidOption(
            "mtu", f"{mtu} is out of range; use {MIN_MTU} to {MAX_MTU} (pods get the mtu "
                   f"less vxlan's {VXLAN_OVERHEAD} bytes, at least {MIN_POD_MTU}), or 0 for "
                   "the interface's MTU")
    if backend != "vxlan":
        raise InvalidOption(
            "mtu", f"{mtu} cannot be given to {backend}, which has no MTU of its own (pods get "
                   "the interface's); use 0, or the vxlan backend")
    return mtu


def _parse_bool(option: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidOption(option, f"{_quoted(value)} is not true or false")
    return value


def _parse_offload(value: object) -> Optional[bool]:
    """auto (None), true or false; a boolean is what an earlier revision's
    boolean option left set (if Juju kept it across the refresh)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str) else None
    if text in ("auto", "true", "false"):
        return None if text == "auto" else text == "true"
    raise InvalidOption("disable-vxlan-tx-checksumming",
                        f"{_quoted(value)} is not auto, true or false")


def _parse_subnet_manager(value: object) -> str:
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in SUBNET_MANAGERS:
        raise InvalidOption("subnet-manager", f"{_quoted(value)} is not etcd or kubernetes")
    return text


def _parse_direct_routing(value: object, backend: str) -> bool:
    _parse_bool("direct-routing", value)
    if value and backend != "vxlan":
        raise InvalidOption(
            "direct-routing", f"applies to vxlan only ({backend} routes every node directly "
                              "already); set it to false, or use the vxlan backend")
    return value


def _parse_backend(value: object) -> str:
    if value not in BACKENDS:
        raise InvalidOption(
            "backend", f"{_quoted(value)} is not supported; use vxlan or host-gw"
        )
    assert isinstance(value, str)
    return value


def _parse_iface(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidOption("iface", f"{_quoted(value)} is not an interface name")
    if value == "":
        return value
    try:
        # flanneld's -iface also takes the IP address of the interface.
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if len(value.encode()) > 15:
        raise InvalidOption(
            "iface", f"{_quoted(value)} is longer than the 15 characters Linux allows"
        )
    if not _IFACE_NAME.fullmatch(value):
        raise InvalidOption(
            "iface",
            f"{_quoted(value)} is not an interface name or IP address "
            "(names use letters, digits, '.', '-', '_', '@'; no spaces, '/' or ':')",
        )
    return value
