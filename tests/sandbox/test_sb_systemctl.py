"""The machines' systemctl holds to systemd 252: what it refuses, Restart=,
and no clock waits."""

from __future__ import annotations

import time

import pytest

from sandbox.machine import Machine
from sandbox.systemctl import STATE_DIR as STATE
from sandbox.waiting import wait_for

pytestmark = pytest.mark.sandbox

RESTARTING_UNIT = """\
[Unit]
Description=a daemon systemd restarts
[Service]
Type=simple
ExecStart=/bin/sleep 3600
Restart=always
RestartSec=1
[Install]
WantedBy=multi-user.target
"""


@pytest.fixture
def machine(test_network):
    with Machine("m1", test_network) as m1:
        yield m1


def main_pid(m, unit):
    return int(m.systemctl("show", "-p", "MainPID", "--value", unit).stdout.strip() or 0)


def test_refuses_what_systemd_252_refuses(machine):
    """Before: `systemctl daemon-reload flannel` and `systemctl frobnicate`
    exited 0 in the sandbox (systemctl3 accepts both)."""
    cp = machine.systemctl("daemon-reload", "flannel")
    assert (cp.returncode, cp.stderr.strip()) == (1, "Too many arguments.")
    cp = machine.systemctl("frobnicate", "flannel")
    assert (cp.returncode, cp.stderr.strip()) == (1, "Unknown command verb frobnicate.")
    cp = machine.systemctl("start")
    assert (cp.returncode, cp.stderr.strip()) == (1, "Too few arguments.")
    assert machine.systemctl("daemon-reload").returncode == 0
    assert machine.systemctl("--quiet", "is-enabled", "nothing").returncode != 0


def test_restart_always_brings_a_killed_daemon_back(machine):
    """Before: a unit whose process died stayed dead (no Restart=)."""
    machine.write_file("/lib/systemd/system/phoenix.service", RESTARTING_UNIT)
    assert machine.systemctl("start", "phoenix").returncode == 0
    first = wait_for(lambda: main_pid(machine, "phoenix"), 30)
    assert first
    machine.run(["kill", "-9", str(first)])
    second = wait_for(lambda: (main_pid(machine, "phoenix") not in (0, first)
                               and main_pid(machine, "phoenix")), 30)
    assert second and second != first
    assert machine.systemctl("is-active", "phoenix").stdout.strip() == "active"

    started = time.monotonic()
    assert machine.systemctl("stop", "phoenix").returncode == 0
    print(f"systemctl stop took {time.monotonic() - started:.2f}s")
    # a stopped unit stays stopped: its supervisor sees the stop and ends
    # (it removes its pid file last), restarting nothing
    assert wait_for(lambda: not machine.exists(f"{STATE}/phoenix.service.supervisor"), 60)
    assert machine.pids_of("sleep") == []
    assert machine.systemctl("is-active", "phoenix").stdout.strip() != "active"


def test_restart_no_leaves_a_dead_daemon_dead(machine):
    machine.write_file("/lib/systemd/system/mortal.service",
                       RESTARTING_UNIT.replace("Restart=always", "Restart=no"))
    assert machine.systemctl("start", "mortal").returncode == 0
    pid = wait_for(lambda: main_pid(machine, "mortal"), 30)
    # Restart=no: nothing watches the unit, so nothing can bring it back
    assert not machine.exists(f"{STATE}/mortal.service.supervisor")
    machine.run(["kill", "-9", str(pid)])
    assert wait_for(lambda: machine.pids_of("sleep") == [], 30)
    assert not machine.exists(f"{STATE}/mortal.service.supervisor")
