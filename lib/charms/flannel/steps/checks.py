"""What the options must fit on this machine, checked above the subnet
managers once, before the network step serves a network and before
flanneld (re)starts: the pod networks against the machine's networks and
routes, flanneld's interface, its MTU and families, and what flanneld
needs of the machine to start at all (the rules' command, br_netfilter).
A problem found here blocks the unit and leaves the running network and
flanneld as they are."""
from __future__ import annotations

from typing import Optional

from ..adapters import kernel_modules
from ..facts import commands, host_network
from ..facts.options import InvalidOption, NetworkOptions
from ..facts.paths import MODULES_LOAD_MODE
from ..facts.status import Problem
from .context import HookContext


def text(problem) -> Optional[str]:
    return str(problem) if problem else None


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
    return {Problem.IFACE: text(unfit), Problem.MTU: text(too_big),
            Problem.IPV6: text(no_ipv6)}


def start_problems(ctx: HookContext, options: NetworkOptions) -> dict:
    """What keeps flanneld from starting on this machine with these
    options: its interface, MTU and families, the command it writes its
    rules with, br_netfilter (loaded here if it can be)."""
    found = interface_problems(ctx, options)
    found[Problem.COMMANDS] = commands.rules_command_problem(options, ctx.machine.has)
    found[Problem.KERNEL] = ensure_br_netfilter(ctx, ipv6=options.ipv6_cidr is not None)
    return found


def ensure_br_netfilter(ctx: HookContext, *, ipv6: bool) -> Optional[str]:
    """br_netfilter loaded, and listed in modules-load.d for every boot
    (adapters/kernel_modules.py); the blocked status's text when it cannot
    be loaded (flanneld would exit at start)."""
    record, path = ctx.record, ctx.paths.modules_load_file
    if not record.holds(path):
        record.install(path, kernel_modules.MODULES_LOAD, MODULES_LOAD_MODE, sole=True)
    sysctls = ctx.paths.proc_sys_net_bridge
    if kernel_modules.br_netfilter_loaded(sysctls, ipv6):
        return None
    failed = kernel_modules.load_br_netfilter(ctx.machine)
    if kernel_modules.br_netfilter_loaded(sysctls, ipv6):
        return None
    missing = next(name for name in kernel_modules.bridge_sysctls(ipv6)
                   if not (sysctls / name).exists())
    return (f"flanneld needs the br_netfilter kernel module ({sysctls / missing} is missing) "
            f"and modprobe br_netfilter failed: {failed or 'it loaded nothing'}; load it on "
            "this machine")
