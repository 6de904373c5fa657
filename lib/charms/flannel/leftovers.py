"""What flanneld leaves on a node when it stops, and taking it away.

flanneld v0.27 cleans its iptables rules when it *starts*, not when it exits
(REFERENCE §12): after a stop the node keeps the nat chain FLANNEL-POSTRTG
(MASQUERADE for the pod network), the filter chain FLANNEL-FWD and the jumps
to them from POSTROUTING and FORWARD; with host-gw, a route to every other
node's subnet. Removing flannel takes all of it away, with the same
`iptables` (and `ip6tables`) the node's flanneld used, whichever flavour
(nft or legacy) that is.

flannel v0.11 (charm-flannel f79f180, run with --ip-masq) wrote its rules
straight into nat POSTROUTING and filter FORWARD, without chains of its own,
and never removes them either: they are recognised by their exact shape for
the pod network (V011_RULES) and go too, when flanneld is restarted after
the refresh from that charm and when flannel is removed. v0.27 recycles
only its own chains, so without this a refreshed node would keep them for
good.

What stays, for the pods still running on the node (containerd owns them):
the bridge `cni0` with its address and its route to the node's own subnet,
and host-local's table of their addresses. Once no pod is left on the
bridge, both go too (remove_idle_bridge): the next CNI may well name its
bridge cni0, and the bridge plugin refuses a bridge holding another
network's address.

Functions take the command runner (`run(argv) -> stdout`) so that tests can
run them against a sandbox machine's real iptables; nothing here imports a
charm framework.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from . import pod_bridge
from .adoption import HOST_LOCAL_TABLES, is_address
from .daemon import ipv6_shape, network_shape
from .subnet import SubnetEnv, read_lease

CHAIN_PREFIX = "FLANNEL-"
# the bridge whose routes and addresses belong to the pods still running
POD_BRIDGE = pod_bridge.POD_BRIDGE
# libcni's rule for a network name (it names host-local's table directory)
_CNI_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.\-]*")

Run = Callable[[list], str]


@dataclass(frozen=True)
class ServedNetwork:
    """What flannel served on a node: each pod network with the prefix
    length of its subnets, and the CNI network name (host-local's table)."""
    networks: tuple = ()          # ((IPv4Network or IPv6Network, subnet_len), ...)
    cni_network_name: str = ""


def pod_networks(confirmed: Optional[dict], subnet_env: Path) -> tuple:
    """The pod networks flanneld served here, of both families, each with its
    subnets' prefix length: those etcd confirmed, and those its subnet.env
    names (they differ mid-change)."""
    networks = {}
    if confirmed and confirmed.get("Network"):
        network, subnet_len, _ = network_shape(confirmed)
        networks[network] = subnet_len
        ipv6 = ipv6_shape(confirmed)
        if ipv6:
            networks[ipv6[0]] = ipv6[1]
    env = read_lease(subnet_env)
    if env is not None:
        for network, length in lease_networks(env):
            networks.setdefault(network, length)
    return tuple(sorted(networks.items(), key=lambda item: (item[0].version, str(item[0]))))


def lease_networks(env: SubnetEnv) -> list:
    """(network, subnet_len) of each family a subnet.env's lease is in."""
    found = [(env.network, env.subnet.network.prefixlen)]
    if env.ipv6_network is not None and env.ipv6_subnet is not None:
        found.append((env.ipv6_network, env.ipv6_subnet.network.prefixlen))
    return found


def forget_old_rules(old_lease: SubnetEnv, network: ipaddress.IPv4Network, subnet_len: int,
                     ipv6: Optional[tuple], run: Optional[Run] = None,
                     commands: Optional[Iterable[str]] = None) -> list[str]:
    """After a network change, while flanneld is stopped: its iptables rules
    of both families (it writes its own afresh as it starts, for the networks
    it serves then; it recycles an old network's only when subnet.env still
    names it, and forget_old_network has just removed that file, and it
    never touches ip6tables once IPv6 is off), and its routes into the pod
    networks (or subnet lengths) it no longer serves (host-gw's). Returns
    what went, for the log."""
    run = run or run_command
    served = {(network, subnet_len)} | ({tuple(ipv6)} if ipv6 else set())
    dropped = [pair for pair in lease_networks(old_lease) if pair not in served]
    return remove_iptables_rules(run, commands) + remove_pod_network_routes(dropped, run)


def run_command(argv: list) -> str:
    """Run a command on this machine; its stdout (a failure raises)."""
    return subprocess.run([str(a) for a in argv], check=True, capture_output=True,
                          text=True, timeout=60).stdout


def iptables_commands(which: Callable[[str], object] = shutil.which) -> list[str]:
    """The iptables front ends this node has: iptables, and ip6tables."""
    return [cmd for cmd in ("iptables", "ip6tables")
            if which(cmd) and which(cmd + "-save")]


# flannel v0.11's --ip-masq and forward rules (network/iptables.go: MasqRules,
# ForwardRules) as iptables-save shows them: (table, chain, rule), N the pod
# network, S a node's subnet in it; MASQUERADE with or without --random-fully.
V011_RULES = (
    ("nat", "POSTROUTING", "-s N -d N -j RETURN"),
    ("nat", "POSTROUTING", "-s N ! -d 224.0.0.0/4 -j MASQUERADE"),
    ("nat", "POSTROUTING", "-s N ! -d 224.0.0.0/4 -j MASQUERADE --random-fully"),
    ("nat", "POSTROUTING", "! -s N -d S -j RETURN"),
    ("nat", "POSTROUTING", "! -s N -d N -j MASQUERADE"),
    ("nat", "POSTROUTING", "! -s N -d N -j MASQUERADE --random-fully"),
    ("filter", "FORWARD", "-s N -j ACCEPT"),
    ("filter", "FORWARD", "-d N -j ACCEPT"),
)


def is_v011_rule(table: str, words: list, networks: Iterable) -> bool:
    """Whether an `iptables-save` rule (`-A CHAIN ...` split) is one flannel
    v0.11 wrote for one of the IPv4 pod `networks`."""
    for network in networks:
        if network.version != 4:
            continue
        for rule_table, chain, shape in V011_RULES:
            wanted = shape.split()
            if table != rule_table or words[1] != chain or len(words) - 2 != len(wanted):
                continue
            if all(_v011_word_matches(want, got, network)
                   for want, got in zip(wanted, words[2:])):
                return True
    return False


def _v011_word_matches(want: str, got: str, network: ipaddress.IPv4Network) -> bool:
    if want == "N":
        return got == str(network)
    if want == "S":
        try:
            subnet = ipaddress.ip_network(got)
        except ValueError:
            return False
        return subnet.version == 4 and subnet.subnet_of(network) and subnet != network
    return want == got


def flannel_rules(save_output: str, networks: Iterable = ()) -> dict[str, dict]:
    """flanneld's part of `iptables-save` output, per table: its chains
    (named FLANNEL-...), the rules elsewhere that jump to them and, for the
    pod `networks`, flannel v0.11's rules (`v011`), each rule as the argv
    that would delete it (`-D CHAIN ...`)."""
    networks = list(networks)
    tables: dict[str, dict] = {}
    table = None
    for line in save_output.splitlines():
        line = line.strip()
        if line.startswith("*"):
            table = line[1:]
            continue
        if table is None:
            continue
        found = tables.setdefault(table, {"chains": [], "jumps": [], "v011": []})
        if line.startswith(":"):
            chain = line[1:].split()[0]
            if chain.startswith(CHAIN_PREFIX):
                found["chains"].append(chain)
        elif line.startswith("-A "):
            words = shlex.split(line)
            chain = words[1]
            target = words[words.index("-j") + 1] if "-j" in words[:-1] else ""
            if target.startswith(CHAIN_PREFIX) and not chain.startswith(CHAIN_PREFIX):
                found["jumps"].append(["-D", *words[1:]])
            elif is_v011_rule(table, words, networks):
                found["v011"].append(["-D", *words[1:]])
    return {t: f for t, f in tables.items() if f["chains"] or f["jumps"] or f["v011"]}


def remove_v011_rules(networks: Iterable, run: Run = run_command) -> list[str]:
    """Delete flannel v0.11's rules for the pod `networks` (and nothing of
    today's flanneld); returns what went, for the log."""
    return remove_iptables_rules(run, ["iptables"], networks, chains=False)


def remove_iptables_rules(run: Run = run_command,
                          commands: Iterable[str] | None = None,
                          networks: Iterable = (), chains: bool = True) -> list[str]:
    """Delete flanneld's jumps, then flush and delete its chains (with
    `chains`), in every table of every iptables front end, and flannel
    v0.11's rules for the pod `networks`; returns what went, for the log."""
    removed = []
    networks = list(networks)
    for cmd in (iptables_commands() if commands is None else commands):
        for table, found in flannel_rules(run([cmd + "-save"]), networks).items():
            if not chains:
                found = {"jumps": [], "chains": [], "v011": found["v011"]}
            for rule in found["jumps"] + found["v011"]:
                run([cmd, "-w", "-t", table, *rule])
                removed.append(f"{cmd} -t {table} {shlex.join(rule)}")
            for chain in found["chains"]:
                run([cmd, "-w", "-t", table, "-F", chain])
            for chain in found["chains"]:
                run([cmd, "-w", "-t", table, "-X", chain])
                removed.append(f"{cmd} -t {table} chain {chain}")
    return removed


def pod_network_routes(routes: Iterable[dict], networks: Iterable[tuple]) -> list[dict]:
    """The routes (`ip -j route show` entries) that are flanneld's: to one
    node's subnet of a pod network (the network's subnet length, inside
    it), not through the pods' own bridge. networks: (network, subnet_len)."""
    nets = list(networks)
    out = []
    for route in routes:
        dst = route.get("dst", "")
        if dst in ("", "default") or route.get("dev") == POD_BRIDGE:
            continue
        try:
            prefix = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if any(prefix.version == n.version and prefix.subnet_of(n) and prefix.prefixlen == length
               for n, length in nets):
            out.append(route)
    return out


def remove_pod_network_routes(networks: Iterable[tuple], run: Run = run_command) -> list[str]:
    """Delete flanneld's routes into the pod networks (host-gw's routes to
    the other nodes' subnets); returns what went, for the log."""
    nets = list(networks)
    removed = []
    for family in sorted({n.version for n, _ in nets}):
        routes = json.loads(run(["ip", f"-{family}", "-j", "route", "show"]) or "[]")
        for route in pod_network_routes(routes, nets):
            argv = ["ip", f"-{family}", "route", "del", route["dst"]]
            if route.get("gateway"):
                argv += ["via", route["gateway"]]
            if route.get("dev"):
                argv += ["dev", route["dev"]]
            run(argv)
            removed.append(" ".join(argv[4:]))
    return removed


def remove_idle_bridge(served: ServedNetwork, run: Run = run_command,
                       bridge: str = POD_BRIDGE,
                       tables_dir: Path = HOST_LOCAL_TABLES) -> list[str]:
    """With no pod left on the pod network's bridge: delete the bridge if it
    is flannel's (an address of its flannel's, pod_bridge.FlannelsMarks), and
    host-local's table of flannel's CNI network if it holds no address.
    Returns what went, for the log; nothing while a pod is attached."""
    attached = pod_bridge.ports(bridge, run)
    if attached:
        return []
    removed = []
    name = served.cni_network_name
    if attached is not None:
        shown = pod_bridge.read_bridge(bridge, run)
        marks = pod_bridge.FlannelsMarks(
            networks=tuple(network for network, _ in served.networks),
            handed_out=pod_bridge.handed_out(name, tables_dir) if _CNI_NAME.fullmatch(
                name or "") else ())
        if shown is not None and any(marks.covers(address) for address in shown.addresses):
            pod_bridge.delete(bridge, run)
            removed.append(f"bridge {bridge}")
    table = tables_dir / name
    if _CNI_NAME.fullmatch(name or "") and name not in (".", "..") and table.is_dir():
        if not any(is_address(entry) for entry in os.listdir(table)):
            shutil.rmtree(table, ignore_errors=True)
            removed.append(f"host-local table {table}")
    return removed
