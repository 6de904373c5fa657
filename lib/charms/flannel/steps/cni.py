"""The principal has flannel's CNI config (flag flannel.cni.configured):
10-flannel.conflist is written, and the cni relation carries the pod
network and the file's name. It names the network etcd confirmed, which
pods actually use: during a refused or pending change the principal keeps
it, not the option's new value. With subnet-manager=kubernetes it names
the options' network before flanneld runs: kube-controller-manager
allocates the Nodes' pod CIDRs, which flanneld leases, from it, and the
control plane's kubelet (whose Node flanneld needs) waits for the file."""
from __future__ import annotations

from typing import Optional

from ..facts.digest import digest
from ..facts.paths import CNI_CONF_MODE, CNI_CONF_NAME
from .context import HookContext
from .flags import CNI_CONFIGURED
from .outcome import Outcome

FLAG = CNI_CONFIGURED


def inputs(ctx: HookContext) -> Optional[str]:
    """The published network, the relations it goes to, the template."""
    confirmed = ctx.published_network()
    if confirmed is None:
        return None
    return digest(confirmed.published_cidr, ctx.juju.cni_relation_ids(),
                  ctx.template_digest(CNI_CONF_NAME))


def stale(ctx: HookContext) -> Optional[str]:
    if ctx.published_network() is None:
        return "no network confirmed"
    if not ctx.record.holds(ctx.paths.cni_conflist):
        return f"{ctx.paths.cni_conflist} is not what the charm wrote"
    if ctx.state.cni_inputs != inputs(ctx):
        return "the network or the cni relations changed"
    return None


def run(ctx: HookContext) -> Outcome:
    confirmed = ctx.published_network()
    if confirmed is None or ctx.options is None:
        return Outcome()   # blocked on an option: the principal keeps what it has
    from ..adapters import render
    conflist = render.render_conflist(ctx.templates, network_name=ctx.cni_network_name(),
                                      subnet_file=ctx.paths.subnet_env)
    ctx.record.install(ctx.paths.cni_conflist, conflist.encode(), CNI_CONF_MODE, sole=True)
    ctx.state.cni_inputs = inputs(ctx)
    # dual-stack as the principals take it (and Calico publishes it): "v4,v6"
    out = Outcome(publish=(confirmed.published_cidr, CNI_CONF_NAME))
    return out.set(CNI_CONFIGURED)
