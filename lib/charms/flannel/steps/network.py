"""etcd holds the network this node runs (flag flannel.network.configured).

The options' network config is checked against the machine (its networks
and routes, flanneld's interface) and the cluster's service-cidr, then
written with a compare-and-swap. While an option is invalid nothing is
written but to an etcd that lost its network (rebuilt empty): the network
flanneld runs here, the one etcd last confirmed, goes back, so that a unit
blocked on a mistyped option still gets its lease back; a network etcd
holds is never replaced from a blocked unit. A backend change under nodes
that hold leases is refused. Before this node's first flanneld start,
flannel v0.11's leases are carried from etcd's v2 keyspace into v3
(facts/v2_network.py).
"""
from __future__ import annotations

import json
from typing import Optional

from ..adapters.credentials import pem_problem, write_client_credentials
from ..facts import host_network
from ..facts.digest import digest
from ..facts.etcd_keys import EtcdUnavailable
from ..facts.kube_nodes import KubeUnavailable as KubeUnavailableError
from ..facts.netconfig import NetworkConfig
from ..facts.options import ETCD, KUBERNETES, InvalidOption, NetworkOptions
from ..facts.paths import NET_CONF_MODE
from ..facts.status import ETCD_ONLY, KUBERNETES_ONLY, Problem
from .context import HookContext
from .flags import CNI_CONFIGURED, NETWORK_CONFIGURED, SERVICE_RUNNING
from .outcome import Outcome, inputs_changed

FLAG = NETWORK_CONFIGURED
WRITE_ATTEMPTS = 3  # compare-and-swap rounds lost to other writers before waiting


def wanted(ctx: HookContext) -> Optional[NetworkConfig]:
    """What etcd must hold: the options' network, or while an option is
    invalid the network flanneld runs (None before there is one)."""
    options = ctx.options
    return options.network_config() if options is not None else ctx.confirmed


def inputs(ctx: HookContext) -> Optional[str]:
    """What the step acted on: the network, etcd's address and client
    credentials (or root's kubeconfig), and the service-cidr."""
    network = wanted(ctx)
    if ctx.on_kubernetes:
        kubeconfig = ctx.kubeconfig_checksum
        if kubeconfig is None:
            return None
        return digest(KUBERNETES, network.to_json() if network else None, kubeconfig,
                      ctx.juju.service_cidr())
    etcd = ctx.juju.etcd()
    if etcd is None:
        return None
    return digest(network.to_json() if network else None, etcd.connection_string,
                  [etcd.ca, etcd.cert, etcd.key], ctx.juju.service_cidr())


def stale(ctx: HookContext) -> Optional[str]:
    return inputs_changed(ctx.state.network_inputs, inputs(ctx),
                          "the network options, etcd or the service-cidr changed")


