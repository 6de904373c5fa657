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
from ..facts import host_network
from ..facts.cluster_rules import backend_change_problem, service_cidr_problem
from ..facts.digest import digest
from ..facts.netconfig import NetworkConfig
from ..facts.options import InvalidOption, NetworkOptions
from ..facts.paths import SERVICE_NAME
from ..facts.status import Problem
from . import bridge, subnets
from .context import HookContext
from .flags import CNI_CONFIGURED, NETWORK_CONFIGURED, SERVICE_RUNNING
from .outcome import Outcome, inputs_changed

FLAG = NETWORK_CONFIGURED
# what this step alone finds (with every mode's own problems)
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
    return digest(*served, ctx.juju.service_cidr()) if served is not None else None


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
    for problem in CHECKED + subnets.problems_of_every_mode():
        out.found(problem, None)
    if options is not None:
        out.found(Problem.CIDR, _text(cidr_conflict(ctx, options)))
        out.problems.update(interface_problems(ctx, options))
        if any(out.problems.values()):
            # blocked; the mode and the running flanneld are left as they were
            return keep(ctx, running, out)
    if not going.serve(network, out, replace=options is not None,
                       refusal=lambda cluster: refusal(network, cluster)):
        return keep(ctx, running, out) if running and running.name != going.name else out
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
    are forgotten, so that the next hook tries the wanted network again."""
    if running is not None and ctx.confirmed is not None and running.keep(ctx.confirmed, out):
        ctx.state.network_inputs = None
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


def _text(problem) -> Optional[str]:
    return str(problem) if problem else None


# --- what the options must fit on this machine --------------------------------------------

def cidr_conflict(ctx: HookContext, options: NetworkOptions) -> Optional[InvalidOption]:
    """The cidr (and ipv6-cidr) against this machine's networks and routes
    of its family. (The service-cidr is checked with what the mode knows
    of it.) The network flanneld runs, which this node serves, is not
    refused: a refresh must not block a working node."""
    confirmed = ctx.confirmed
    pods = [network for network, _ in ctx.served_networks()]
    running = {"cidr": confirmed.network if confirmed else None,
               "ipv6-cidr": confirmed.ipv6_network if confirmed else None}
    for option, cidr in (("cidr", options.cidr), ("ipv6-cidr", options.ipv6_cidr)):
        if cidr is None or cidr == running[option]:
            continue
        networks = host_network.machine_networks(ctx.links, ctx.routes(cidr.version), pods,
                                                 version=cidr.version)
        conflict = host_network.cidr_conflict(cidr, networks, option=option)
        if conflict:
            return conflict
    return None


def interface_problems(ctx: HookContext, options: NetworkOptions) -> dict:
    """`iface` (when given), `mtu` and IPv6 against this machine's links:
    checked before anything restarts, and for an mtu before the mode holds
    it. A flanneld started on a missing, down or address-less interface
    fails or carries nothing, vxlan packets bigger than the interface are
    fragmented or dropped, and IPv6 pods under 1280 bytes have no IPv6."""
    ipv4 = options.cidr is not None
    unfit = host_network.iface_problem(options.iface, ctx.links, ipv4=ipv4,
                                       ipv6=options.ipv6_cidr is not None) \
        if options.iface else None
    too_big = no_ipv6 = None
    if not unfit and (options.mtu or options.ipv6_cidr):
        link = ctx.flanneld_link(options)
        if link is None:
            unfit = host_network.no_interface_problem(options, ctx.flanneld_iface(options))
        else:
            too_big = host_network.mtu_problem(options.mtu, link)
            if options.ipv6_cidr:
                no_ipv6 = host_network.ipv6_problem(link) or host_network.ipv6_mtu_problem(
                    options.network_config(), link)
    return {Problem.IFACE: _text(unfit), Problem.MTU: _text(too_big),
            Problem.IPV6: _text(no_ipv6)}
