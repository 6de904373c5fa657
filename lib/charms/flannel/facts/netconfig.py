"""flannel's network config, typed: what flanneld reads from <prefix>/config.

`NetworkConfig.from_json` parses the JSON once, with flanneld's own
defaults (pkg/subnet/config.go, flanneld v0.27: ParseConfig and
CheckNetworkConfig), and everything the charm derives from a config lives
here: the pod networks, the vxlan devices and their MTUs, whether a lease
or a bridge address belongs to it, what the cni relation carries.
`to_json()` is what the charm writes to etcd and remembers.
"""
from __future__ import annotations

import ipaddress
import json
from typing import Any, NamedTuple, Optional, Union

VXLAN = "vxlan"
HOST_GW = "host-gw"
# flanneld v0.27's backend for a config with no Backend at all (a Backend
# that names no Type it refuses: "unknown backend type")
NO_BACKEND = "udp"
DEFAULT_VNI = 1
# vxlan's overhead over IPv4: flanneld gives flannel.<VNI> and every pod
# (FLANNEL_MTU) the backend's MTU less this.
VXLAN_OVERHEAD = 50
# vxlan over IPv6 costs 20 bytes more: Linux caps flannel-v6.<VNI> at its
# interface's MTU less 70, below the MTU flanneld asks for (FLANNEL_MTU).
VXLAN_V6_EXTRA_OVERHEAD = 20
# IPv6's smallest link MTU (RFC 8200): Linux takes IPv6 off a device below it.
IPV6_MIN_MTU = 1280

Address = Union[ipaddress.IPv4Interface, ipaddress.IPv6Interface]


class NotANetworkConfig(ValueError):
    """JSON that is no flannel network config (flanneld would refuse it)."""


class Backend(NamedTuple):
    type: str = VXLAN
    vni: int = DEFAULT_VNI
    port: int = 0              # 0: the kernel's vxlan port (8472)
    mtu: int = 0               # the vxlan packets' MTU; 0: the interface's
    direct_routing: bool = False


