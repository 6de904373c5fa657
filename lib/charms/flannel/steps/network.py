"""The network this node runs is served where flanneld keeps its leases
(flag flannel.network.configured): etcd's config, or net-conf.json beside
the Node whose pod CIDRs are the lease (steps/subnets).

The options' network is checked, above the seam and once for both modes,
against the machine (its networks and routes, flanneld's interface, its
MTU and families) and against what the mode finds of the cluster (a backend
change while nodes hold leases of another backend; a pod network over the
service-cidr), then the mode serves it. While an option is invalid nothing
is written but where the mode lost the network (etcd rebuilt empty): the
network flanneld runs here goes back, so that a unit blocked on a mistyped
option still gets its lease back; a network the mode holds is never
replaced from a blocked unit.

A subnet-manager change leaves the mode flanneld runs only once the new one
serves: until then flanneld runs on, supervised, in the old one, whose
network is kept (steps/supervision.py looks at it). Every problem this step
can find is worked out afresh each time it runs, so that none recorded
earlier outlives its cause behind another.
"""
from __future__ import annotations

from typing import Optional

from ..adapters import pod_bridge
from ..facts.cluster_rules import backend_change_problem, service_cidr_problem
from ..facts.digest import digest
from ..facts.netconfig import NetworkConfig
from ..facts.options import InvalidOption
from ..facts.paths import SERVICE_NAME
from ..facts.status import Problem
from . import bridge, checks, flanneld, subnets
from .context import HookContext
from .flags import CNI_CONFIGURED, NETWORK_CONFIGURED, SERVICE_RUNNING
from .outcome import Outcome, inputs_changed

FLAG = NETWORK_CONFIGURED
# what this step alone finds (each mode's serve finds its own)
CHECKED = (Problem.CIDR, Problem.MTU, Problem.IFACE, Problem.IPV6, Problem.NETWORK)


def wanted(ctx: HookContext) -> Optional[NetworkConfig]:
    """What the mode must serve: the options' network, or while an option
    is invalid the network flanneld runs (None before there is one)."""
    options = ctx.options
    return options.network_config() if options is not None else ctx.confirmed


def inputs(ctx: HookContext) -> Optional[str]:
    """What the step acted on: the network, where the mode keeps it (etcd's
    address and client credentials, or root's kubeconfig), and the
    service-cidr."""
    served = subnets.wanted(ctx).inputs(wanted(ctx))
    return digest(*served, ctx.service_cidr) if served is not None else None


def stale(ctx: HookContext) -> Optional[str]:
    return inputs_changed(ctx.state.network_inputs, inputs(ctx),
                          "the network options, where the leases are kept or the "
                          "service-cidr changed")


def run(ctx: HookContext) -> Outcome:
    out = Outcome()
    network, options, confirmed = wanted(ctx), ctx.options, ctx.confirmed
    if network is None:
        return out   # blocked on an option; nothing runs yet
    going, running = subnets.wanted(ctx), subnets.running(ctx)
    # worked out afresh below (the modes' own problems by their serve); a mode
    # neither wanted nor running has none (what only its look finds stays)
    for problem in CHECKED + subnets.hidden_problems(ctx):
        out.found(problem, None)
    if options is not None:
        out.found(Problem.CIDR, checks.text(checks.cidr_conflict(ctx, options)))
        # (a switch stops flanneld: whatever would keep it from starting again
        # in the new mode, the rules' command, br_netfilter, is checked first)
        out.problems.update(checks.start_problems(ctx, options)
                            if running is not None and running.name != going.name
                            else checks.interface_problems(ctx, options))
        if any(out.problems.values()):
            # blocked; the mode and the running flanneld are left as they were
            return keep(ctx, running, out)
    if not going.serve(network, out, replace=options is not None,
                       refusal=lambda cluster: refusal(network, cluster)):
        # the mode flanneld runs keeps its network while another is not ready,
        # or an option is invalid; the same mode failing (etcd away) is tried
        # again at the next hook, the network waited for
        if running is not None and (running.name != going.name or options is None):
            keep(ctx, running, out)
        return out
    if running is not None and running.name != going.name:
        leave(ctx, running, out)
    state = ctx.state
    state.subnet_manager = going.name
    if confirmed != network:
        state.confirmed_network = network.to_json()
        out.clear(CNI_CONFIGURED)   # the principal must hear of the new network
    state.network_inputs = inputs(ctx)
    # flanneld's input digest decides whether it restarts
    return out.clear(SERVICE_RUNNING).set(NETWORK_CONFIGURED)


def refusal(network: NetworkConfig, cluster: subnets.Cluster) -> Optional[InvalidOption]:
    """The rules every mode's network keeps, on what the mode found."""
    return backend_change_problem(network, cluster.backends) or \
        service_cidr_problem(network, cluster.service_cidr)


def keep(ctx: HookContext, running: Optional[subnets.SubnetManager], out: Outcome) -> Outcome:
    """The network flanneld runs here, kept where it runs (etcd rebuilt
    empty gets it back) while the wanted one cannot be served: flanneld runs
    on it, and restarts on it when supervision asks; the step's inputs
    are forgotten, so that the next hook tries the wanted network again
    (but for an invalid option: only a change of it can serve another).
    What flanneld reads at start changed meanwhile (etcd's client files or
    the kubeconfig rotated): it restarts on them."""
    if running is not None and ctx.confirmed is not None and running.keep(ctx.confirmed, out):
        ctx.state.network_inputs = inputs(ctx) if ctx.options is None else None
        on = running.flanneld(Outcome())
        if on is not None and ctx.state.flanneld_inputs != flanneld.flanneld_inputs(
                ctx, ctx.confirmed, on):
            out.clear(SERVICE_RUNNING)
        out.set(NETWORK_CONFIGURED)
    return out


def leave(ctx: HookContext, left: subnets.SubnetManager, out: Outcome) -> None:
    """A subnet-manager change on a running unit, once the new mode serves:
    flanneld stopped, what it and the charm kept in the mode left goes (this
    node's lease in etcd and the etcd client files, or flanneld's
    annotations on the Node and net-conf.json), and the lease subnet.env
    names is given up: its gateways come off cni0 (the new mode leases
    another subnet, whose gateway the bridge plugin would not put beside
    them: every new pod would fail) and subnet.env goes. flanneld starts in
    the new mode in this hook; running pods keep addresses of the old lease
    until they are recreated (the status counts them)."""
    ctx.systemd.do("stop", SERVICE_NAME)
    ctx.forget_flanneld()
    left.leave(out, keep_lease=False)
    written, directory = left.files()
    for part in [lambda path=path: ctx.record.remove(path) for path in written] + [
            lambda: ctx.record.remove_directory(directory)]:
        try:   # each on its own: etcd away keeps no client file behind
            part()
        except OSError as error:
            out.say(f"Could not remove what subnet-manager={left.name} needed: {error}", True)
    for gateway in bridge.give_up_lease(ctx):
        out.say(f"Took {gateway} off {pod_bridge.POD_BRIDGE}: the lease of "
                f"subnet-manager={left.name} is given up", True)
    for problem in left.problems:
        out.found(problem, None)
    out.say(f"subnet-manager changed from {left.name}: flanneld leases anew; pods already "
            "running keep their addresses until they are recreated (the status counts them)",
            True)
    ctx.state.subnet_manager_left = left.name
    ctx.state.flanneld_inputs = None   # (re)started in the new mode