def run(ctx: HookContext) -> Outcome:
    out = Outcome()
    network, options = wanted(ctx), ctx.options
    if network is None:
        return out   # blocked on an option; nothing runs yet
    for problem in ETCD_ONLY if ctx.on_kubernetes else KUBERNETES_ONLY:
        out.found(problem, None)   # the other mode's, whose steps do not run here
    if options is not None:
        out.found(Problem.CIDR, _text(cidr_conflict(ctx, options)))
        if options.mtu or options.ipv6_cidr:
            # checked before etcd holds them (an iface that is not there
            # leaves nothing to check)
            out.problems.update(interface_problems(ctx, options))
        else:
            out.found(Problem.MTU, None).found(Problem.IPV6, None)
        if any(out.problems.values()):
            return out   # blocked; etcd and the running flanneld are left as they were
    # (a unit configured by a revision before subnet-manager was in etcd mode)
    left = ctx.state.subnet_manager or (ETCD if ctx.state.etcd_endpoints else None)
    # the mode left is left only once the new one has what it needs
    leaving = left if options is not None and left not in (None, options.subnet_manager) \
        else None
    if ctx.on_kubernetes:
        return on_kubernetes(ctx, network, out, leaving)
    etcd = ctx.juju.etcd()
    not_pem = pem_problem(etcd.ca, etcd.cert, etcd.key)
    if not_pem:
        return out.found(Problem.ETCD, not_pem)   # waiting; the files on disk stay
    # a change here reaches flanneld through its input digest
    write_client_credentials(ctx.record, ctx.paths, etcd.ca, etcd.cert, etcd.key)
    try:
        with ctx.etcd_store(etcd.connection_string) as store:
            if options is None:
                if not store.swap_config(None, network):
                    return out   # etcd holds a network: not a blocked unit's to replace
                out.say(f"etcd held no flannel network: wrote back {network.network}, the "
                        "one flanneld runs here", True)
            else:
                write_network(store, network, ctx.juju.service_cidr())
            if ctx.state.flanneld_inputs is None:
                _carry_v2_leases(ctx, store, network, out)
    except InvalidOption as refused:
        # a backend change under leases, or a pod network over the
        # service-cidr: flanneld runs on as it is
        return out.found(Problem.NETWORK, str(refused)).found(Problem.ETCD, None)
    except EtcdUnavailable as away:
        # flanneld runs on as it is until etcd holds the network (tried again
        # at the next hook)
        return out.found(Problem.NETWORK, None).found(Problem.ETCD, away.reason)
    out.found(Problem.NETWORK, None).found(Problem.ETCD, None)
    if leaving:
        leave_subnet_manager(ctx, leaving, out)
    state = ctx.state
    state.subnet_manager = ETCD
    if ctx.confirmed != network:
        state.confirmed_network = network.to_json()
        out.clear(CNI_CONFIGURED)   # the principal must hear of the new network
    state.etcd_endpoints = etcd.connection_string
    state.network_inputs = inputs(ctx)
    # flanneld's input digest decides whether it restarts
    return out.clear(SERVICE_RUNNING).set(NETWORK_CONFIGURED)


def on_kubernetes(ctx: HookContext, network: NetworkConfig, out: Outcome,
                  leaving: Optional[str]) -> Outcome:
    """subnet-manager=kubernetes: this machine's Node found by its
    addresses, its pod CIDRs checked (kube-controller-manager allocates
    them, inside flannel's networks), then net-conf.json written for
    flanneld. Until then flanneld is not (re)started on it: it would exit."""
    from ..facts.kube_nodes import (KubeUnavailable, allocation_advice, node_of,
                                    pod_cidr_problem)
    over_services = service_cidr_conflict(network, ctx.juju.service_cidr())
    if over_services:   # (the control plane's unit: workers are not told the service-cidr)
        return out.found(Problem.NETWORK, str(over_services))
    try:
        with ctx.kube_api() as api:
            node = node_of(api.nodes(), ctx.machine_addresses())
    except KubeUnavailable as away:
        return out.found(Problem.KUBE, f"Cannot reach the Kubernetes API: {away.reason}")
    if node is None:
        return out.found(Problem.KUBE, "Waiting for kubelet to register this machine as a "
                                       "Node (none has its addresses)")
    advice = allocation_advice(network.subnet_len if network.network else None,
                               network.ipv6_subnet_len if network.ipv6_network else None)
    out.found(Problem.KUBE, None).found(
        Problem.POD_CIDR, pod_cidr_problem(node, network.pod_networks, advice))
    if out.problems[Problem.POD_CIDR]:
        return out   # blocked; a running flanneld runs on as it is
    if leaving:
        leave_subnet_manager(ctx, leaving, out)
    state = ctx.state
    ctx.record.install(ctx.paths.net_conf, json.dumps(network.to_json(), indent=1).encode(),
                       NET_CONF_MODE, sole=True)
    state.node_name = node.name
    state.subnet_manager = KUBERNETES
    out.found(Problem.NETWORK, None)
    if ctx.confirmed != network:
        state.confirmed_network = network.to_json()
        out.clear(CNI_CONFIGURED)
    state.network_inputs = inputs(ctx)
    return out.clear(SERVICE_RUNNING).set(NETWORK_CONFIGURED)


