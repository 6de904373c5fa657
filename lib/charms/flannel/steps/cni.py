"""The principal has flannel's CNI config (flag flannel.cni.configured):
10-flannel.conflist is written, and the cni relation carries the pod
network and the file's name. It names the network flanneld runs, which
pods actually use: during a refused or pending change the principal keeps
it, not the option's new value. Where the principal must hear of the
network before it is served (subnet-manager=kubernetes:
kube-controller-manager allocates the Nodes' pod CIDRs, which flanneld
leases, from it, and the control plane's kubelet, whose Node flanneld
needs, waits for the file), it names the options' network before flanneld
runs.

With IPv6 over vxlan the conflist gives pods the MTU flannel-v6.<VNI>
carries on this node's interface (facts/netconfig.py pods_mtu), 20 bytes
under flanneld's FLANNEL_MTU: one MTU serves both families of a pod."""
from __future__ import annotations

from typing import Optional

from ..facts.digest import digest
from ..facts.netconfig import NetworkConfig
from ..facts.paths import CNI_CONF_MODE, CNI_CONF_NAME
from . import subnets
from .context import HookContext
from .flags import CNI_CONFIGURED
from .outcome import Outcome

FLAG = CNI_CONFIGURED


def published(ctx: HookContext) -> Optional[NetworkConfig]:
    """The network the principal is told of: the one flanneld runs, or
    where the principal hears of it first, the options' (while they are
    valid)."""
    options = ctx.options
    if options is not None and subnets.wanted(ctx).principal_first:
        return options.network_config()
    return ctx.confirmed


def pods_mtu(ctx: HookContext, network: NetworkConfig) -> Optional[int]:
    """The pods' MTU where it is not flanneld's own (IPv6 over vxlan), on
    the interface flanneld runs on; None: FLANNEL_MTU."""
    if not network.vxlan_v6_link:
        return None   # (and the machine's links are not asked)
    link = ctx.flanneld_link(ctx.options)
    underlay = link.mtu if link is not None and link.mtu else None
    mtu = network.pods_mtu(underlay)
    return mtu if mtu != network.pod_mtu(underlay) else None


def inputs(ctx: HookContext) -> Optional[str]:
    """The published network, the pods' MTU, the relations it goes to, the template."""
    network = published(ctx)
    if network is None:
        return None
    return digest(network.published_cidr, ctx.juju.cni_relation_ids(),
                  ctx.template_digest(CNI_CONF_NAME), *(
                      [mtu] if (mtu := pods_mtu(ctx, network)) is not None else []))


def stale(ctx: HookContext) -> Optional[str]:
    if published(ctx) is None:
        return "no network confirmed"
    if not ctx.record.holds(ctx.paths.cni_conflist):
        return f"{ctx.paths.cni_conflist} is not what the charm wrote"
    if ctx.state.cni_inputs != inputs(ctx):
        return "the network or the cni relations changed"
    return None


def run(ctx: HookContext) -> Outcome:
    network = published(ctx)
    if network is None or ctx.options is None:
        return Outcome()   # blocked on an option: the principal keeps what it has
    from ..adapters import render
    conflist = render.render_conflist(ctx.templates, network_name=ctx.cni_network_name(),
                                      subnet_file=ctx.paths.subnet_env,
                                      mtu=pods_mtu(ctx, network))
    ctx.record.install(ctx.paths.cni_conflist, conflist.encode(), CNI_CONF_MODE, sole=True)
    ctx.state.cni_inputs = inputs(ctx)
    # dual-stack as the principals take it (and Calico publishes it): "v4,v6"
    out = Outcome(publish=(network.published_cidr, CNI_CONF_NAME))
    return out.set(CNI_CONFIGURED)


def run_before_flanneld(ctx: HookContext) -> Outcome:
    """Where the principal hears of the network first, it does before
    flanneld runs."""
    if not subnets.wanted(ctx).principal_first:
        return Outcome()
    return run(ctx)
