"""controller.kill_hook_after(): a hook SIGKILLed mid-run, as a machine dying
under it would leave it."""

from __future__ import annotations

import os

import pytest

from sandbox.juju import ModelError
from sandbox.network import process_alive
from sandbox.waiting import wait_for


def _wait_dead(pid: int, timeout: float = 30.0) -> bool:
    return bool(wait_for(lambda: not process_alive(pid), timeout, interval=0.02))


def test_a_killed_hook_fails_and_resolve_reruns_it(cluster):
    ctl, out = cluster.ctl, cluster.out
    # The hook starts a helper in its own process group's reach (a child), a
    # daemon in a session of its own (as systemctl starts flanneld), writes
    # "begun", then would take ten minutes to write "done".
    cluster.script("install", f"""
        echo begun >> {out}/install
        sleep 600 & echo $! > {out}/child
        setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > {out}/daemon
        if [ ! -e {out}/fast ]; then sleep 600; fi
        echo done >> {out}/install
    """)
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.kill_hook_after("flannel/0", "install", 5.0)
    assert ctl.pending_kills() == {("flannel/0", "install"): 5.0}
    ctl.settle()
    run = [r for r in ctl.hook_log if r.unit == "flannel/0"][-1]
    # cut short by the kill (SIGKILL's exit status, nothing after the sleep ran)
    assert (run.hook, run.exit_code, run.kill_missed) == ("install", -9, False)
    assert run.killed_after >= 5.0
    assert "hook killed (SIGKILL to its process group)" in run.stderr_tail
    assert cluster.read_out("install") == "begun\n"
    # the whole process group died with it; the daemon in its own session did not
    child, daemon = int(cluster.read_out("child")), int(cluster.read_out("daemon"))
    assert _wait_dead(child), "the hook's child outlived the kill"
    assert process_alive(daemon)
    os.kill(daemon, 9)
    # a failed hook, as `juju status` shows it
    unit = ctl.unit("flannel/0")
    assert unit["agent"]["status"] == "error"
    assert unit["agent"]["message"] == 'hook failed: "install"'
    sub = ctl.status()["applications"]["kubernetes-worker"]["units"][
        "kubernetes-worker/0"]["subordinates"]["flannel/0"]
    assert sub["workload-status"] == {"current": "error", "message": 'hook failed: "install"'}
    assert 'hook "install" (via hook dispatching script: install) failed: exit status -9' in \
        ctl.unit_log("flannel/0")
    assert ctl.pending_kills() == {}
    # resolve --retry re-runs the hook; the kill was used once
    (out / "fast").write_text("")
    ctl.resolve("flannel/0")
    ctl.settle()
    assert ctl.hooks("flannel/0")[:2] == ["install", "install"]
    assert cluster.read_out("install") == "begun\nbegun\ndone\n"
    assert ctl.unit("flannel/0")["agent"]["status"] == "idle"
    assert ctl.unit("flannel/0")["started"]
    for leftover in ("daemon", "child"):  # the second run's, not killed
        os.kill(int(cluster.read_out(leftover)), 9)


def test_a_hook_that_ends_before_the_kill_is_left_alone(cluster):
    ctl = cluster.ctl
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    cluster.script("config-changed", f"echo ran >> {cluster.out}/cc\n")
    ctl.kill_hook_after("flannel/0", "config-changed", 300)
    ctl.config("flannel", cidr="10.2.0.0/16")
    ctl.settle()
    run = ctl.hook_log[-1]
    assert (run.unit, run.hook, run.exit_code, run.killed_after) == \
        ("flannel/0", "config-changed", 0, None)
    assert run.kill_missed   # what a fault sweep counts, and tries again
    assert ctl.pending_kills() == {}
    assert ctl.unit("flannel/0")["agent"]["status"] == "idle"


def test_kill_hook_after_refuses_what_it_cannot_kill(cluster):
    ctl = cluster.ctl
    with pytest.raises(ModelError):
        ctl.kill_hook_after("nosuchapp/0", "install", 1)
    with pytest.raises(ValueError, match="emulated"):
        ctl.kill_hook_after("etcd/0", "update-status", 1)
    with pytest.raises(ValueError):
        ctl.kill_hook_after("kubernetes-worker/0", "install", -1)


@pytest.mark.sandbox
def test_a_hook_killed_inside_a_sandbox_machine(world, tmp_path):
    """Through nsenter (MachineExecutor): the hook and its children inside
    the machine's namespaces die; the unit is in error; resolve re-runs it."""
    import shutil
    if os.geteuid() != 0 or shutil.which("nsenter") is None:
        pytest.skip("needs root and nsenter")
    from sandbox.juju import EtcdApp, KubernetesWorkerApp
    from sandbox.machine import Machine
    from sandbox.network import TestNetwork
    ctl, out = world.ctl, world.out
    with TestNetwork() as net, Machine("kh0", net) as m:
        mid = ctl.add_sandbox_machine(m)
        ctl.deploy(EtcdApp("https://192.0.2.1:2379", version="3.4.22", address="192.0.2.1"))
        ctl.deploy(KubernetesWorkerApp(), to=[mid])
        ctl.deploy("flannel", world.charm())
        world.script("install", f"""
            echo begun >> {out}/install
            sleep 600 & echo $! > {out}/child
            if [ ! -e {out}/fast ]; then sleep 600; fi
            echo done >> {out}/install
        """)
        ctl.kill_hook_after("flannel/0", "install", 5.0)
        ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
        ctl.settle()
        run = ctl.hook_log[-1]
        assert (run.unit, run.hook, run.exit_code) == ("flannel/0", "install", -9)
        assert world.read_out("install") == "begun\n"
        assert _wait_dead(int(world.read_out("child")))
        assert ctl.unit("flannel/0")["agent"]["message"] == 'hook failed: "install"'
        # nothing of the hook's lives on in the machine
        assert wait_for(lambda: m.pids_of("sleep") == [], 30)
        (out / "fast").write_text("")
        ctl.resolve("flannel/0")
        ctl.settle()
        assert world.read_out("install") == "begun\nbegun\ndone\n"
        assert ctl.unit("flannel/0")["agent"]["status"] == "idle"


def test_a_hook_past_the_agents_timeout_dies_with_its_children(cluster):
    """A hook that outlives the agent's timeout fails, and nothing of it runs
    on beside the next hook: the hook itself and its children are killed
    (not only the wrapper that waits for it)."""
    ctl, out = cluster.ctl, cluster.out
    cluster.script("install", f"""
        echo $$ > {out}/hook
        sleep 600 & echo $! > {out}/child
        sleep 600
        echo done >> {out}/install
    """)
    ctl.agent.timeout = 2.0
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    run = [r for r in ctl.hook_log if r.unit == "flannel/0"][0]
    assert (run.hook, run.exit_code) == ("install", -9)
    assert "hook timed out after 2.0s" in run.stderr_tail
    for name in ("hook", "child"):
        assert _wait_dead(int(cluster.read_out(name)), 5), f"the timed-out {name} lives on"
    assert not (out / "install").exists()
