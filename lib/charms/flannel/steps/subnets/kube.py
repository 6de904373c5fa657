"""subnet-manager=kubernetes: flanneld on the Kubernetes API
(-kube-subnet-mgr), through root's kubeconfig, which the principal writes.

flanneld v0.28 (pkg/subnet/kube): this node's lease is its Node's
spec.podCIDRs, allocated by kube-controller-manager (--allocate-node-cidrs,
which Charmed Kubernetes' control plane leaves off); without one flanneld
exits ("pod cidr not assigned"). It annotates its Node as it starts
(flannel.alpha.coreos.com/...: its address, backend, VTEP) and routes every
annotated Node's pod CIDRs; it never annotates again while it runs, and
never removes what it wrote.

Serving finds this machine's Node (facts/kube_nodes.py node_of), checks
its pod CIDRs against flannel's networks and what the other Nodes run, and
writes net-conf.json for flanneld. Until then flanneld is not (re)started
on it: it would exit. update-status's look lists the Nodes: a Node deleted
and registered again has lost flanneld's annotations, so the other nodes
have dropped their routes to it; a restart of flanneld annotates it again.
"""
from __future__ import annotations

import ipaddress
import json
from collections import Counter
from typing import Optional

from ...facts.kube_nodes import (AmbiguousNode, KubeRefused, KubeUnavailable, Node,
                                 allocation_advice, lease_of, node_of, pod_cidr_problem)
from ...facts.netconfig import NetworkConfig
from ...facts.options import KUBERNETES
from ...facts.paths import NET_CONF_MODE
from ...facts.status import Problem
from ..context import HookContext
from ..flags import NETWORK_CONFIGURED
from ..outcome import Outcome
from . import PROBLEMS, Cluster, FlanneldOn, LeaseLook, Leases, LeasesUnreadable, Refusal

UNREACHABLE = "Cannot reach the Kubernetes API: "


def node_subnet(node: Node, network: Optional[NetworkConfig]):
    """The Node's pod CIDR of the network's first family (what keys its
    lease), None if it has none or the network is not known."""
    if network is None:
        return None
    family = network.primary_network.version
    for text in node.pod_cidrs:
        try:
            cidr = ipaddress.ip_network(text, strict=False)
        except ValueError:
            continue
        if cidr.version == family:
            return cidr
    return None


