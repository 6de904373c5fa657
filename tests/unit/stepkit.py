"""A step's context without a hook (steps/context.py): Juju as plain values
(Juju is what cannot run here), the machine a real network namespace of the
test's own (conftest.netns_machine) or this one, the files below a
directory of the test's own, what the unit remembers in charmhelpers' own
unitdata store."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from charmhelpers.core.unitdata import Storage

from charms.flannel.facts.paths import Paths
from charms.flannel.steps.context import EtcdRelation, HookContext
from charms.flannel.steps.unit_state import UnitState


@dataclass
class StubJuju:
    """What a step asks of Juju, as values a test sets."""
    charm_dir: Path
    hook: str = "config-changed"
    unit: str = "flannel/0"
    config_values: dict = field(default_factory=dict)
    etcd_relation: Optional[EtcdRelation] = None
    related_to_etcd: bool = True
    service: Optional[str] = None
    cni_relations: list = field(default_factory=lambda: ["cni:1"])
    bindings: list = field(default_factory=list)
    resources: dict = field(default_factory=dict)
    nagios_names: Optional[tuple] = None

    def config(self) -> dict:
        return dict(self.config_values)

    def etcd(self) -> Optional[EtcdRelation]:
        return self.etcd_relation

    def etcd_related(self) -> bool:
        return self.related_to_etcd

    def service_cidr(self) -> Optional[str]:
        return self.service

    def cni_relation_ids(self) -> list:
        return list(self.cni_relations)

    def bind_addresses(self, endpoint: str) -> list:
        return list(self.bindings)

    def resource_path(self, name: str) -> Optional[str]:
        return self.resources.get(name)

    def nagios(self):
        return self.nagios_names


def context(tmp_path: Path, *, machine=None, hook: str = "config-changed", config=None,
            etcd: Optional[EtcdRelation] = None, clock=None, kv=None) -> HookContext:
    """A HookContext on files below tmp_path/node, its charm dir tmp_path/charm."""
    charm = tmp_path / "charm"
    charm.mkdir(exist_ok=True)
    juju = StubJuju(charm_dir=charm, hook=hook, config_values=dict(config or {}),
                    etcd_relation=etcd)
    kwargs = {"clock": clock} if clock else {}
    kv = kv if kv is not None else Storage(str(tmp_path / "unit-state.db"))
    return HookContext(juju, UnitState(kv), machine=machine,
                       paths=Paths.under(tmp_path / "node"), **kwargs)
