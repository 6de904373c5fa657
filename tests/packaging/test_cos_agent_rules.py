"""The files flannel gives the observability stack (cos/), checked by the
tools that will read them: Prometheus's promtool (Debian's 2.42, which
scripts/setup-host takes out of its package) runs the alert rules'
unit tests (tests/packaging/cos/flannel_rules_test.yaml: each alert firing
and not firing) and parses every PromQL expression of the dashboard. No
LogQL checker runs here: the Loki rules are checked for their shape only."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COS = REPO / "cos"
PROMTOOL = Path(os.environ.get("FLANNEL_CACHE", "/var/cache/flannel-charm")) / \
    "promtool/usr/bin/promtool"


@pytest.fixture(scope="module")
def promtool() -> Path:
    assert PROMTOOL.is_file(), f"{PROMTOOL} is missing: scripts/setup-host installs it"
    return PROMTOOL


def run(promtool: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(promtool), *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def test_the_prometheus_rules_pass_their_unit_tests(promtool):
    rules = COS / "prometheus_alert_rules" / "flannel.yaml"
    checked = run(promtool, "check", "rules", rules)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run(promtool, "test", "rules", REPO / "tests/packaging/cos/flannel_rules_test.yaml")
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
    # every alert of the file has a test that fires it
    alerts = {r["alert"] for g in yaml.safe_load(rules.read_text())["groups"] for r in g["rules"]}
    tests = yaml.safe_load((REPO / "tests/packaging/cos/flannel_rules_test.yaml").read_text())
    fired = {t["alertname"] for case in tests["tests"] for t in case["alert_rule_test"]
             if t.get("exp_alerts")}
    assert alerts == fired


def test_a_rule_that_does_not_parse_is_refused(promtool, tmp_path):
    """The check above can fail: promtool refuses a broken expression."""
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [
        {"alert": "Broken", "expr": "max by (instance) (node_systemd_unit_state{"}]}]}))
    assert run(promtool, "check", "rules", broken).returncode != 0


def test_every_dashboard_query_is_promql_prometheus_parses(promtool, tmp_path):
    dashboard = json.loads((COS / "grafana_dashboards" / "flannel.json").read_text())
    assert dashboard["title"] and dashboard["panels"]
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])
             if p["datasource"]["uid"] == "${prometheusds}"]
    assert exprs
    rules = tmp_path / "dashboard.yaml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [
        {"record": f"flannel:panel{n}", "expr": e} for n, e in enumerate(exprs)]}]}))
    checked = run(promtool, "check", "rules", rules)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # the datasources are the variables the agent's dashboards provider fills in
    names = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"prometheusds", "lokids"} <= names


def test_the_loki_rules_have_the_shape_loki_reads():
    groups = yaml.safe_load((COS / "loki_alert_rules" / "flannel.yaml").read_text())["groups"]
    for group in groups:
        assert group["name"] and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert rule["labels"]["severity"] in ("warning", "critical")
            assert rule["annotations"]["summary"]
            # the streams carry the agent's topology: the selector must say so itself
            assert 'juju_application=~".+"' in rule["expr"]
            assert rule["expr"].count("(") == rule["expr"].count(")")