def leave_subnet_manager(ctx: HookContext, left: str, out: Outcome) -> None:
    """A subnet-manager change on a running unit, once the new mode has
    what it needs: flanneld stopped, then what it and the charm kept in the
    mode left goes (this node's lease and unit name in etcd and the etcd
    client files, or flanneld's annotations on the Node and net-conf.json),
    each part on its own (etcd away keeps no client file behind); flanneld
    starts in the new mode with a lease from the other allocator, and
    running pods keep addresses of the old one until they are recreated
    (the status says so)."""
    from ..facts.paths import SERVICE_NAME
    from .teardown import forget_node_annotations, forget_registration
    ctx.systemd.do("stop", SERVICE_NAME)
    ctx.forget_flanneld()
    state = ctx.state
    paths = ctx.paths
    if left == KUBERNETES:
        parts = [lambda: forget_node_annotations(ctx, out),
                 lambda: ctx.record.remove(paths.net_conf),
                 lambda: ctx.record.remove_directory(paths.net_conf_dir)]
    else:
        parts = [lambda: forget_lease(ctx, out), lambda: forget_registration(ctx, out)]
        parts += [lambda path=path: ctx.record.remove(path)
                  for path in (paths.etcd_ca, paths.etcd_cert, paths.etcd_key)]
        parts.append(lambda: ctx.record.remove_directory(paths.etcd_tls_dir))
    for part in parts:
        try:
            part()
        except (OSError, EtcdUnavailable, KubeUnavailableError) as error:
            out.say(f"Could not clear all that subnet-manager={left} kept: {error}", True)
    if left == ETCD:
        state.etcd_endpoints = state.registered_lease = state.lease_list = None
    # the lease it names is gone: the new mode's flanneld writes its own
    if paths.subnet_env.exists():
        paths.subnet_env.unlink()
    out.say(f"subnet-manager changed from {left}: flanneld leases anew; pods already "
            "running keep their addresses until they are recreated (the status counts them)",
            True)
    state.subnet_manager_left = left
    state.subnet_manager = None
    state.node_name = None
    state.flanneld_inputs = None   # (re)started in the new mode


def forget_lease(ctx: HookContext, out: Outcome) -> None:
    """This node's lease deleted from etcd (flanneld stopped): another mode
    leases it now, and etcd keeps nothing of this node's."""
    lease, endpoints = ctx.lease(), ctx.remembered_etcd
    if lease is None or endpoints is None:
        return
    subnet = str(lease.primary.network)
    with ctx.etcd_store(endpoints, timeout=3.0) as store:
        if store.give_lease_back(subnet, held_by=ctx.machine_addresses()):
            out.say(f"Deleted this node's lease of {subnet} from etcd")
        if store.forget_network_if_unleased():
            out.say("No node holds a lease in etcd any more: deleted flannel's network config")


def _text(problem) -> Optional[str]:
    return str(problem) if problem else None


# --- what the options must fit on this machine --------------------------------------------

def cidr_conflict(ctx: HookContext, options: NetworkOptions) -> Optional[InvalidOption]:
    """The cidr (and ipv6-cidr) against this machine's networks and routes
    of its family. (The service-cidr is checked with etcd's record of it.)
    The network etcd confirmed, which this node runs, is not refused: a
    refresh must not block a working node."""
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
    checked before anything restarts, and for an mtu before etcd holds it.
    A flanneld started on a missing, down or address-less interface fails
    or carries nothing, and vxlan packets bigger than the interface are
    fragmented or dropped."""
    unfit = host_network.iface_problem(options.iface, ctx.links, ipv4=options.cidr is not None) \
        if options.iface else None
    too_big = no_ipv6 = None
    if not unfit and options.mtu:
        too_big = host_network.mtu_problem(options.mtu, ctx.flanneld_link(options))
    if not unfit and options.ipv6_cidr:
        no_ipv6 = host_network.ipv6_problem(ctx.flanneld_link(options))
    return {Problem.IFACE: _text(unfit), Problem.MTU: _text(too_big),
            Problem.IPV6: _text(no_ipv6)}


# --- the write ----------------------------------------------------------------------------

def write_network(store, network: NetworkConfig, published_service_cidr: Optional[str]) -> bool:
    """The pod networks checked against the cluster's service-cidr (etcd's
    record of it, or the one the principal publishes, which is recorded),
    then the config written; True if this call wrote it. Raises
    InvalidOption (blocked, before anything is written) or EtcdUnavailable
    (waiting)."""
    over_services = service_cidr_conflict(network,
                                          shared_service_cidr(store, published_service_cidr))
    if over_services:
        raise over_services
    return ensure_network_config(store, network)


def service_cidr_conflict(network: NetworkConfig,
                          services: Optional[str]) -> Optional[InvalidOption]:
    """The pod networks over the cluster's service network, if they are."""
    for option, cidr in (("cidr", network.network), ("ipv6-cidr", network.ipv6_network)):
        over_services = host_network.cidr_conflict(cidr, (), services, option=option) \
            if cidr and services else None
        if over_services:
            return over_services
    return None


