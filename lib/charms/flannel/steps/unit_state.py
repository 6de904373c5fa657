"""What the charm remembers between hooks, every key in one place.

`UnitState` wraps the unit's key-value store (charmhelpers' unitdata.kv(),
or any object with get/set/unset/unsetrange): the handlers name what they
remember (`state.confirmed_network`), not a key string, and the teardown
forgets all of it at once.
"""
from __future__ import annotations

from typing import Any, Optional

from ..facts.status import RECORDED, Problem

PROBLEM_PREFIX = "flannel.problem."
# what earlier revisions remembered and this one does not: forgotten with the rest
RETIRED_KEYS = ("flannel.flanneld-started",)


class _Key:
    """One remembered value: reading an unset key gives None, assigning
    None unsets it, and a value equal to the stored one is not written
    again (unitdata flushes what changed at the end of the hook)."""

    def __init__(self, key: str, why: str):
        self.key = key
        self.__doc__ = why

    def __get__(self, state: Optional["UnitState"], owner=None) -> Any:
        if state is None:
            return self
        return state.kv.get(self.key)

    def __set__(self, state: "UnitState", value: Any) -> None:
        if value is None:
            state.kv.unset(self.key)
        elif state.kv.get(self.key) != value:
            state.kv.set(self.key, value)


