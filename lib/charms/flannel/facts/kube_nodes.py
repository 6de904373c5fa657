"""Nodes as flanneld's kube subnet manager sees them (subnet-manager=
kubernetes): which Node is this machine, whether kube-controller-manager
gave it pod CIDRs flannel can serve, and flanneld's annotations on it.

flanneld v0.28 (pkg/subnet/kube): the node's lease is its spec.podCIDRs,
allocated by kube-controller-manager (--allocate-node-cidrs, which
Charmed Kubernetes' control plane leaves off); without one flanneld exits
("pod cidr not assigned"), and with one outside the network config's
Network it exits after it annotated the node. It watches every Node
(list/watch nodes) and patches its own Node's status with its annotations,
all under flannel.alpha.coreos.com/, which it never removes.
"""
from __future__ import annotations

import ipaddress
import json
from typing import Iterable, NamedTuple, Optional

from .etcd_keys import Lease

ANNOTATION_PREFIX = "flannel.alpha.coreos.com/"
# what flanneld writes on its own Node (pkg/subnet/kube/annotations.go);
# node-public-ip(v6) and public-ip(v6)-overwrite are the operator's
FLANNELD_ANNOTATIONS = ("kube-subnet-manager", "backend-type", "backend-data",
                        "backend-v6-data", "public-ip", "public-ipv6")
# the reason of the NetworkUnavailable condition flanneld sets False on its Node
FLANNELD_CONDITION_REASON = "FlannelIsUp"
CONTROL_PLANE = "kubernetes-control-plane"


class KubeUnavailable(Exception):
    """The Kubernetes API cannot be asked: the reason, for a status."""

    def __init__(self, reason: str, status: Optional[int] = None):
        super().__init__(reason)
        self.reason = reason
        self.status = status


class KubeRefused(KubeUnavailable):
    """The Kubernetes API cannot be asked until someone changes something:
    a kubeconfig that cannot work, credentials refused (401), a permission
    missing (403), no API at the server's URL. Blocked, not waiting."""


class AmbiguousNode(ValueError):
    """More than one Node could be this machine, and none is the one its
    kubelet registered: the reason, for a blocked status."""


class Node(NamedTuple):
    name: str
    addresses: tuple[str, ...]        # status.addresses (InternalIP, ExternalIP, Hostname)
    pod_cidrs: tuple[str, ...]        # spec.podCIDRs (or spec.podCIDR)
    annotations: tuple[tuple[str, str], ...]

    @classmethod
    def from_api(cls, item: dict) -> "Node":
        spec, status = item.get("spec") or {}, item.get("status") or {}
        cidrs = spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
        annotations = (item.get("metadata") or {}).get("annotations") or {}
        return cls(name=item["metadata"]["name"],
                   addresses=tuple(a.get("address", "") for a in status.get("addresses") or ()),
                   pod_cidrs=tuple(cidrs), annotations=tuple(sorted(annotations.items())))

    @property
    def ip_addresses(self) -> set[str]:
        """Its addresses that are IP addresses, normalised ("fd00::12")."""
        found = set()
        for address in self.addresses:
            try:
                found.add(str(ipaddress.ip_address(address)))
            except ValueError:   # (Hostname entries)
                continue
        return found

    @property
    def flanneld_annotations(self) -> list[str]:
        """The annotations flanneld wrote on this Node (full keys)."""
        ours = {ANNOTATION_PREFIX + name for name in FLANNELD_ANNOTATIONS}
        return [key for key, _ in self.annotations if key in ours]


def node_of(nodes: Iterable[Node], addresses: Iterable[str], hostname: str = "",
            name: Optional[str] = None) -> Optional[Node]:
    """The Node that is this machine: the one named `name` (the Node it was
    found to be before) if it is still there, else the one whose status
    names one of its addresses (kubelet's --node-ip), whatever name kubelet
    gave it (the hostname, or the FQDN on some clouds). Two such Nodes (a
    stale Node of a replaced machine whose address was reused): the one
    kubelet registered under this machine's hostname, else AmbiguousNode."""
    nodes = list(nodes)
    if name:
        for node in nodes:
            if node.name == name:
                return node
    mine = {str(ipaddress.ip_address(a.split("%")[0])) for a in addresses}
    found = [node for node in nodes if mine & node.ip_addresses]
    if len(found) <= 1:
        return found[0] if found else None
    host = hostname.strip().lower()
    named = [node for node in found if host and {node.name.lower(), node.name.lower().split(
        ".")[0]} & {host, host.split(".")[0]}]
    if len(named) == 1:
        return named[0]
    both = " and ".join(node.name for node in found)
    shared = sorted(mine & set.intersection(*(node.ip_addresses for node in found)))
    raise AmbiguousNode(
        f"Nodes {both} both have this machine's address {', '.join(shared) or '(one each)'} "
        f"and neither is named {hostname or 'as this machine'}: delete the stale one "
        "(kubectl delete node NAME)")


