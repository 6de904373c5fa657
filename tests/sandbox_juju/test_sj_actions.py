"""Actions as Juju 3 runs them (`juju run UNIT ACTION key=value`): the
parameters checked against actions.yaml with its defaults, action-get,
action-set, action-fail and action-log, the results with Juju's return-code,
stdout and stderr, and the action's environment."""

from __future__ import annotations

import os

import pytest
import yaml

from sandbox.juju import ModelError

ACTIONS = {
    "probe": {
        "description": "x",
        "params": {"count": {"type": "integer", "default": 3},
                   "mode": {"type": "string", "enum": ["fast", "slow"]},
                   "nodes": {"type": "string"}},
        "additionalProperties": False,
    },
    "needs": {"description": "x", "params": {"target": {"type": "string"}},
              "required": ["target"]},
}


def action_charm(world, body: str):
    script = "#!/bin/bash\nset -e\n" + body
    return world.charm(extra_files={"actions.yaml": yaml.safe_dump(ACTIONS),
                                    "actions/probe": script, "actions/needs": script})


@pytest.fixture
def unit(world):
    def deploy(body: str) -> str:
        ctl = world.ctl
        m0 = world.add_machine()
        ctl.deploy("principal", world.charm("principal", principal=True), to=[m0])
        charm = action_charm(world, body)
        for path in ("actions/probe", "actions/needs"):
            os.chmod(charm / path, 0o755)
        ctl.deploy("testsub", charm)
        ctl.add_relation("testsub:cni", "principal:cni")
        ctl.settle()
        return "testsub/0"
    return deploy


def test_parameters_defaults_and_results(unit, world):
    name = unit('echo "$JUJU_ACTION_NAME $JUJU_DISPATCH_PATH ${JUJU_HOOK_NAME-unset}"\n'
                'action-set count="$(action-get count)" mode="$(action-get mode)"\n'
                'action-get --format=json > "$CHARM_DIR/params.json"\n'
                'action-set node.m1.reach=yes node.m1.mtu=1450\n'
                'action-log "probing"\n'
                'echo oops >&2\n')
    run = world.ctl.run_action(name, "probe", {"mode": "fast"})
    assert run.ok and run.status == "completed" and run.message == ""
    assert run.results == {"count": "3", "mode": "fast", "return-code": 0,
                           "node": {"m1": {"reach": "yes", "mtu": "1450"}},
                           "stdout": "probe actions/probe unset\n", "stderr": "oops\n"}
    assert run.log == ["probing"]
    assert run.params == {"count": 3, "mode": "fast"}
    assert '"probe" action (status completed)' in world.ctl.unit_log(name)


def test_action_fail_and_a_failing_exit(unit, world):
    name = unit('action-set partial=1\n'
                'if [ "$JUJU_ACTION_NAME" = probe ]; then action-fail "node m2 is unreachable"; '
                'exit 0; fi\n'
                'exit 3\n')
    hooks = world.ctl.hooks(name)
    failed = world.ctl.run_action(name, "probe")
    assert (failed.status, failed.message) == ("failed", "node m2 is unreachable")
    assert failed.results["partial"] == "1" and failed.results["return-code"] == 0
    crashed = world.ctl.run_action(name, "needs", {"target": "m1"})
    assert (crashed.status, crashed.message, crashed.results["return-code"]) == \
        ("failed", "exit status 3", 3)
    # an action is not a hook: no hook ran, the unit is not in error
    assert world.ctl.hooks(name) == hooks
    assert world.ctl.unit(name)["agent"]["status"] == "idle"


def test_refused_before_anything_runs(unit, world):
    name = unit('touch "$CHARM_DIR/ran"\n')
    for action, params, words in (
            ("nope", {}, 'action "nope" not defined'),
            ("probe", {"count": "3"}, "count: expected integer"),
            ("probe", {"mode": "medium"}, "is not one of"),
            ("probe", {"colour": "red"}, 'additional property "colour"'),
            ("needs", {}, "missing required parameters: target")):
        with pytest.raises(ModelError, match=words):
            world.ctl.run_action(name, action, params)
    assert not world.host(name, "charm/ran").exists()


def test_action_set_refuses_bad_keys_and_the_tools_refuse_outside_an_action(unit, world):
    name = unit('for kv in Bad=1 stdout=1 -x=1 ok; do\n'
                '  if action-set "$kv" 2>>"$CHARM_DIR/err"; then echo "took $kv"; fi\n'
                'done\n')
    run = world.ctl.run_action(name, "probe")
    assert run.ok and "took" not in run.results.get("stdout", "")
    errors = world.host(name, "charm/err").read_text()
    assert 'key "Bad" must start and end with lowercase alphanumeric' in errors
    assert 'cannot set reserved action key "stdout"' in errors
    outside = world.ctl.exec(name, ["action-get"])
    assert outside.returncode == 1 and b"not running an action" in outside.stderr