class UnitState:
    confirmed_network = _Key(
        "flannel.network-config",
        "The network config etcd was last confirmed to hold: flanneld's inputs are what "
        "etcd says, not what the options say before etcd has taken them.")
    network_inputs = _Key(
        "flannel.network-inputs",
        "Digest of what configure_network last acted on (options, etcd, credentials, "
        "service-cidr).")
    unit_file_inputs = _Key(
        "flannel.unit-file-inputs",
        "Digest of what flannel.service was last rendered from.")
    cni_inputs = _Key(
        "flannel.cni-inputs", "Digest of what the conflist was last written and published from.")
    nrpe_inputs = _Key("flannel.nrpe-inputs", "Digest of what the nrpe check was written from.")
    flanneld_inputs = _Key(
        "flannel.service-inputs",
        "Digest of everything flanneld read when it was last (re)started "
        "(facts/flanneld.py inputs_digest).")
    unit_file_loaded = _Key(
        "flannel.unit-file-loaded",
        "The unit file's checksum systemd last loaded (daemon-reload): a hook that died "
        "after writing the file and before reloading reloads on retry.")
    etcd_endpoints = _Key(
        "flannel.etcd-endpoints",
        "The etcd this unit last wrote to, for the stop hook's lease release (the relation "
        "may be gone by then; the client files are still on disk).")
    etcd_answered = _Key(
        "flannel.etcd-answered",
        "The etcd endpoint that answered last, tried first by the next hook: a dead member "
        "listed first costs one hook its timeout, not every hook.")
    binding_interface = _Key(
        "flannel.binding-interface", "network-get's answer, asked again on any hook but "
        "update-status.")
    flanneld_iface = _Key(
        "flannel.flanneld-iface",
        "The interface flanneld was last started on: a new one is a new public IP, under "
        "which flanneld would lease a new subnet.")
    lease_list = _Key(
        "flannel.lease-list",
        "Every lease's IPv4 subnet as update-status last listed them, with the fingerprint "
        "(count, newest create revision) they were listed at: listed again only when it "
        "changed (adapters/etcd_probe.py).")
    registered_lease = _Key(
        "flannel.registered-lease",
        "The lease this unit last named itself the holder of in etcd (<prefix>/units/): "
        "the stop hook deletes the name only if this unit wrote one.")
    flanneld_version = _Key(
        "flannel.flanneld-version",
        "The version the installed flanneld says it is (`flanneld -version`): whether it "
        "offers /readyz, and its known defects.")
    status = _Key(
        "flannel.status", "The workload status last set: update-status sets it only when it "
        "changes.")
    relations = _Key(
        "flannel.relations",
        "What the last hook but update-status read of the relations, only what it read: "
        "{\"etcd\": [connection string, digest of the client credentials] or None, "
        "\"service-cidr\": the principal's or None}. Juju runs a relation hook for every "
        "change of their data, so an idle hook need not ask again; the credentials "
        "themselves stay in the relation and the client files.")
    config = _Key(
        "flannel.config",
        "The charm config as the last hook but update-status read it: Juju runs "
        "config-changed for every change, so an idle hook need not ask again.")
    flanneld_restarts = _Key(
        "flannel.flanneld-restarts",
        "The restarts update-status made of flanneld for one cause that has not gone since "
        "(facts/restarts.py): the next waits twice as long as the last.")
    v2_network_seen = _Key(
        "flannel.v2-network-seen",
        "etcd's v2 keyspace held flannel v0.11's network when this unit carried its leases "
        "into v3 (v2_network.py): update-status looks whether every node has moved, to "
        "delete the v2 keys, until they are gone.")
    v011_rules = _Key(
        "flannel.v011-rules",
        "The old charm's flanneld on this node was of etcd v2's era (v0.11): its --ip-masq "
        "and forward rules sit in the built-in chains, where flanneld v0.27 never looks; "
        "they go at the next flanneld restart (or removal), and only on such a node.")
    cni_network_name = _Key(
        "flannel.cni-network-name",
        "The CNI network name the old charm's conflist used (adoption): host-local's "
        "allocation table is named after it.")
    flanneld_process = _Key(
        "flannel.flanneld-process",
        "[pid, start in seconds since boot] of flannel.service's main process when a hook "
        "last asked systemd: a hook that finds it still running asks systemd nothing.")
    tx_checksum_turned_off = _Key(
        "flannel.tx-checksum-turned-off",
        "flanneld's vxlan devices on which the charm turned transmit checksum offload off "
        "(in a hook, or by its udev rule as flanneld made them): turning "
        "disable-vxlan-tx-checksumming off turns it back on on these only.")
    subnet_manager = _Key(
        "flannel.subnet-manager",
        "Where flanneld keeps its leases since this unit last configured its network (etcd "
        "or kubernetes): a change leaves the other mode's keys or annotations behind.")
    subnet_manager_left = _Key(
        "flannel.subnet-manager-left",
        "The subnet-manager this unit left (etcd or kubernetes), while pods still run on "
        "addresses of the lease before the change: the active status says to recreate them.")
    node_name = _Key(
        "flannel.node-name",
        "The Kubernetes Node this machine is (found by its addresses), in "
        "subnet-manager=kubernetes: flanneld's NODE_NAME, and the Node whose flannel "
        "annotations go at removal.")
    offload_udev_rule_inputs = _Key(
        "flannel.offload-udev-rule-inputs",
        "Digest of what the checksum offload udev rule was last rendered from.")

    def __init__(self, kv):
        self.kv = kv

    def problem(self, problem: Problem) -> Optional[str]:
        return self.kv.get(PROBLEM_PREFIX + problem.key)

    def set_problem(self, problem: Problem, message: Optional[str] = None) -> None:
        """Record what one step found (None: nothing). Kept between hooks, so
        that a hook that skips the step still reports it."""
        if problem not in RECORDED:
            raise ValueError(f"{problem} is seen afresh by every hook, not recorded")
        if self.kv.get(PROBLEM_PREFIX + problem.key) != message:
            self.kv.set(PROBLEM_PREFIX + problem.key, message)

    def recorded_problems(self) -> list[tuple[Problem, str]]:
        """Every recorded problem with its text."""
        return [(problem, text) for problem in RECORDED
                if (text := self.kv.get(PROBLEM_PREFIX + problem.key))]

    def forget(self) -> None:
        """Everything above, and every problem: the unit is gone (stop)."""
        self.kv.unsetrange(prefix=PROBLEM_PREFIX)
        for attribute in vars(UnitState).values():
            if isinstance(attribute, _Key):
                self.kv.unset(attribute.key)
        for key in RETIRED_KEYS:
            self.kv.unset(key)

    @classmethod
    def keys(cls) -> list[str]:
        return [a.key for a in vars(cls).values() if isinstance(a, _Key)]