def allocation_advice(subnet_len: Optional[int], ipv6_subnet_len: Optional[int]) -> str:
    """What the operator sets on the control plane for node pod CIDRs that
    match flannel's subnet-len options, per family it serves (None: not
    that family; kube-controller-manager refuses the IPv4 mask size on a
    single-stack IPv6 cluster)."""
    args = "allocate-node-cidrs=true"
    if subnet_len is not None:
        args += f" node-cidr-mask-size-ipv4={subnet_len}"
    if ipv6_subnet_len is not None:
        args += f" node-cidr-mask-size-ipv6={ipv6_subnet_len}"
    return f"juju config {CONTROL_PLANE} controller-manager-extra-args='{args}'"


def pod_cidr_problem(node: Node, networks: Iterable[tuple], advice: str) -> Optional[str]:
    """Why flanneld cannot lease on this Node (None for nothing): no pod
    CIDR (kube-controller-manager allocates none), one outside the pod
    networks flannel serves (its --cluster-cidr is not flannel's cidr), or
    one of another size than subnet-len (its node-cidr-mask-size). Networks
    are (network, subnet length) pairs."""
    if not node.pod_cidrs:
        return (f"Node {node.name} has no pod CIDR: kube-controller-manager must allocate "
                f"them for subnet-manager=kubernetes: {advice}")
    served = list(networks)
    for text in node.pod_cidrs:
        cidr = ipaddress.ip_network(text, strict=False)
        mine = [(n, length) for n, length in served if cidr.version == n.version]
        if not mine:
            continue   # a family flannel does not serve (a Node from dual-stack days)
        if not cidr.subnet_of(mine[0][0]):
            return (f"Node {node.name}'s pod CIDR {cidr} is outside flannel's "
                    f"{', '.join(str(n) for n, _ in served)}: kube-controller-manager's "
                    "--cluster-cidr must be the cidr flannel publishes (restart it after a "
                    "cidr change)")
        if cidr.prefixlen != mine[0][1]:
            option = "subnet-len" if cidr.version == 4 else "ipv6-subnet-len"
            return (f"Node {node.name}'s pod CIDR {cidr} is not a /{mine[0][1]} ({option}): "
                    f"kube-controller-manager's node-cidr-mask-size must match: {advice}")
    families = {ipaddress.ip_network(text, strict=False).version for text in node.pod_cidrs}
    for network, _ in served:
        if network.version not in families:
            option = "cidr" if network.version == 4 else "ipv6-cidr"
            return (f"Node {node.name} has no IPv{network.version} pod CIDR for {option} "
                    f"{network}: a Node keeps the pod CIDRs it was first given, so "
                    f"kube-controller-manager must allocate every family before it registers "
                    f"({advice}); set {option} back, or delete the Node and restart its kubelet")
    return None


def lease_of(node: Node, families: Optional[Iterable[int]] = None) -> Optional[Lease]:
    """A Node as flanneld's kube subnet manager leases it, in the shape of
    an etcd lease (the actions list and probe both alike): its pod CIDRs of
    the families flannel serves (`families`: 4, 6; None: those flanneld
    annotated it with an address for), with those addresses and VTEPs; None
    for a Node flanneld has not annotated (it is not in the overlay). An
    IPv6-only lease (a Node flanneld serves IPv6 alone, whatever pod CIDRs
    it has) is keyed by its IPv6 pod CIDR, with its IPv6 address and VTEP
    where an etcd lease has the IPv4 ones. (flanneld leaves an IPv4
    annotation it wrote before, and writes public-ip 0.0.0.0 for IPv6-only
    host-gw: the annotations alone do not say what it serves now.)"""
    annotations = dict(node.annotations)
    if annotations.get(ANNOTATION_PREFIX + "kube-subnet-manager") != "true":
        return None
    subnets = {}
    for text in node.pod_cidrs:   # (as flanneld and the routes write them)
        try:
            cidr = ipaddress.ip_network(text, strict=False)
        except ValueError:
            continue
        subnets.setdefault(cidr.version, str(cidr))
    if families is not None:
        served = {version: version in set(families) for version in (4, 6)}
    else:
        served = {4: annotations.get(ANNOTATION_PREFIX + "public-ip") not in (None, "0.0.0.0"),
                  6: ANNOTATION_PREFIX + "public-ipv6" in annotations}
        served[4] = served[4] or not served[6]
    if 4 in subnets and served[4]:
        subnet, ipv6_subnet = subnets[4], subnets.get(6) if served[6] else None
        names = {"PublicIP": "public-ip", "PublicIPv6": "public-ipv6",
                 "BackendData": "backend-data", "BackendV6Data": "backend-v6-data"}
    elif 6 in subnets and served[6]:   # IPv6-only
        subnet, ipv6_subnet = subnets[6], None
        names = {"PublicIP": "public-ipv6", "BackendData": "backend-v6-data"}
    else:
        return None
    attributes: dict = {"BackendType": annotations.get(ANNOTATION_PREFIX + "backend-type")}
    for key, name in names.items():
        value = annotations.get(ANNOTATION_PREFIX + name)
        if key.startswith("Backend"):
            try:
                attributes[key] = json.loads(value or "null")
            except ValueError:
                attributes[key] = None
        elif value:
            attributes[key] = value
    return Lease(key=f"nodes/{node.name}", subnet=subnet, ipv6_subnet=ipv6_subnet,
                 attributes=attributes)