class NetworkConfig(NamedTuple):
    # the IPv4 pod network; None: IPv6-only (EnableIPv4 false, flanneld >= 0.22
    # on the Kubernetes API only: its etcd subnet manager keys leases by IPv4)
    network: Optional[ipaddress.IPv4Network]
    subnet_len: int
    backend: Backend = Backend()
    ipv6_network: Optional[ipaddress.IPv6Network] = None   # dual-stack; None: IPv4 only
    ipv6_subnet_len: Optional[int] = None
    # flanneld >= 0.25 writes its masquerade and forward rules in nft tables
    # flannel-ipv4 and flannel-ipv6 instead of iptables chains (EnableNFTables)
    nftables: bool = False

    # --- JSON ---------------------------------------------------------------------
    @classmethod
    def from_json(cls, value: Union[dict, str, bytes]) -> "NetworkConfig":
        """The config flanneld makes of this JSON, its defaults filled in;
        NotANetworkConfig if it could not be one."""
        try:
            data = json.loads(value) if isinstance(value, (str, bytes)) else value
            if not isinstance(data, dict):
                raise NotANetworkConfig("not a JSON object")
            # flanneld reads EnableIPv4 true when absent (ParseConfig)
            ipv4 = _flag(data, "EnableIPv4", default=True)
            network = ipaddress.IPv4Network(str(data["Network"])) if ipv4 else None
            backend = data.get("Backend")
            if backend is None:
                backend = {"Type": NO_BACKEND}
            if not isinstance(backend, dict) or not backend.get("Type"):
                raise NotANetworkConfig("its Backend names no Type")
            kind = str(backend["Type"]).lower()
            ipv6 = None
            if data.get("EnableIPv6") and data.get("IPv6Network"):
                ipv6 = ipaddress.IPv6Network(str(data["IPv6Network"]))
            if network is None and ipv6 is None:
                raise NotANetworkConfig("it enables neither IPv4 nor IPv6")
            return cls(
                network=network,
                subnet_len=int(data.get("SubnetLen") or (
                    _default_subnet_len(network, 24, 22) if network else 24)),
                backend=Backend(type=kind,
                                vni=int(backend.get("VNI") or DEFAULT_VNI),
                                port=int(backend.get("Port") or 0),
                                mtu=int(backend.get("MTU") or 0),
                                direct_routing=bool(backend.get("DirectRouting"))),
                ipv6_network=ipv6,
                ipv6_subnet_len=(int(data.get("IPv6SubnetLen")
                                     or _default_subnet_len(ipv6, 64, 62)) if ipv6 else None),
                nftables=_flag(data, "EnableNFTables"))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            if isinstance(error, NotANetworkConfig):
                raise
            raise NotANetworkConfig(str(error)) from None

    @classmethod
    def parse(cls, value: Union[dict, str, bytes, None]) -> Optional["NetworkConfig"]:
        """from_json, or None for nothing or garbage."""
        if value is None:
            return None
        try:
            return cls.from_json(value)
        except NotANetworkConfig:
            return None

    def to_json(self) -> dict[str, Any]:
        """The JSON the charm writes: only what differs from flanneld's
        defaults where the option leaves it out (port, mtu, direct routing)."""
        backend: dict[str, Any] = {"Type": self.backend.type}
        if self.backend.type == VXLAN:
            backend["VNI"] = self.backend.vni
            if self.backend.port:
                backend["Port"] = self.backend.port
            if self.backend.mtu:
                backend["MTU"] = self.backend.mtu
            if self.backend.direct_routing:
                backend["DirectRouting"] = True
        config: dict[str, Any] = ({"Network": str(self.network), "SubnetLen": self.subnet_len}
                                  if self.network is not None else {"EnableIPv4": False})
        config["Backend"] = backend
        if self.ipv6_network is not None:
            config.update(EnableIPv6=True, IPv6Network=str(self.ipv6_network),
                          IPv6SubnetLen=self.ipv6_subnet_len)
        if self.nftables:
            config["EnableNFTables"] = True
        return config

    @property
    def rules_tool(self) -> str:
        """What flanneld writes its rules with: "nft" or "iptables"."""
        return "nft" if self.nftables else "iptables"

    # --- the pod networks -------------------------------------------------------
    @property
    def ipv6(self) -> Optional[tuple[ipaddress.IPv6Network, int]]:
        """(IPv6Network, IPv6SubnetLen), None for IPv4 only."""
        if self.ipv6_network is None:
            return None
        return self.ipv6_network, int(self.ipv6_subnet_len or 64)

    @property
    def pod_networks(self) -> tuple:
        """(network, subnet length) of each family it has, IPv4 first."""
        ipv4 = ((self.network, self.subnet_len),) if self.network is not None else ()
        return ipv4 + ((self.ipv6,) if self.ipv6 else ())

    @property
    def primary_network(self) -> Union[ipaddress.IPv4Network, ipaddress.IPv6Network]:
        """The first family's pod network: IPv4's, or IPv6's when IPv6-only."""
        return self.pod_networks[0][0]

    @property
    def published_cidr(self) -> str:
        """The pod network as the cni relation carries it: "10.1.0.0/16", or
        for dual-stack "10.1.0.0/16,fd10:1::/56" (IPv4 first, no spaces),
        which kubernetes-control-plane passes as is to
        kube-controller-manager's and kube-proxy's --cluster-cidr."""
        return ",".join(str(network) for network, _ in self.pod_networks)

    def could_be_gateway(self, address: Address) -> bool:
        """Whether a bridge address ("10.1.52.1/24") can be the gateway of a
        lease of this config: in the network of its family, with the
        subnets' prefix length (flanneld only keeps a lease of that length)."""
        for network, length in self.pod_networks:
            if address.version == network.version:
                return address.network.prefixlen == length and \
                    address.network.subnet_of(network)
        return False

    def holds(self, lease) -> bool:
        """Whether a lease (subnet_env.SubnetEnv) is one of this config's: a
        subnet of each family the config has, and only of those, each in
        its network with its subnet length. flanneld drops a lease that is
        not (a cidr, length or family change) and leases anew."""
        for network, gateway in ((self.network, lease.subnet),
                                 (self.ipv6_network, lease.ipv6_subnet)):
            if (network is None) != (gateway is None):
                return False
            if gateway is not None and not self.could_be_gateway(gateway):
                return False
        return True

    @property
    def leasable(self) -> int:
        """How many nodes can hold a lease at once: flanneld leases every
        subnet of the network but its first (SubnetMin) up to its last
        (SubnetMax), in each family; the smaller family's count."""
        return min(2 ** (length - network.prefixlen) - 1 for network, length in self.pod_networks)

    def subnets_held(self, subnets) -> int:
        """How many of the leases' first subnets ("10.1.52.0/24") are of this
        config's first network."""
        held = 0
        for subnet in subnets:
            try:
                held += ipaddress.ip_network(subnet).subnet_of(self.primary_network)
            except (ValueError, TypeError):
                continue
        return held

    @property
    def first_subnet(self):
        """The first network's first subnet, which flanneld never leases
        (SubnetMin)."""
        network, length = self.pod_networks[0]
        return ipaddress.ip_network(f"{network.network_address}/{length}")

    # --- the backend's devices -----------------------------------------------------
    @property
    def vxlan(self) -> bool:
        return self.backend.type == VXLAN

    @property
    def vxlan_link(self) -> Optional[str]:
        """The IPv4 vxlan device flanneld makes: flannel.<VNI>; None for
        host-gw, or IPv6-only (flanneld makes only flannel-v6.<VNI>)."""
        return f"flannel.{self.backend.vni}" if self.vxlan and self.network else None

    @property
    def vxlan_v6_link(self) -> Optional[str]:
        """flannel-v6.<VNI> with IPv6 over vxlan, else None."""
        return f"flannel-v6.{self.backend.vni}" if self.vxlan and self.ipv6 else None

    def pod_mtu(self, underlay_mtu: Optional[int]) -> Optional[int]:
        """The MTU flanneld gives pods (FLANNEL_MTU) on an interface of
        `underlay_mtu`: the backend's MTU (else the interface's) less vxlan's
        overhead, or for host-gw the interface's; None when not known."""
        if not self.vxlan:
            return underlay_mtu
        wire = self.backend.mtu or underlay_mtu
        return int(wire) - VXLAN_OVERHEAD if wire else None

    def pods_mtu(self, underlay_mtu: Optional[int]) -> Optional[int]:
        """The MTU pods get (the conflist's, steps/cni.py): flanneld's
        (pod_mtu), or with IPv6 over vxlan what flannel-v6.<VNI> carries on
        that interface, which Linux caps 20 bytes under flanneld's MTU
        (vxlan over IPv6 costs 70): a pod's larger IPv6 packet would cross
        only by "packet too big", and not at all where that is filtered.
        One MTU serves both families of a pod."""
        pods = self.pod_mtu(underlay_mtu)
        return vxlan_v6_device_mtu(pods, underlay_mtu) if self.vxlan_v6_link else pods

    def vxlan_mtus(self, underlay_mtu: Optional[int]) -> dict[str, Optional[int]]:
        """The vxlan devices flanneld makes for this config, each with the MTU
        it gets (None: not known). flannel-v6.<VNI> gets the pods' MTU, at
        most what Linux allows a vxlan device over IPv6 there."""
        if not self.vxlan:
            return {}
        pods = self.pod_mtu(underlay_mtu)
        devices = {self.vxlan_link: pods} if self.vxlan_link else {}
        if self.vxlan_v6_link:
            devices[self.vxlan_v6_link] = vxlan_v6_device_mtu(pods, underlay_mtu)
        return devices


def vxlan_v6_device_mtu(pod_mtu: Optional[int], underlay_mtu: Optional[int]) -> Optional[int]:
    """The MTU flannel-v6.<VNI> gets for pods of `pod_mtu` on an interface
    of `underlay_mtu` (Linux caps it at the interface's MTU less 70)."""
    if pod_mtu is None:
        return None
    if underlay_mtu is None:
        return pod_mtu - VXLAN_V6_EXTRA_OVERHEAD
    return min(pod_mtu, underlay_mtu - VXLAN_OVERHEAD - VXLAN_V6_EXTRA_OVERHEAD)


def _default_subnet_len(network, per_host: int, big_enough: int) -> int:
    """flanneld's default lease length: a /24 (IPv6: /64) per host when the
    network is big enough, else the network split in four."""
    return per_host if network.prefixlen <= big_enough else network.prefixlen + 2


def _flag(data: dict, key: str, default: bool = False) -> bool:
    """A boolean of the config as flanneld reads it: Go's JSON matches the
    key case-insensitively and refuses a value that is not a boolean."""
    value = next((v for k, v in data.items() if k.lower() == key.lower()), default)
    if not isinstance(value, bool):
        raise NotANetworkConfig(f"{key} is not true or false")
    return value
