"""The handlers' side of the library: this hook's context, and applying
what a step returns.

Juju, as the steps ask it (steps/context.py's Juju), answers through
charmhelpers' hookenv (the hook tools), network-get run directly for the
binding, and the interface layers' endpoints (interfaces/). With
reactive/flannel.py, the only code that imports charmhelpers and
charms.reactive up front (adapters/nrpe.py imports charmhelpers' nrpe
inside its functions); everything below it (steps, adapters, facts) runs
on any host.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path
from typing import Optional

from charmhelpers.core import hookenv, unitdata
from charms.reactive import (clear_flag, endpoint_from_flag, endpoint_from_name, is_flag_set,
                             set_flag)

from .steps.context import EtcdRelation, HookContext
from .steps.flags import ETCD_AVAILABLE, ETCD_CONNECTED, ETCD_TLS, NRPE_AVAILABLE
from .steps.outcome import Outcome
from .steps.unit_state import UnitState

# Set by the bootstrap (charms/flannel/bootstrap.py INSTALLED_ENV) when this
# hook installed the dependencies and so set a maintenance status.
BOOTSTRAP_INSTALLED_ENV = "FLANNEL_BOOTSTRAP_INSTALLED"


class HookJuju:
    """The hook tools and relation endpoints of the running hook."""

    @property
    def hook(self) -> str:
        return hookenv.hook_name()

    @property
    def charm_dir(self) -> Path:
        return Path(hookenv.charm_dir())

    @property
    def unit(self) -> str:
        return hookenv.local_unit()

    def config(self) -> dict:
        return dict(hookenv.config())

    def etcd(self) -> Optional[EtcdRelation]:
        return self._etcd

    @functools.cached_property
    def _etcd(self) -> Optional[EtcdRelation]:
        # read once: the relation's data stands for the hook, and the interface
        # layer sets its flags from it as the hook starts
        if not (is_flag_set(ETCD_AVAILABLE) and is_flag_set(ETCD_TLS)):
            return None
        endpoint = endpoint_from_flag(ETCD_AVAILABLE)
        # the interface layer sets its flags in etcd's relation hooks only:
        # in any other hook the data may have gone since
        credentials = endpoint.client_credentials() if endpoint else None
        connection_string = endpoint.connection_string() if endpoint else None
        if not connection_string or not credentials or not all(credentials):
            return None
        return EtcdRelation(connection_string, *credentials)

    def etcd_related(self) -> bool:
        return (is_flag_set(ETCD_CONNECTED) or is_flag_set(ETCD_AVAILABLE)
                or bool(endpoint_from_name("etcd").relations))

    def service_cidr(self) -> Optional[str]:
        cni = endpoint_from_name("cni")
        return cni.service_cidr() if cni.relations else None

    def cni_relation_ids(self) -> list[str]:
        return [relation.relation_id for relation in endpoint_from_name("cni").relations]

    def cos_agent_relation_ids(self) -> list[str]:
        return hookenv.relation_ids("cos-agent")

    def topology(self) -> tuple[str, str, str]:
        """(model name, model uuid, application name) of this unit."""
        return (hookenv.model_name(), hookenv.model_uuid(),
                hookenv.local_unit().split("/")[0])

    def bind_addresses(self, endpoint: str) -> list[dict]:
        # network-get itself, in JSON: hookenv.network_get first runs `jujud
        # version` for a check every Juju the charm supports (2.9 on) passes,
        # then parses YAML
        shown = subprocess.check_output(["network-get", endpoint, "--format", "json"],
                                        stderr=subprocess.DEVNULL)
        return json.loads(shown or "{}").get("bind-addresses") or []

    def resource_path(self, name: str) -> Optional[str]:
        return hookenv.resource_get(name) or None

    def nagios(self) -> Optional[tuple[str, str]]:
        endpoint = endpoint_from_flag(NRPE_AVAILABLE)
        if endpoint is None:
            return None
        return endpoint.nagios_hostname(), endpoint.nagios_host_context()

    # --- what a step's outcome asks of Juju -------------------------------------------
    def publish(self, outcome: Outcome) -> None:
        """The outcome's word for the principal, the workload version, its log."""
        for message, warning in outcome.log:
            hookenv.log(message, level=hookenv.WARNING if warning else hookenv.INFO)
        if outcome.publish:
            cidr, conf_file = outcome.publish
            endpoint_from_name("cni").set_config(cidr=cidr, cni_conf_file=conf_file)
        if outcome.version:
            hookenv.application_version_set(outcome.version)
        if outcome.cos_agent is not None:
            for rid in self.cos_agent_relation_ids():
                hookenv.relation_set(relation_id=rid,
                                     relation_settings={"config": outcome.cos_agent})

    def set_status(self, state: str, message: str, *, unless_unchanged: bool) -> None:
        """status-set, but an idle hook skips one that would change nothing
        (unless the bootstrap, or Juju before install, set another since)."""
        if unless_unchanged and not os.environ.get(BOOTSTRAP_INSTALLED_ENV):
            return
        hookenv.status_set(state, message)


@hookenv.cached
def context() -> HookContext:
    """This hook's context, made on first use (charmhelpers' per-hook cache)."""
    return HookContext(HookJuju(), UnitState(unitdata.kv()))


def apply(outcome: Outcome) -> Outcome:
    """What a step returned: its flags, problems, word to Juju, status."""
    ctx = context()
    for flag in outcome.clear_flags:
        clear_flag(flag)
    for flag in outcome.set_flags:
        set_flag(flag)
    for problem, text in outcome.problems.items():
        ctx.state.set_problem(problem, text)
    ctx.juju.publish(outcome)
    if outcome.status is not None:
        hookenv.status_set(outcome.status.state, outcome.status.message)
    return outcome
