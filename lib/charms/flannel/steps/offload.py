"""Transmit checksum offload off on flanneld's vxlan devices where it is
wanted (disable-vxlan-tx-checksumming: `auto` on kernels before Linux 5.7,
facts/offload.py; or `true`), at the end of every hook.

With NAT in the path on those kernels (and on some NICs), vxlan packets
leave with bad UDP checksums (flannel issues 1279 and 1282; flannel leaves
the fix to the operator). flanneld makes its devices anew when it restarts, after a
device is deleted and after a reboot, always with offload on: a udev rule
of the charm's turns it off as the device appears (where udev runs), and
every hook (update-status at the latest) looks again. Offload no longer
wanted (the option set to false, or auto on a fixed kernel: a refresh from a
revision whose default was true) removes the rule and puts offload back on
the devices the charm turned it off on, and on those only: every flanneld
vxlan device a hook saw while it was wanted off (found on and turned off,
or found off: the rule's work).
"""
from __future__ import annotations

import subprocess

from ..adapters import vxlan
from ..facts import commands
from ..facts.digest import digest
from ..facts.offload import choose
from ..facts.paths import OFFLOAD_UDEV_RULE_NAME, UDEV_RULE_MODE
from ..facts.status import Problem
from .context import HookContext
from .outcome import Outcome


def run(ctx: HookContext, *, flanneld_started: bool) -> Outcome:
    out = Outcome()
    options, confirmed = ctx.options, ctx.confirmed
    if options is None or confirmed is None or not flanneld_started:
        return out   # blocked on an option, or flanneld not started yet: as it is
    turned = set(ctx.state.tx_checksum_turned_off or ())
    choice = choose(options.tx_checksum_off, ctx.kernel_release)
    wanted_off = choice.off and confirmed.vxlan
    problem = commands.offload_command_problem(ctx.machine.has) if wanted_off else None
    out.found(Problem.OFFLOAD, problem)
    if problem:
        return out
    try:
        keep_udev_rule(ctx, wanted_off)
    except OSError as error:
        out.say(f"Could not write or remove {ctx.paths.offload_udev_rule}: {error}", True)
    devices = [name for name in (confirmed.vxlan_link, confirmed.vxlan_v6_link)
               if name and (ctx.paths.sys_class_net / name).exists()]
    try:
        if wanted_off:
            for device in devices:
                if vxlan.tx_checksum_offload(ctx.machine, device):
                    vxlan.set_tx_checksum_offload(ctx.machine, device, on=False)
                    out.say(f"Turned transmit checksum offload off on {device} ({choice.why})")
                # found off, it is the charm's doing too: its udev rule turns
                # offload off as flanneld makes the device, before any hook looks
                turned.add(device)
        else:
            for device in sorted(turned):
                if (ctx.paths.sys_class_net / device).exists() and \
                        vxlan.tx_checksum_offload(ctx.machine, device) is False:
                    vxlan.set_tx_checksum_offload(ctx.machine, device, on=True)
                    out.say(f"Turned transmit checksum offload back on on {device} "
                            f"({choice.why})")
            turned = set()
    except (OSError, subprocess.SubprocessError) as error:
        out.say(f"Could not set checksum offload on flanneld's vxlan devices: {error}", True)
    ctx.state.tx_checksum_turned_off = sorted(turned) or None
    return out


def keep_udev_rule(ctx: HookContext, wanted: bool) -> None:
    """The udev rule there while offload is to be off (rendered again when
    its template or ethtool's path changed, or someone edited it), gone
    otherwise."""
    path, record, state = ctx.paths.offload_udev_rule, ctx.record, ctx.state
    if not wanted:
        if record.is_recorded(path):
            record.remove(path)
        state.offload_udev_rule_inputs = None
        return
    ethtool = ctx.machine.which("ethtool") or "/usr/sbin/ethtool"
    inputs = digest(ethtool, ctx.template_digest(OFFLOAD_UDEV_RULE_NAME))
    if state.offload_udev_rule_inputs == inputs and record.holds(path):
        return
    from ..adapters import render   # jinja2 only when the rule is written
    rule = render.render_offload_udev_rule(ctx.templates, ethtool=ethtool,
                                           feature=vxlan.TX_CHECKSUM_FEATURE)
    record.install(path, rule.encode(), UDEV_RULE_MODE, sole=True)
    state.offload_udev_rule_inputs = inputs
