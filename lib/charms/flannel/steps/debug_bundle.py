"""The debug action: one tarball of what an engineer asks for first about
flannel on this node. Never the etcd client key: no file of the etcd TLS
directory goes in, and a value of the unit's state that holds a private
key is replaced by a note."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from ..adapters import bundle, iptables, journal, nftables
from ..facts.paths import SERVICE_NAME
from .context import HookContext
from .diagnosis import LeasesUnreadable, known_leases
from .unit_state import UnitState

PRIVATE_KEY_MARK = "PRIVATE KEY"


def collect(ctx: HookContext, *, journal_lines: int) -> dict[str, str]:
    """name -> text of everything the tarball holds."""
    machine, paths = ctx.machine, ctx.paths
    entries: dict[str, str] = {}
    for name, path in (("subnet.env", paths.subnet_env), ("flannel.service", paths.service_file),
                       (paths.cni_conflist.name, paths.cni_conflist)):
        entries[name] = path.read_text(errors="replace") if path.exists() else "(absent)\n"
    entries["systemctl-status.txt"] = bundle.command_output(
        machine, ["systemctl", "status", SERVICE_NAME, "--no-pager"])
    entries["journal.txt"] = "\n".join(journal.tail(machine, SERVICE_NAME, journal_lines)) + "\n"
    devices = [link.name for link in ctx.links if link.name.startswith(("flannel", "cni0"))]
    entries["links.txt"] = "".join(bundle.command_output(machine, ["ip", "-d", "addr", "show",
                                                                   "dev", device])
                                   for device in devices) or "(no flannel device)\n"
    entries["routes.txt"] = "".join(bundle.command_output(machine, ["ip", f"-{family}", "route"])
                                    for family in (4, 6))
    vxlan_devices = [device for device in devices if device.startswith("flannel")]
    entries["fdb-and-neighbours.txt"] = "".join(
        bundle.command_output(machine, argv) for device in vxlan_devices
        for argv in (["bridge", "fdb", "show", "dev", device],
                     ["ip", "neigh", "show", "dev", device])) or "(no vxlan device)\n"
    entries["offload.txt"] = "".join(bundle.command_output(machine, ["ethtool", "-k", device])
                                     for device in vxlan_devices) or "(no vxlan device)\n"
    entries["iptables.txt"] = "".join(flannel_rules(machine, command)
                                      for command in iptables.iptables_commands(machine))
    try:
        entries["nftables.txt"] = "".join(
            bundle.command_output(machine, ["nft", "list", "table", family, name])
            for family, name in nftables.flannel_tables(machine)) or "(no flannel nft table)\n"
    except (OSError, subprocess.SubprocessError) as error:
        entries["nftables.txt"] = f"(could not list nft tables: {error})\n"
    entries["leases.json"] = leases_view(ctx)
    entries["unit-state.json"] = unit_state(ctx.state)
    return entries


def flannel_rules(machine, command: str) -> str:
    """`<command>-save` reduced to flannel's chains and the rules naming them."""
    text = bundle.command_output(machine, [f"{command}-save"])
    kept = [line for line in text.splitlines()
            if line.startswith(("$", "*", "COMMIT")) or iptables.CHAIN_PREFIX in line]
    return "\n".join(kept) + "\n"


def leases_view(ctx: HookContext) -> str:
    """The network flanneld runs, and every lease where it keeps them."""
    config = ctx.confirmed
    try:
        found = known_leases(ctx)
        leases = [{"key": lease.key, "subnet": lease.subnet, "ipv6-subnet": lease.ipv6_subnet,
                   "attributes": lease.attributes, "expires-in": ttl,
                   "unit": found.units.get((lease.subnet, lease.public_ip))}
                  for lease, ttl in found.lifetimes]
    except LeasesUnreadable as error:
        leases = str(error)
    return json.dumps({"network-config (as flanneld runs it)":
                       config.to_json() if config else None,
                       "subnet-manager": ctx.state.subnet_manager, "leases": leases},
                      indent=2, sort_keys=True) + "\n"


def unit_state(state: UnitState) -> str:
    values = {}
    for key in UnitState.keys():
        value = state.kv.get(key)
        if PRIVATE_KEY_MARK in json.dumps(value):
            value = "(left out: it holds a private key)"
        values[key] = value
    values["problems"] = {problem.key: text for problem, text in state.recorded_problems()}
    return json.dumps(values, indent=2, sort_keys=True, default=str) + "\n"


def write(ctx: HookContext, *, journal_lines: int, now: float) -> Path:
    """The tarball, in the unit's agent directory (gone with the unit)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
    top = f"flannel-debug-{stamp}"
    path = Path(ctx.juju.charm_dir).parent / "debug" / f"{top}.tar.gz"
    bundle.write_bundle(path, collect(ctx, journal_lines=journal_lines), top)
    return path