class KubeSubnets:
    name = KUBERNETES
    problems = PROBLEMS[KUBERNETES]
    # its kube-controller-manager allocates the pod CIDRs flanneld leases from
    # the network the cni relation carries, and its kubelet (whose Node
    # flanneld needs) waits for flannel's CNI config
    principal_first = True
    lease_home = "its Node's annotations"

    def __init__(self, ctx: HookContext):
        self.ctx = ctx
        self._listed: Optional[list[Node]] = None   # the Nodes as this hook's look saw them

    def _families(self, network: Optional[NetworkConfig] = None) -> Optional[set]:
        """The families flannel serves (the network given, else the one
        flanneld runs): which of a Node's pod CIDRs are its lease."""
        network = network or self.ctx.confirmed
        return {net.version for net, _ in network.pod_networks} if network else None

    # --- where the leases are kept ------------------------------------------------------
    def reachable(self) -> bool:
        return self.ctx.kubeconfig is not None

    def waiting(self) -> list:
        return [] if self.reachable() else [(Problem.NO_KUBECONFIG, None)]

    def inputs(self, network: Optional[NetworkConfig]) -> Optional[tuple]:
        kubeconfig = self.ctx.kubeconfig_checksum
        if kubeconfig is None:
            return None
        return (KUBERNETES, network.to_json() if network else None, kubeconfig)

    def _nodes(self, out: Outcome) -> Optional[list[Node]]:
        """Every Node, or None with the reason recorded: waiting while the
        API does not answer, blocked while it refuses (or cannot be asked
        with this kubeconfig)."""
        try:
            with self.ctx.kube_api() as api:
                nodes = api.nodes()
        except KubeRefused as refused:
            out.found(Problem.KUBE_ACCESS, f"Cannot use the Kubernetes API: {refused.reason}")
            out.found(Problem.KUBE, None)
            return None
        except KubeUnavailable as away:
            out.found(Problem.KUBE, UNREACHABLE + away.reason).found(Problem.KUBE_ACCESS, None)
            return None
        out.found(Problem.KUBE, None).found(Problem.KUBE_ACCESS, None)
        return nodes

    def _this_node(self, nodes: list[Node], out: Outcome) -> Optional[Node]:
        ctx = self.ctx
        try:
            node = node_of(nodes, ctx.machine_addresses(), ctx.hostname,
                           name=ctx.state.node_name)
        except AmbiguousNode as ambiguous:
            out.found(Problem.NODE, str(ambiguous))
            return None
        out.found(Problem.NODE, None)
        if node is None:
            known = ctx.state.node_name
            out.found(Problem.KUBE, f"Node {known} is gone from the Kubernetes API: waiting for "
                                    "its kubelet to register it again" if known else
                                    "Waiting for kubelet to register this machine as a Node "
                                    "(none has its addresses)")
        return node

    # --- serve the network --------------------------------------------------------------
    def serve(self, network: NetworkConfig, out: Outcome, *, replace: bool,
              refusal: Refusal) -> bool:
        ctx = self.ctx
        for problem in self.problems:   # each worked out afresh, or not reached
            out.found(problem, None)
        nodes = self._nodes(out)
        if nodes is None:
            return False
        node = self._this_node(nodes, out)
        if node is None:
            return False
        advice = allocation_advice(network.subnet_len if network.network else None,
                                   network.ipv6_subnet_len if network.ipv6_network else None)
        unfit = pod_cidr_problem(node, network.pod_networks, advice)
        out.found(Problem.POD_CIDR, unfit)
        if unfit:
            return False   # blocked; a running flanneld runs on as it is
        if replace:
            backends = Counter(lease.attributes.get("BackendType") for lease in
                               (lease_of(node) for node in nodes) if lease is not None)
            refused = refusal(Cluster(backends={b: n for b, n in backends.items() if b},
                                      service_cidr=ctx.service_cidr))
            out.found(Problem.NETWORK, str(refused) if refused else None)
            if refused:
                return False
        ctx.record.install(ctx.paths.net_conf, json.dumps(network.to_json(), indent=1).encode(),
                           NET_CONF_MODE, sole=True)
        ctx.state.node_name = node.name
        return True

    def keep(self, network: NetworkConfig, out: Outcome) -> bool:
        """net-conf.json is this node's own file: nothing to write back."""
        return self.ctx.record.holds(self.ctx.paths.net_conf)

    def flanneld(self, out: Outcome) -> Optional[FlanneldOn]:
        ctx = self.ctx
        node, paths = ctx.state.node_name, ctx.paths
        if not node:
            return None
        return FlanneldOn(
            where=f"kubernetes {node}",
            arguments=("-kube-subnet-mgr", f"-kubeconfig-file={paths.kubeconfig}",
                       f"-net-config-path={paths.net_conf}"),
            preamble=("# subnet-manager=kubernetes: leases are the Nodes' pod CIDRs; this "
                      "machine is", f"# Node {node}", f"Environment=NODE_NAME={node}"),
            # the kubeconfig is the principal's: its bytes, not a record's
            reads=(ctx.record.checksum(paths.net_conf), ctx.kubeconfig_checksum))

    # --- this node's lease ----------------------------------------------------------------
    def look(self, out: Outcome, *, flanneld_started: bool) -> LeaseLook:
        ctx = self.ctx
        nodes = self._nodes(out)
        if nodes is None:
            return LeaseLook(unreachable=True)
        node = self._this_node(nodes, out)
        if node is None:
            return LeaseLook(unreachable=True)
        if node.name != ctx.state.node_name:   # registered again under another name
            out.say(f"This machine's Node is now {node.name}: serving the network again", True)
            out.clear(NETWORK_CONFIGURED)
            return LeaseLook(unreachable=True)
        confirmed = ctx.confirmed
        if confirmed is not None:
            advice = allocation_advice(
                confirmed.subnet_len if confirmed.network else None,
                confirmed.ipv6_subnet_len if confirmed.ipv6_network else None)
            unfit = pod_cidr_problem(node, confirmed.pod_networks, advice)
            out.found(Problem.POD_CIDR, unfit)
            if unfit:
                return LeaseLook(unmendable=True)
        self._listed = nodes
        families = self._families()
        own, lease = lease_of(node, families), ctx.lease()
        lost, gone = None, False
        subnet = node_subnet(node, confirmed)
        if lease is not None and subnet is not None and lease.primary.network != subnet:
            # (registered again, with another pod CIDR: the lease flanneld runs on went)
            lost, gone = (f"Node {node.name}'s pod CIDR is {subnet}, not the "
                          f"{lease.primary.network} flanneld runs on"), True
        elif own is None:
            lost = (f"flanneld's annotations are gone from Node {node.name} (deleted and "
                    "registered again?)")
        others = tuple(held.subnet for held in (lease_of(other, families) for other in nodes)
                       if held is not None and held.key != f"nodes/{node.name}")
        return LeaseLook(lost=lost, lease_gone=gone, others=others if own is not None else None)

    def addresses_of(self, subnets: tuple) -> dict:
        try:
            found = self.leases()
        except LeasesUnreadable:
            return {}
        return {lease.subnet: lease.public_ip for lease, _ in found.lifetimes
                if lease.subnet in subnets and lease.public_ip}

    def leases(self) -> Leases:
        """The annotated Nodes (no expiry; the Node's name for the unit), as
        this hook's look listed them, else listed now."""
        nodes = self._listed
        if nodes is None:
            try:
                with self.ctx.kube_api() as api:
                    nodes = api.nodes()
            except KubeUnavailable as error:
                raise LeasesUnreadable("the Kubernetes API", error.reason) from None
        families = self._families()
        held = [(lease_of(node, families), node.name) for node in nodes]
        return Leases([(lease, None) for lease, _ in held if lease],
                      {(lease.subnet, lease.public_ip): name for lease, name in held if lease})

    def before_new_address(self, old_iface: Optional[str], new_iface: str,
                           out: Outcome) -> None:
        """The lease is the Node's pod CIDR, whatever address flanneld has."""

    # --- leave the mode -------------------------------------------------------------------
    def leave(self, out: Outcome, *, keep_lease: bool) -> None:
        """What flanneld wrote on this machine's Node (its annotations, its
        NetworkUnavailable condition) taken off, which flanneld never does:
        the Node is left as flannel found it (its pod CIDRs are
        kube-controller-manager's, kept whatever `keep_lease` says)."""
        try:
            self._forget_annotations(out)
        except KubeUnavailable as error:
            out.say("Could not take flanneld's annotations off this machine's Node: "
                    f"{error.reason}", True)
        self.ctx.state.node_name = None

    def files(self) -> tuple:
        paths = self.ctx.paths
        return (paths.net_conf,), paths.net_conf_dir

    def _forget_annotations(self, out: Outcome) -> None:
        node = self.ctx.state.node_name
        if not node:
            return
        with self.ctx.kube_api(timeout=3.0) as api:
            removed = api.forget_flanneld(node)
        if removed:
            out.say(f"Removed flanneld's {', '.join(removed)} from Node {node}")
