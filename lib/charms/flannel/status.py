"""The unit's workload status, worked out from what the hook observed.

Handlers record facts (a problem they hit, or none); `assess` turns the facts
into the one status an operator sees, most actionable problem first. Keeping
this a pure function means every status message is tested without a hook.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional

from charms.flannel.subnet import SubnetEnv

WAITING_FOR_ETCD = "Waiting for etcd relation."
NEGOTIATING = "Negotiating flannel network subnet."
SERIES_UPGRADE = "Series upgrade in progress"
SERVICE_FAILING = "flannel.service is failing: flanneld exited after start (journalctl -u flannel)"
WAITING_FOR_CNI = "Waiting for the principal on the cni relation."
RECORD_ADVICE = "no file is changed; remove and re-add flannel (unproven files stay)"


@dataclass(frozen=True)
class Status:
    state: str  # maintenance | blocked | waiting | active
    message: str


@dataclass(frozen=True)
class Observations:
    """Everything `assess` needs, gathered by the handlers of one hook."""

    series_upgrade: bool = False
    record_problem: Optional[str] = None  # install_record.record_problem text
    resource_problem: Optional[str] = None  # ResourceProblem text
    installed: bool = False
    config_problem: Optional[str] = None  # InvalidOption text
    etcd_related: bool = False
    etcd_tls_ready: bool = False
    etcd_problem: Optional[str] = None  # EtcdUnavailable reason
    network_configured: bool = False
    service_active: bool = False
    # the charm started flanneld with its current inputs (this hook or an
    # earlier one): not running now means it exited, not that it is starting
    service_started: bool = False
    cidr: Optional[ipaddress.IPv4Network] = None  # the network etcd confirmed
    ipv6_cidr: Optional[ipaddress.IPv6Network] = None  # its IPv6 network (dual-stack)
    subnet: Optional[SubnetEnv] = None
    # the conflist is written and published to the principal (before that,
    # the container runtime has no flannel network to start a pod on)
    cni_configured: bool = True
    # what stops every new pod: a plugin of the CNI chain missing
    # (cni.chain_problem), a config the runtime fails on, an address on cni0
    # that is not flannel's (pod_bridge)
    cni_problem: Optional[str] = None
    # flannel's old gateway still on cni0 (taken off at the next hook)
    bridge_pending: Optional[str] = None


def assess(seen: Observations) -> Status:
    if seen.record_problem:
        # Nothing is written or removed until the operator acts: flanneld and
        # the pods carry on as they are.
        return Status("blocked", f"{seen.record_problem}: {RECORD_ADVICE}")
    if seen.series_upgrade:
        return Status("blocked", SERIES_UPGRADE)
    if seen.resource_problem:
        return Status("blocked", seen.resource_problem)
    if not seen.installed:
        return Status("maintenance", "Installing flannel.")
    if seen.config_problem:
        return Status("blocked", seen.config_problem)
    if not seen.etcd_related:
        return Status("blocked", WAITING_FOR_ETCD)
    if not seen.etcd_tls_ready:
        return Status("waiting", "Waiting for etcd client credentials.")
    if seen.etcd_problem:
        return Status("waiting", seen.etcd_problem)
    if not seen.network_configured:
        return Status("waiting", "Waiting to write the flannel network to etcd.")
    if not seen.service_active:
        if seen.service_started:
            return Status("waiting", SERVICE_FAILING)
        return Status("waiting", "Waiting for flannel.service to start.")
    if not seen.cni_configured:
        return Status("waiting", WAITING_FOR_CNI)
    if seen.cni_problem:
        # flanneld is fine, but no pod on this node can start.
        return Status("blocked", seen.cni_problem)
    if seen.bridge_pending:
        return Status("waiting", seen.bridge_pending)
    subnet = seen.subnet
    # A subnet.env left from before a cidr change (or IPv6 turned on or
    # off) is stale until flanneld leases anew; claiming it would be a lie.
    stale = seen.cidr is not None and subnet is not None and not _inside(
        subnet, seen.cidr, seen.ipv6_cidr)
    if subnet is None or stale:
        return Status("waiting", NEGOTIATING)
    return Status("active", "Flannel subnet " + ", ".join(map(str, subnet.gateways)))


def _inside(subnet: SubnetEnv, cidr: ipaddress.IPv4Network,
            ipv6_cidr: Optional[ipaddress.IPv6Network]) -> bool:
    if not subnet.subnet.network.subnet_of(cidr):
        return False
    if ipv6_cidr is None:
        return subnet.ipv6_subnet is None
    return subnet.ipv6_subnet is not None and subnet.ipv6_subnet.network.subnet_of(ipv6_cidr)
