"""flanneld's nft tables (nftables mode, flanneld >= 0.25): found and taken away.

In nftables mode flanneld writes its forward and masquerade rules in two
tables of its own, "ip flannel-ipv4" and "ip6 flannel-ipv6" (both made
whichever families the network has), and like its iptables chains leaves
them when it exits (docs/reference/flanneld.md). flanneld v0.27 started
in iptables mode deletes them itself, but only logs a failure; started in
nftables mode it flushes FLANNEL-POSTRTG and leaves FLANNEL-FWD (it looks
for it in the nat table, not filter). So the charm takes away the other
mode's rules while flanneld is stopped for a restart, and both on removal.
"""
from __future__ import annotations

from .machine import Machine

# (family, table) as `nft list tables` names them
FLANNEL_TABLES = (("ip", "flannel-ipv4"), ("ip6", "flannel-ipv6"))


def flannel_tables(machine: Machine) -> list[tuple[str, str]]:
    """flanneld's nft tables on this node ([] without nft)."""
    if not machine.has("nft"):
        return []
    listed = set()
    for line in machine.output(["nft", "list", "tables"]).splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == "table":
            listed.add((words[1], words[2]))
    return [table for table in FLANNEL_TABLES if table in listed]


def remove_nft_tables(machine: Machine) -> list[str]:
    """Delete flanneld's nft tables; returns what went, for the log."""
    removed = []
    for family, name in flannel_tables(machine):
        machine.output(["nft", "delete", "table", family, name])
        removed.append(f"nft table {family} {name}")
    return removed