def shared_service_cidr(store, published: Optional[str]) -> Optional[str]:
    """The service-cidr every unit checks the pod network against. Only the
    control plane publishes it, to its own flannel unit: that unit records
    it in etcd, where the units beside workers (never told) read it, so
    that once it is recorded a cidr over the service network is refused on
    every node before any of them writes it."""
    if published:
        store.record_service_cidr(published)
        return published
    return store.read_service_cidr()


def ensure_network_config(store, wanted_network: NetworkConfig,
                          attempts: int = WRITE_ATTEMPTS) -> bool:
    """Make etcd hold `wanted_network`; True if this call wrote it.

    Raises InvalidOption("backend", ...) rather than switching backends under
    live leases, and EtcdUnavailable when etcd cannot be reached. The write is
    a compare-and-swap over the value the checks were made on: units
    configuring the network at once (first deploy, concurrent hooks) write it
    once, and a config another unit wrote meanwhile is checked again, never
    overwritten unchecked.
    """
    for _ in range(attempts):
        current, raw = store.read_config()
        if current is not None and current.to_json() == wanted_network.to_json():
            return False
        if current is not None and current.backend.type != wanted_network.backend.type:
            check_backend_change(current, wanted_network, len(store.leases()))
        if store.swap_config(raw, wanted_network):
            return True
    raise EtcdUnavailable(
        f"the flannel network config in etcd kept changing while this unit wrote it "
        f"({attempts} tries): another writer wants another config; trying again at the next hook")


def check_backend_change(current: NetworkConfig, wanted_network: NetworkConfig,
                         live_leases: int) -> None:
    """Refuse to switch backends under running nodes: flanneld cannot
    migrate, and nodes on the old backend would lose their routes to the new
    ones."""
    old, new = current.backend.type, wanted_network.backend.type
    if old == new or live_leases <= 0:
        return
    holders = "1 node holds a lease" if live_leases == 1 else f"{live_leases} nodes hold leases"
    raise InvalidOption(
        "backend",
        f"cannot change from {old} to {new} while {holders}; "
        f"set backend back to {old}, or remove flannel from every node "
        "(each unit releases its lease as it stops) and add it back",
    )


def _carry_v2_leases(ctx: HookContext, store, network: NetworkConfig, out: Outcome) -> None:
    """flannel v0.11's leases (charm-flannel up to f79f180) into v3, before
    this node's flanneld first starts: it keeps its subnet and routes the
    nodes still on v0.11 (facts/v2_network.py). Only then: a v2 lease left
    by a node since gone must not come back later."""
    from ..facts.v2_network import carried_ttl, leases_to_carry
    v2 = store.v2_network()
    if not v2:
        return
    ctx.state.v2_network_seen = True
    carried = [str(lease.subnet) for lease in leases_to_carry(v2, store.leases(), network)
               if store.create_lease(lease.name, lease.value, carried_ttl(lease))]
    if carried:
        out.say("Carried flannel v0.11's leases of {} from etcd's v2 keyspace into v3; the v2 "
                "keys stay until every node runs flanneld >= 0.18".format(", ".join(carried)))
