"""flanneld's iptables rules, found and taken away.

flanneld >= 0.18 cleans its rules when it *starts*, not when it exits
(docs/reference/flanneld.md): after a stop the node keeps the nat chain
FLANNEL-POSTRTG (MASQUERADE for the pod network), the filter chain
FLANNEL-FWD and the jumps to them from POSTROUTING and FORWARD. Removing
flannel takes them away with the same `iptables` (and `ip6tables`) the
node's flanneld used, whichever flavour (nft or legacy) that is.

flannel v0.11 (charm-flannel f79f180, run with --ip-masq) wrote its rules
straight into nat POSTROUTING and filter FORWARD, without chains of its own,
and never removes them either: they are recognised by their exact shape for
the pod network (V011_RULES) and go too, when flanneld is restarted after
the refresh from that charm and when flannel is removed. flanneld >= 0.18
recycles only its own chains, so without this a refreshed node would keep
them for good.
"""
from __future__ import annotations

import ipaddress
import shlex
from typing import Iterable, Optional

from .machine import Machine

CHAIN_PREFIX = "FLANNEL-"


def iptables_commands(machine: Machine) -> list[str]:
    """The iptables front ends this node has: iptables, and ip6tables."""
    return [cmd for cmd in ("iptables", "ip6tables")
            if machine.has(cmd) and machine.has(cmd + "-save")]


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


def remove_v011_rules(machine: Machine, networks: Iterable) -> list[str]:
    """Delete flannel v0.11's rules for the pod `networks` (and nothing of
    flanneld >= 0.18's); returns what went, for the log."""
    return remove_iptables_rules(machine, ["iptables"], networks, chains=False)


def remove_iptables_rules(machine: Machine, commands: Optional[Iterable[str]] = None,
                          networks: Iterable = (), chains: bool = True) -> list[str]:
    """Delete flanneld's jumps, then flush and delete its chains (with
    `chains`), in every table of every iptables front end, and flannel
    v0.11's rules for the pod `networks`; returns what went, for the log."""
    removed = []
    networks = list(networks)
    for cmd in (iptables_commands(machine) if commands is None else commands):
        for table, found in flannel_rules(machine.output([cmd + "-save"]), networks).items():
            if not chains:
                found = {"jumps": [], "chains": [], "v011": found["v011"]}
            for rule in found["jumps"] + found["v011"]:
                machine.output([cmd, "-w", "-t", table, *rule])
                removed.append(f"{cmd} -t {table} {shlex.join(rule)}")
            for chain in found["chains"]:
                machine.output([cmd, "-w", "-t", table, "-F", chain])
            for chain in found["chains"]:
                machine.output([cmd, "-w", "-t", table, "-X", chain])
                removed.append(f"{cmd} -t {table} chain {chain}")
    return removed
