"""Where flanneld keeps its leases (subnet-manager): one module per mode
behind one small interface, as flanneld's pkg/subnet has its Manager with
pkg/subnet/etcd and pkg/subnet/kube behind it.

- `etcd.py`: flannel's network config and leases in etcd (flanneld's
  -etcd-* flags), through the etcd relation's client credentials.
- `kube.py`: the Nodes of the Kubernetes API (-kube-subnet-mgr): each
  Node's pod CIDRs, allocated by kube-controller-manager, are its lease,
  and flanneld's annotations on it say that flanneld runs there.

The mode flanneld *runs* (`running`: recorded when the network step last
served it) decides how flanneld is started and supervised and what the
actions read; the option (`wanted`) decides only where the network step
goes next, and the running mode is left only once the wanted one serves.
What both modes need (the backend change and service-cidr rules, the
interface, MTU and family checks, the restart policy) sits above this
seam, once: in steps/network.py, steps/checks.py and steps/supervision.py. Outside these
three modules and the option's parsing (facts/options.py), nothing asks
which mode is on (tests/unit/test_layers.py keeps it so).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional, Protocol

from ...facts.netconfig import NetworkConfig
from ...facts.options import ETCD, KUBERNETES, InvalidOption
from ...facts.restarts import Cause
from ...facts.status import Problem
from ..context import HookContext
from ..outcome import Outcome


class LeasesUnreadable(Exception):
    """Where the leases are kept cannot be read: "cannot reach <where>: <reason>"."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"cannot reach {where}: {reason}")
        self.where, self.reason = where, reason


class Leases(NamedTuple):
    """Every lease where a mode keeps them, for the actions."""
    lifetimes: list            # (Lease, seconds left or None: a Node's has no expiry)
    units: dict                # (first subnet, address) -> who holds it (a unit, a Node)


@dataclass(frozen=True)
class Cluster:
    """What the other nodes run, as a mode sees it, for the rules every mode
    keeps (steps/network.py refusal): the backends nodes hold leases of,
    and the cluster's service-cidr."""
    backends: dict = field(default_factory=dict)   # backend type -> nodes holding a lease of it
    service_cidr: Optional[str] = None


# The rules above the seam: a mode's serve() asks them of what it found
Refusal = Callable[[Cluster], Optional[InvalidOption]]


class FlanneldOn(NamedTuple):
    """How flanneld runs on a mode: its arguments and environment in
    flannel.service (lines of the unit file's [Service] before ExecStart),
    what the unit file says of the mode (a digest input), and the
    checksums of the files flanneld reads at start from this mode."""
    where: str
    arguments: tuple[str, ...]
    preamble: tuple[str, ...] = ()
    reads: tuple = ()


class LeaseLook(NamedTuple):
    """What update-status learned of this node's lease where the mode keeps
    it (the mode records its own problems on the way)."""
    unreachable: bool = False        # the mode could not be asked: nothing else is known
    lost: Optional[str] = None       # why this node's lease is gone: a restart leases again
    others: Optional[tuple] = None   # every other node's lease, by its first subnet
    cause: Optional[Cause] = None    # what else only a restart of flanneld mends
    unmendable: bool = False         # what the mode found no restart mends (out of subnets)
    lease_gone: bool = False         # the subnet flanneld runs on is no longer this node's


