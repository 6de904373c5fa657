"""What flannel publishes on the cos-agent relation (interface cos_agent,
grafana-agent's and opentelemetry-collector's machine charms; their library
charms.grafana_agent.v0.cos_agent, LIBPATCH 26, reads it): one JSON object
under the unit's `config` key, the shape of its CosAgentProviderUnitData.
docs/reference/relations.md has the protocol.

The rules and the dashboard are files of the charm (cos/); here they get
what the library's provider side would give them: each alert rule the
unit's Juju topology as labels (so that an alert names flannel, not the
agent), group names prefixed with the topology's identifier, and each
dashboard a uid from the charm's name and the file's path, a "charm:"
tag, then lzma and base64."""
from __future__ import annotations

import base64
import copy
import hashlib
import json
import lzma
import re
from typing import NamedTuple

KEY = "config"
CHARM = "flannel"


class Topology(NamedTuple):
    model: str
    model_uuid: str
    application: str
    charm: str = CHARM

    @property
    def identifier(self) -> str:
        return f"{self.model}_{self.model_uuid[:8]}_{self.application}"

    @property
    def labels(self) -> dict[str, str]:
        return {"juju_model": self.model, "juju_model_uuid": self.model_uuid,
                "juju_application": self.application, "juju_charm": self.charm}


def labelled_rules(rules: dict, topology: Topology) -> dict:
    """A rules file ({"groups": [...]}) as the library publishes it: every
    group named "<identifier>_<name>_rules", every rule given the topology's
    labels it does not set itself; {} for no groups."""
    groups = []
    for group in copy.deepcopy(rules or {}).get("groups") or []:
        name = f"{topology.identifier}_{group['name']}"
        if not name.endswith("_rules"):
            name += "_rules"
        group["name"] = re.sub(r"[^a-zA-Z0-9_:]", "_", name)
        for rule in group.get("rules") or []:
            rule["labels"] = {**topology.labels, **(rule.get("labels") or {})}
        groups.append(group)
    return {"groups": groups} if groups else {}


def encoded_dashboard(dashboard: dict, rel_path: str, charm: str = CHARM) -> str:
    """One dashboard as the library sends it: uid and "charm:" tag set, then
    JSON, lzma, base64."""
    dashboard = copy.deepcopy(dashboard)
    dashboard["uid"] = hashlib.shake_256(f"{charm}-{rel_path}".encode()).hexdigest(20)
    tags = dashboard.setdefault("tags", [])
    if not any(str(tag).startswith("charm: ") for tag in tags):
        tags.append(f"charm: {charm}")
    return base64.b64encode(lzma.compress(json.dumps(dashboard).encode())).decode()


def provider_data(metrics_rules: dict, log_rules: dict, dashboards: dict[str, dict],
                  topology: Topology) -> str:
    """The `config` value: rules labelled, dashboards (path -> JSON) encoded,
    no scrape job (flanneld serves no /metrics) and no snap log slot."""
    return json.dumps({
        "metrics_alert_rules": labelled_rules(metrics_rules, topology),
        "log_alert_rules": labelled_rules(log_rules, topology),
        "dashboards": [encoded_dashboard(d, path) for path, d in sorted(dashboards.items())],
        "metrics_scrape_jobs": [],
        "log_slots": [],
    }, sort_keys=True)
