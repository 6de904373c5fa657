"""Provides side of the ``cos_agent`` interface (scope: container), for
grafana-agent's and opentelemetry-collector's machine charms.

The charm publishes its one key (``config``: alert rules and dashboards,
charms.flannel.steps.cos_agent) itself, when the relation comes and after
a refresh. This endpoint exists so that charms.reactive finds an
implementation for the endpoint: without one it logs "Unable to find
implementation for relation: provides of cos_agent" at ERROR in every hook.
It raises charms.reactive's own ``endpoint.cos-agent.*`` flags only.
"""

from charms.reactive import Endpoint


class CosAgentProvides(Endpoint):
    pass