class SubnetManager(Protocol):
    name: str                        # the option's value: etcd | kubernetes
    problems: tuple                  # the Problems only this mode finds
    principal_first: bool            # the principal hears of the network before it is served
    lease_home: str                  # where a node's lease lives, for the actions' words

    def reachable(self) -> bool:
        """Where the leases are kept can be asked (flag flannel.leases.reachable)."""

    def waiting(self) -> list:
        """(Problem, text) of what the mode waits for before anything runs."""

    def inputs(self, network: Optional[NetworkConfig]) -> Optional[tuple]:
        """What serving `network` depends on, for the network step's
        invalidation; None while it cannot be served."""

    def serve(self, network: NetworkConfig, out: Outcome, *, replace: bool,
              refusal: Refusal) -> bool:
        """Make `network` what flanneld reads in this mode, unless `refusal`
        refuses what the mode found (a NETWORK problem); `replace` False
        (an option is invalid): only an absent network is written. True once
        served; otherwise the mode's problems say why."""

    def keep(self, network: NetworkConfig, out: Outcome) -> bool:
        """While another mode is not ready or an option is refused: the
        network flanneld runs here written back if the mode lost it (etcd
        rebuilt empty), never replaced. True while the mode holds a network
        for flanneld."""

    def flanneld(self, out: Outcome) -> Optional[FlanneldOn]:
        """How flanneld runs on this mode; None while it cannot (the mode's
        problems, or its status, say why)."""

    def look(self, out: Outcome, *, flanneld_started: bool) -> LeaseLook:
        """update-status: does this node still hold its lease, and which
        leases do the others hold? Clears flannel.network.configured where
        the mode lost the network (written again in the same hook)."""

    def addresses_of(self, subnets: tuple) -> dict:
        """{subnet: its node's address} of some of the others' leases."""

    def leases(self) -> Leases:
        """Every lease, for the actions; raises LeasesUnreadable."""

    def before_new_address(self, old_iface: Optional[str], new_iface: str,
                           out: Outcome) -> None:
        """flanneld is about to start on another interface (a new public IP)."""

    def leave(self, out: Outcome, *, keep_lease: bool) -> None:
        """What this mode keeps of this node where it keeps the leases goes
        (flanneld stopped): its lease too unless `keep_lease` (a removal,
        for a unit added back), each part on its own; what fails is logged."""

    def files(self) -> tuple:
        """(the files serving wrote, their directory): the install record's,
        removed when the mode is left (or with every other at removal)."""


# What only each mode finds (its implementation's `problems`): here too, so
# that a hook learns them without loading the implementation it does not run
PROBLEMS = {
    ETCD: (Problem.ETCD, Problem.OUT_OF_SUBNETS),
    KUBERNETES: (Problem.KUBE, Problem.KUBE_ACCESS, Problem.NODE, Problem.POD_CIDR),
}


def named(ctx: HookContext, name: str) -> SubnetManager:
    """The implementation of mode `name`, loaded on first use."""
    if name == KUBERNETES:
        from .kube import KubeSubnets
        return KubeSubnets(ctx)
    from .etcd import EtcdSubnets
    return EtcdSubnets(ctx)


def wanted(ctx: HookContext) -> SubnetManager:
    """Where the option says the leases are kept (while an option is
    invalid: where flanneld runs, else etcd)."""
    options = ctx.options
    if options is not None:
        return named(ctx, options.subnet_manager)
    return running(ctx) or named(ctx, ETCD)


def running(ctx: HookContext) -> Optional[SubnetManager]:
    """The mode the network step last served, flanneld's (a unit configured
    by a revision before subnet-manager existed ran on etcd); None before
    any."""
    name = ctx.state.subnet_manager or (ETCD if ctx.state.etcd_endpoints else None)
    return named(ctx, name) if name else None


def reachable(ctx: HookContext) -> bool:
    """Where the leases are kept can be asked: where the option goes, or
    where flanneld runs meanwhile (its network is kept there: an etcd
    rebuilt empty while a switch waits gets it back)."""
    mode = running(ctx)
    return wanted(ctx).reachable() or (mode is not None and mode.reachable())


def hidden_problems(ctx: HookContext) -> tuple:
    """The problems of modes neither wanted nor running: no step of theirs
    runs to find them gone, so the status leaves them out."""
    shown = {wanted(ctx).name, getattr(running(ctx), "name", None)}
    return tuple(problem for name, problems in PROBLEMS.items() if name not in shown
                 for problem in problems)


def leases_of(ctx: HookContext) -> Leases:
    """Every lease, where flanneld runs (before it runs: where it will).
    Raises LeasesUnreadable."""
    return (running(ctx) or wanted(ctx)).leases()


def lease_home(ctx: HookContext) -> str:
    return (running(ctx) or wanted(ctx)).lease_home
