"""The charm's files for the observability stack (cos/): Prometheus and
Loki alert rules, Grafana dashboards."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

METRICS_RULES = "cos/prometheus_alert_rules"
LOG_RULES = "cos/loki_alert_rules"
DASHBOARDS = "cos/grafana_dashboards"


def rules(charm_dir: Path, where: str) -> dict:
    """Every rules file's groups under `where`, as one {"groups": [...]}."""
    groups = []
    for path in sorted((Path(charm_dir) / where).glob("*.yaml")):
        groups += (yaml.safe_load(path.read_text()) or {}).get("groups") or []
    return {"groups": groups}


def dashboards(charm_dir: Path) -> dict[str, dict]:
    """Each dashboard by its path in the charm ("cos/grafana_dashboards/flannel.json")."""
    return {f"{DASHBOARDS}/{path.name}": json.loads(path.read_text())
            for path in sorted((Path(charm_dir) / DASHBOARDS).glob("*.json"))}
