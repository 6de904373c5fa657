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


# "snap.phoenix.daemon" as the snaps name theirs (snap.kubelet.daemon): before,
# a name with a dot was not taken for a .service and its Restart= went unread
@pytest.mark.parametrize("name", ["phoenix", "snap.phoenix.daemon"])
def test_restart_always_brings_a_killed_daemon_back(machine, name):
    """Before: a unit whose process died stayed dead (no Restart=)."""
    machine.write_file(f"/lib/systemd/system/{name}.service", RESTARTING_UNIT)
    assert machine.systemctl("start", name).returncode == 0
    first = wait_for(lambda: main_pid(machine, name), 30)
    assert first
    machine.run(["kill", "-9", str(first)])
    second = wait_for(lambda: (main_pid(machine, name) not in (0, first)
                               and main_pid(machine, name)), 30)
    assert second and second != first
    assert machine.systemctl("is-active", name).stdout.strip() == "active"

    started = time.monotonic()
    assert machine.systemctl("stop", name).returncode == 0
    print(f"systemctl stop took {time.monotonic() - started:.2f}s")
    # a stopped unit stays stopped: its supervisor sees the stop and ends
    # (it removes its pid file last), restarting nothing
    assert wait_for(lambda: not machine.exists(f"{STATE}/{name}.service.supervisor"), 60)
    assert machine.pids_of("sleep") == []
    assert machine.systemctl("is-active", name).stdout.strip() != "active"


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


SLEEPER = """\
[Service]
Type=simple
ExecStart=/bin/sleep {}
[Install]
WantedBy=multi-user.target
"""


def sleeping_for(m) -> list[str]:
    """The argument of each running sleep: which definition runs."""
    return sorted(m.read_file(f"/proc/{pid}/cmdline").split(b"\0")[1].decode()
                  for pid in m.pids_of("sleep"))


def test_a_running_unit_keeps_its_definition_until_daemon_reload(machine):
    """systemd runs what it loaded: a charm that rewrites its unit file and
    restarts without `daemon-reload` gets the old command line (a sandbox
    that re-read the file at every start would let such a charm pass)."""
    machine.write_file("/lib/systemd/system/sleeper.service", SLEEPER.format(3600))
    assert machine.systemctl("start", "sleeper").returncode == 0   # loaded at first use
    assert sleeping_for(machine) == ["3600"]
    machine.write_file("/lib/systemd/system/sleeper.service", SLEEPER.format(7200))
    need = machine.systemctl("show", "-p", "NeedDaemonReload", "--value", "sleeper")
    assert need.stdout.strip() == "yes"
    machine.systemctl("restart", "sleeper")
    assert sleeping_for(machine) == ["3600"]                       # the loaded one
    assert machine.systemctl("daemon-reload").returncode == 0
    assert machine.systemctl("show", "-p", "NeedDaemonReload", "sleeper").stdout.strip() == \
        "NeedDaemonReload=no"
    machine.systemctl("restart", "sleeper")
    assert sleeping_for(machine) == ["7200"]
    machine.systemctl("stop", "sleeper")


def test_a_unit_whose_file_went_still_stops_and_goes_at_the_reload(machine):
    machine.write_file("/lib/systemd/system/sleeper.service", SLEEPER.format(3600))
    machine.systemctl("start", "sleeper")
    machine.run(["rm", "/lib/systemd/system/sleeper.service"])
    assert machine.systemctl("stop", "sleeper").returncode == 0
    assert wait_for(lambda: machine.pids_of("sleep") == [], 30)
    machine.systemctl("daemon-reload")
    assert machine.systemctl("start", "sleeper").returncode != 0   # not found now
