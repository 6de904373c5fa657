"""The cos-agent relation: what grafana-agent (or opentelemetry-collector)
reads from flannel's unit, decoded the way their library's requirer does
(charms.grafana_agent.v0.cos_agent LIBPATCH 26: json, then each dashboard
base64 and lzma), and published again by a refresh."""
import base64
import json
import lzma

from harness import deployed

REQUIRED = {"metrics_alert_rules", "log_alert_rules", "dashboards", "metrics_scrape_jobs",
            "log_slots"}
TOPOLOGY = {"juju_model": "handlers", "juju_model_uuid": "1a2b3c4d-0000-4000-8000-000000000000",
            "juju_application": "flannel", "juju_charm": "flannel"}


def read_as_the_agent(unit, rid) -> dict:
    data = json.loads(unit.juju.relations[rid].local["config"])
    assert REQUIRED <= set(data)
    data["dashboards"] = [json.loads(lzma.decompress(base64.b64decode(s)))
                          for s in data["dashboards"]]
    return data


def test_the_agent_gets_flannel_s_rules_and_dashboard_under_flannel_s_name(unit):
    deployed(unit)
    rid = unit.juju.relate("cos-agent", "grafana-agent", {"grafana-agent/0": {}})
    unit.hook("cos-agent-relation-joined", rid, "grafana-agent/0")
    data = read_as_the_agent(unit, rid)
    alerts = {rule["alert"]: rule for group in data["metrics_alert_rules"]["groups"]
              for rule in group["rules"]}
    assert {"FlannelServiceNotActive", "FlannelServiceRestarting",
            "FlannelVxlanDeviceMissing"} <= set(alerts)
    # an alert names flannel's application, not the agent's whose series it reads
    assert all(TOPOLOGY.items() <= rule["labels"].items() for rule in alerts.values())
    assert all(group["name"].startswith("handlers_1a2b3c4d_flannel_")
               and group["name"].endswith("_rules")
               for group in data["metrics_alert_rules"]["groups"])
    logs = {rule["alert"] for group in data["log_alert_rules"]["groups"]
            for rule in group["rules"]}
    assert "FlannelEtcdWatchStuckOnCompaction" in logs
    [dashboard] = data["dashboards"]
    assert dashboard["title"] == "Flannel" and "charm: flannel" in dashboard["tags"]
    assert len(dashboard["uid"]) == 40
    # no scrape job: flanneld serves no /metrics; the agent's node_exporter has the series
    assert data["metrics_scrape_jobs"] == [] and data["log_slots"] == []


def test_a_refresh_publishes_again_and_nothing_else_does(unit):
    deployed(unit)
    rid = unit.juju.relate("cos-agent", "grafana-agent", {"grafana-agent/0": {}})
    unit.hook("cos-agent-relation-joined", rid, "grafana-agent/0")
    unit.juju.relations[rid].local.clear()
    unit.hook("update-status")
    assert "config" not in unit.juju.relations[rid].local
    unit.hook("upgrade-charm")
    assert read_as_the_agent(unit, rid)["metrics_alert_rules"]["groups"]


def test_no_hook_logs_an_error_for_the_cos_agent_endpoint(unit):
    """charms.reactive logs "Unable to find implementation for relation:
    provides of cos_agent" at ERROR in every hook of a charm without an
    interface layer for the endpoint: an error in debug-log every five
    minutes, for nothing."""
    deployed(unit)
    unit.hook("update-status")
    assert "Unable to find implementation" not in unit.log
    assert not [line for line in unit.log.splitlines() if line.startswith("ERROR")]
