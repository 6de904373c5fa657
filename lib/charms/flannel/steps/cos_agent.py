"""flannel's alert rules and dashboard for the observability stack, on every
cos-agent relation (grafana-agent or opentelemetry-collector on the same
machine): written when the relation comes and after a refresh, which may
bring new rules."""
from __future__ import annotations

from ..adapters import cos_files
from ..facts.cos_agent import Topology, provider_data
from .context import HookContext
from .outcome import Outcome


def run(ctx: HookContext) -> Outcome:
    out = Outcome()
    if not ctx.juju.cos_agent_relation_ids():
        return out
    model, model_uuid, application = ctx.juju.topology()
    charm_dir = ctx.juju.charm_dir
    out.cos_agent = provider_data(
        cos_files.rules(charm_dir, cos_files.METRICS_RULES),
        cos_files.rules(charm_dir, cos_files.LOG_RULES),
        cos_files.dashboards(charm_dir), Topology(model, model_uuid, application))
    return out
