"""The GitHub Actions workflows (.github/workflows) pass actionlint, the
linter for workflow files (syntax, expressions, job and step references,
the shell in `run:`), built from its Go module like the sandbox's other Go
tools (sandbox.resource)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sandbox.resource import BuildFailed, binary_path, host_arch

WORKFLOWS = Path(__file__).resolve().parents[2] / ".github" / "workflows"


def test_the_workflows_pass_actionlint():
    files = sorted(WORKFLOWS.glob("*.y*ml"))
    assert files, f"no workflow in {WORKFLOWS}"
    try:
        actionlint = binary_path("actionlint", host_arch())
    except BuildFailed as failed:
        pytest.skip(f"actionlint could not be built here: {failed}")
    run = subprocess.run([str(actionlint), "-no-color", *map(str, files)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_push_runs_lint_and_unit_and_the_sandbox_runs_ci(tmp_path):
    import yaml
    workflow = yaml.safe_load((WORKFLOWS / "ci.yaml").read_text())
    triggers = workflow[True] if True in workflow else workflow["on"]   # YAML 1.1: on = True
    assert "push" in triggers and "pull_request" in triggers
    steps = {job: [s.get("run", "") for s in spec["steps"]]
             for job, spec in workflow["jobs"].items()}
    assert any("tox -e lint,unit" in run for run in steps["lint-unit"])
    assert any("bash .ci/run" in run for run in steps["sandbox"])
    assert any("tox -e integration" in run for run in steps["integration"])
