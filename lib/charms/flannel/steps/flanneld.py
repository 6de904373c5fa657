"""flanneld runs with its current inputs (flag flannel.service.running).

flannel.service's unit file is rendered when what it says changed, systemd
loads it, and flanneld is (re)started when anything it reads at start
changed (its binary, unit file, etcd client files, the network config), or
when it is not running, and only then. While it is stopped for a restart,
what a previous network left goes (forget_old_network): flanneld itself
never cleans any of it.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from typing import Optional

from ..adapters import iptables, links, nftables, pod_bridge, vxlan
from ..adapters.node_files import read_subnet_env
from ..facts.digest import digest
from ..facts.flanneld import inputs_digest
from ..facts.netconfig import NetworkConfig
from ..facts.paths import SERVICE_FILE_MODE, SERVICE_NAME
from ..facts.subnet_env import SubnetEnv
from . import checks, subnets
from .context import HookContext
from .flags import NETWORK_CONFIGURED, SERIES_UPGRADE, SERVICE_RUNNING
from .outcome import Outcome, inputs_changed

FLAG = SERVICE_RUNNING


def unit_file_inputs(ctx: HookContext) -> Optional[str]:
    """What the unit file says: how flanneld runs on its subnet manager
    (etcd's endpoints, or the Node's name), flanneld's interface, the
    template."""
    mode = subnets.running(ctx)
    on = mode.flanneld(Outcome()) if mode is not None and ctx.options is not None else None
    if on is None:
        return None
    return digest(on.where, ctx.flanneld_iface(ctx.options),
                  ctx.template_digest("flannel.service"))


def stale(ctx: HookContext) -> Optional[str]:
    changed = inputs_changed(ctx.state.unit_file_inputs, unit_file_inputs(ctx),
                             "what flannel.service says changed")
    if changed:
        return changed
    if not ctx.record.holds(ctx.paths.service_file):
        return f"{ctx.paths.service_file} is not what the charm wrote"
    if not ctx.flanneld_active:
        return "flanneld is not running"
    return None


def run(ctx: HookContext) -> Outcome:
    out = Outcome()
    options = ctx.options
    if options is not None:
        out.problems.update(checks.start_problems(ctx, options))
        if any(out.problems.values()):
            return out   # blocked; flanneld runs on as it was
    mode, confirmed = subnets.running(ctx), ctx.confirmed
    if mode is None or confirmed is None:
        # a flag set by someone else (charm-flannel's): not this charm's
        return out.clear(NETWORK_CONFIGURED)
    on = mode.flanneld(out)
    if on is None:
        return out   # waiting for the mode (its status says so)
    if options is not None:
        install_unit_file(ctx, on)
    load_unit_file(ctx)
    if restart_if_changed(ctx, confirmed, on, mode, out):
        ctx.forget_flanneld()
        ctx.state.v011_rules = None   # dropped while flanneld was stopped
    return out.set(SERVICE_RUNNING)


def install_unit_file(ctx: HookContext, on: subnets.FlanneldOn) -> None:
    """Render flannel.service when what it says changed (jinja2 only then)."""
    inputs = unit_file_inputs(ctx)
    state, record = ctx.state, ctx.record
    # the bytes on disk, not only the record: a unit file edited since is
    # rendered again (and systemd reloaded: its checksum is no longer loaded)
    if state.unit_file_inputs == inputs and record.holds(ctx.paths.service_file):
        return
    from ..adapters import render
    paths = ctx.paths
    unit_file = render.render_service(
        ctx.templates, subnet_manager=on.arguments, preamble=on.preamble,
        iface=ctx.flanneld_iface(ctx.options), flanneld=paths.flanneld,
        subnet_file=paths.subnet_env)
    rewritten = record.install(ctx.paths.service_file, unit_file.encode(), SERVICE_FILE_MODE,
                               sole=True)
    if rewritten and state.unit_file_inputs == inputs:
        # the same bytes the charm wrote before, over someone's edit that
        # systemd may have loaded and flanneld run: reload, and restart
        state.unit_file_loaded = None
        state.flanneld_inputs = None
    state.unit_file_inputs = inputs


def load_unit_file(ctx: HookContext) -> bool:
    """daemon-reload and enable, if systemd has not loaded the unit file on
    disk yet; True if it did now. Keyed on what systemd last loaded, not on
    this hook having written the file: a hook that died in between reloads
    on retry. Raises CalledProcessError if the reload failed."""
    loaded = ctx.record.checksum(ctx.paths.service_file)
    if ctx.state.unit_file_loaded == loaded:
        return False
    ctx.systemd.daemon_reload()
    ctx.systemd.do("enable", SERVICE_NAME)
    ctx.state.unit_file_loaded = loaded
    return True


def flanneld_inputs(ctx: HookContext, confirmed: NetworkConfig, on: subnets.FlanneldOn) -> str:
    """One digest of everything flanneld reads at start."""
    record, paths = ctx.record, ctx.paths
    read = (record.checksum(paths.flanneld), record.checksum(paths.service_file), *on.reads)
    return inputs_digest(read, confirmed.to_json())


def restart_if_changed(ctx: HookContext, confirmed: NetworkConfig, on: subnets.FlanneldOn,
                       mode: subnets.SubnetManager, out: Outcome) -> bool:
    """(Re)start flanneld if its inputs changed since it last started, or it
    is not active (asked only when they did not); True if it did. While it
    is stopped: what the previous network left goes, flannel v0.11's rules
    on a node refreshed from it, and if flanneld moves to another interface
    (a new public IP) its lease is given back, so that it takes the same
    subnet again."""
    state = ctx.state
    wanted = flanneld_inputs(ctx, confirmed, on)
    if state.flanneld_inputs == wanted and ctx.flanneld_active:
        return False
    out.say(f"flanneld inputs changed; (re)starting {SERVICE_NAME}")
    ctx.systemd.do("stop", SERVICE_NAME)
    link = ctx.flanneld_link(ctx.options)
    underlay_mtu = link.mtu if link is not None and link.mtu else None
    served = [network for network, _ in ctx.served_networks()]
    forgotten = forget_old_network(ctx, confirmed, underlay_mtu)
    if forgotten:
        out.say(f"Dropped what the previous network left: {forgotten}")
    if forgotten.old_lease is not None:
        try:   # flanneld starts below whatever this finds: it writes its own rules
            for line in forget_old_rules(ctx, forgotten.old_lease, confirmed):
                out.say(f"Dropped the previous network's {line}")
        except (OSError, subprocess.SubprocessError) as error:
            out.say(f"Could not drop the previous network's iptables rules or routes: {error}")
    try:   # an enable-nftables change: flanneld v0.27 does not take the old mode's away
        for line in forget_other_mode_rules(ctx, confirmed):
            out.say(f"Dropped flanneld's rule of its other mode: {line}")
    except (OSError, subprocess.SubprocessError) as error:
        out.say(f"Could not drop flanneld's rules of its other mode: {error}", True)
    if state.v011_rules:   # refreshed from flannel v0.11, whose rules flanneld >= 0.18 keeps
        try:
            for line in iptables.remove_v011_rules(ctx.machine, served):
                out.say(f"Dropped flannel v0.11's iptables rule {line}")
        except (OSError, subprocess.SubprocessError) as error:
            out.say(f"Could not drop flannel v0.11's iptables rules: {error}")
    iface = ctx.flanneld_iface(ctx.options)
    if state.flanneld_iface not in (None, iface):
        mode.before_new_address(state.flanneld_iface, iface, out)
    state.flanneld_iface = iface
    ctx.systemd.do("start", SERVICE_NAME)
    state.flanneld_inputs = wanted
    return True


# --- what a previous network leaves -----------------------------------------------------

@dataclass
class Forgotten:
    """What forget_old_network removed."""
    bridge_addresses: list[str] = field(default_factory=list)
    subnet_env: bool = False
    vxlan_links: list[str] = field(default_factory=list)
    bridge_mtu: Optional[tuple[int, int]] = None   # (old, new): the bridge's MTU set anew
    # the lease the dropped subnet.env described (what the node served till now)
    old_lease: Optional[SubnetEnv] = None

    def __bool__(self) -> bool:
        return bool(self.bridge_addresses or self.subnet_env or self.vxlan_links
                    or self.bridge_mtu)

    def __str__(self) -> str:
        parts = [f"{name} {value}" for name, value in (
            ("cni0 addresses", self.bridge_addresses), ("vxlan devices", self.vxlan_links),
            ("cni0 MTU (old, new)", self.bridge_mtu)) if value]
        return ", ".join(parts + (["subnet.env"] if self.subnet_env else []))


def forget_old_network(ctx: HookContext, config: NetworkConfig,
                       underlay_mtu: Optional[int]) -> Forgotten:
    """While flanneld is stopped, before it starts on `config`, drop what
    belongs to a previous network (`underlay_mtu`: the MTU of the interface
    flanneld sends on, when known):

    - subnet.env, if it describes another network, lease length or IPv6
      setting: until flanneld writes the new one, the flannel CNI plugin
      would hand out old addresses (and put the old gateway back on the
      bridge). flanneld drops a lease that does not fit and leases anew (a
      cidr change, IPv6 turned on or off: the IPv4 subnet changes too).
    - flannel's addresses on the pods' bridge that cannot be the coming
      lease's gateway (pod_bridge.settle_before_start): the bridge plugin
      refuses to put a new gateway on a bridge that holds another IPv4
      address, so without this a cidr change needs a reboot
      (LP #1932551). The bridge's MTU follows the pods'.
    - flanneld's vxlan devices the config does not make, and those whose
      MTU is not the one the config gives them (an `mtu` change, which
      flanneld would not apply to a device it finds).

    Nothing is touched when all of it already fits, so calling this on every
    (re)start is harmless.
    """
    gone = Forgotten()
    path = ctx.paths.subnet_env
    try:
        env = read_subnet_env(path)
    except ValueError:   # garbage: flanneld will write it anew
        env = None
        gone.subnet_env = os.path.exists(path)
    else:
        gone.subnet_env = env is not None and not (
            env.network == config.network and config.holds(env)
            and env.ipv6_network == config.ipv6_network)
    if gone.subnet_env:
        gone.old_lease = env
    served = [network for network, _ in config.pod_networks]
    served += [network for network, _ in (env.networks if env else ())]
    pod_mtu = config.pod_mtu(underlay_mtu)
    bridge = pod_bridge.settle_before_start(
        pod_bridge.FlannelsMarks(networks=tuple(served)), ctx.cni_network_name,
        kept=env.gateways if env is not None and not gone.subnet_env else (),
        dropped=env.gateways if gone.old_lease is not None else (),
        could_be_gateway=config.could_be_gateway, pod_mtu=pod_mtu, machine=ctx.machine,
        tables_dir=ctx.paths.host_local_tables)
    gone.bridge_addresses = [str(address) for address in bridge.removed]
    gone.bridge_mtu = bridge.mtu
    if gone.subnet_env:
        os.unlink(path)
    gone.vxlan_links = vxlan.delete_vxlan_links(ctx.machine, keep=config.vxlan_mtus(underlay_mtu))
    return gone


def forget_old_rules(ctx: HookContext, old_lease: SubnetEnv, config: NetworkConfig) -> list[str]:
    """After a network change, while flanneld is stopped: its iptables rules
    of both families (it writes its own afresh as it starts, for the
    networks it serves then; it recycles an old network's only when
    subnet.env still names that network, and forget_old_network has just
    removed that file, and it never touches ip6tables once IPv6 is off),
    and its routes into the pod networks (or subnet lengths) it no longer
    serves (host-gw's). Returns what went, for the log."""
    served = set(config.pod_networks)
    dropped = [pair for pair in old_lease.networks if pair not in served]
    return (iptables.remove_iptables_rules(ctx.machine)
            + links.remove_pod_network_routes(ctx.machine, dropped))


def forget_other_mode_rules(ctx: HookContext, config: NetworkConfig) -> list[str]:
    """While flanneld is stopped, before it starts on `config`: the rules of
    the mode it does not run in (its iptables chains in nftables mode, its
    nft tables in iptables mode), which flanneld itself leaves. Returns
    what went, for the log."""
    if config.nftables:
        return iptables.remove_iptables_rules(ctx.machine)
    return nftables.remove_nft_tables(ctx.machine)


# --- a series upgrade ---------------------------------------------------------------------

def pause(ctx: HookContext) -> Outcome:
    """Before the machine's series upgrade: flanneld stopped and kept from
    starting at boot (as charmhelpers' service_pause does it with systemd);
    nothing runs until post-series-upgrade."""
    for verb in ("stop", "disable", "mask"):
        ctx.systemd.do(verb, SERVICE_NAME)
    ctx.forget_flanneld()
    return Outcome().set(SERIES_UPGRADE)


def resume(ctx: HookContext) -> Outcome:
    for verb in ("unmask", "enable", "start"):
        ctx.systemd.do(verb, SERVICE_NAME)
    ctx.forget_flanneld()
    return Outcome().clear(SERIES_UPGRADE)
