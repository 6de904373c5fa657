"""The unit's workload status: every problem the charm can have, each with
its level and its place in the order an operator should act on them, and
the one status shown, chosen by that order (as ops' collect-status picks
the highest-priority status its components add).

Steps find problems (steps/status.py gathers them each hook); this module
only ranks them, so every status message is tested without a hook. The
texts are part of a refresh's contract (operators' alerts match them).
"""
from __future__ import annotations

from enum import Enum
from typing import Iterable, NamedTuple, Optional

from .flanneld import HEALTHZ_IP, HEALTHZ_PORT

BLOCKED, WAITING, MAINTENANCE, ACTIVE = "blocked", "waiting", "maintenance", "active"

WAITING_FOR_ETCD = "Waiting for etcd relation."
WAITING_FOR_KUBECONFIG = ("Waiting for the principal's kubeconfig (/root/.kube/config) for "
                          "subnet-manager=kubernetes.")
WAITING_FOR_CREDENTIALS = "Waiting for etcd client credentials."
WAITING_FOR_NETWORK = "Waiting to write the flannel network to etcd."
WAITING_FOR_SERVICE = "Waiting for flannel.service to start."
SERVICE_FAILING = "flannel.service is failing: flanneld exited after start (journalctl -u flannel)"
WAITING_FOR_CNI = "Waiting for the principal on the cni relation."
NEGOTIATING = "Negotiating flannel network subnet."
NOT_READY = (f"flanneld is not ready: {HEALTHZ_IP}:{HEALTHZ_PORT}/readyz did not answer 200 "
             "(journalctl -u flannel)")
INSTALLING = "Installing flannel."
SERIES_UPGRADE = "Series upgrade in progress"
RECORD_ADVICE = "no file is changed; remove and re-add flannel (unproven files stay)"
ACTIVE_PREFIX = "Flannel subnet "


class Problem(Enum):
    """(level, rank): a lower rank is shown first. The value's first part
    names the problem where a step records it between hooks
    (UnitState.problems: unitdata "flannel.problem.<name>")."""
    RECORD = ("record", BLOCKED, 10)            # the install record is damaged
    SERIES_UPGRADE = ("series-upgrade", BLOCKED, 20)
    RESOURCE = ("resource", BLOCKED, 30)        # missing, broken, or no room to install it
    INSTALLING = ("installing", MAINTENANCE, 35)
    OPTIONS = ("options", BLOCKED, 40)          # an option that does not parse
    CIDR = ("cidr", BLOCKED, 41)                # over a network of the machine's
    MTU = ("mtu", BLOCKED, 42)                  # more than the interface's
    NETWORK = ("network", BLOCKED, 43)          # a backend change refused under leases
    IFACE = ("iface", BLOCKED, 44)              # an interface flanneld cannot use
    IPV6 = ("ipv6", BLOCKED, 45)                # no global IPv6 address to send from
    COMMANDS = ("commands", BLOCKED, 46)        # no nft, iptables or ip6tables for flanneld
    KERNEL = ("kernel", BLOCKED, 47)            # br_netfilter not loaded, and modprobe failed
    NO_ETCD = ("no-etcd", BLOCKED, 50)
    NO_KUBECONFIG = ("no-kubeconfig", WAITING, 55)   # subnet-manager=kubernetes, none yet
    KUBE_ACCESS = ("kube-access", BLOCKED, 56)  # a kubeconfig that cannot work, 401, 403
    NODE = ("node", BLOCKED, 57)                # two Nodes could be this machine
    POD_CIDR = ("pod-cidr", BLOCKED, 58)        # the Node has no pod CIDR flannel can serve
    KUBE = ("kube", WAITING, 62)                # the API unreachable, or this Node not found
    ETCD_CREDENTIALS = ("etcd-credentials", WAITING, 60)
    ETCD = ("etcd", WAITING, 61)                # away, refusing, or publishing garbage
    NETWORK_PENDING = ("network-pending", WAITING, 70)
    OUT_OF_SUBNETS = ("out-of-subnets", BLOCKED, 79)   # every subnet leased: flanneld exits
    SERVICE_FAILING = ("service-failing", WAITING, 80)
    SERVICE_STARTING = ("service-starting", WAITING, 81)
    CNI_PENDING = ("cni-pending", WAITING, 85)
    CNI = ("cni", BLOCKED, 90)                  # a plugin missing, a config that does not load
    BRIDGE = ("bridge", BLOCKED, 91)            # an address on cni0 that is not flannel's
    BRIDGE_STALE = ("bridge-stale", WAITING, 95)   # flannel's old gateway still on cni0
    OFFLOAD = ("offload", BLOCKED, 96)          # vxlan checksum offload cannot be turned off
    UNROUTABLE = ("unroutable", BLOCKED, 97)    # host-gw: a node not on this node's network
    RESTARTS = ("restarts", WAITING, 98)        # flanneld restarted for a cause that stays
    NEGOTIATING = ("negotiating", WAITING, 100)
    NOT_READY = ("not-ready", WAITING, 101)     # flanneld's /readyz (v0.28.9) says not yet

    @property
    def key(self) -> str:
        return self.value[0]

    @property
    def level(self) -> str:
        return self.value[1]

    @property
    def rank(self) -> int:
        return self.value[2]


# The problems a step records between hooks (a hook that skips the step
# still shows it); the others are seen afresh by every hook.
RECORDED = (Problem.RECORD, Problem.RESOURCE, Problem.CIDR, Problem.MTU, Problem.NETWORK,
            Problem.IFACE, Problem.IPV6, Problem.COMMANDS, Problem.KERNEL, Problem.ETCD,
            Problem.POD_CIDR, Problem.KUBE, Problem.KUBE_ACCESS, Problem.NODE,
            Problem.BRIDGE, Problem.BRIDGE_STALE, Problem.OFFLOAD, Problem.OUT_OF_SUBNETS,
            Problem.UNROUTABLE, Problem.RESTARTS)


class Status(NamedTuple):
    state: str  # maintenance | blocked | waiting | active
    message: str


def choose(found: Iterable[tuple[Problem, Optional[str]]], gateways: Iterable = (),
           note: str = "") -> Status:
    """The status of the highest-ranked problem found (problem, its text;
    None for a problem whose text is always the same), else active naming
    the node's gateways ("Flannel subnet 10.1.52.1/24, fd10:1:0:5::1/64"),
    and the note if any (a known defect of the flanneld that runs)."""
    ranked = sorted(found, key=lambda item: item[0].rank)
    if ranked:
        problem, text = ranked[0]
        return Status(problem.level, text or FIXED_TEXTS[problem])
    active = ACTIVE_PREFIX + ", ".join(map(str, gateways))
    return Status(ACTIVE, f"{active}; {note}" if note else active)


FIXED_TEXTS = {
    Problem.SERIES_UPGRADE: SERIES_UPGRADE,
    Problem.INSTALLING: INSTALLING,
    Problem.NO_ETCD: WAITING_FOR_ETCD,
    Problem.NO_KUBECONFIG: WAITING_FOR_KUBECONFIG,
    Problem.ETCD_CREDENTIALS: WAITING_FOR_CREDENTIALS,
    Problem.NETWORK_PENDING: WAITING_FOR_NETWORK,
    Problem.SERVICE_FAILING: SERVICE_FAILING,
    Problem.SERVICE_STARTING: WAITING_FOR_SERVICE,
    Problem.CNI_PENDING: WAITING_FOR_CNI,
    Problem.NEGOTIATING: NEGOTIATING,
    Problem.NOT_READY: NOT_READY,
}


def record_text(problem: str) -> str:
    """The blocked status of a damaged install record."""
    return f"{problem}: {RECORD_ADVICE}"
