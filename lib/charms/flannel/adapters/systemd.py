"""systemctl, as the charm asks it.

The verbs the charm uses, each one `systemctl VERB UNIT` (and `show -p`;
systemd 252:
`daemon-reload` takes no unit: "Too many arguments"). Only daemon-reload
raises on failure (a unit file systemd did not load must fail the hook, to
be retried); the others answer whether they worked, as charmhelpers'
service_* do, and what systemd said goes to the hook's stderr (Juju's log).
"""
from __future__ import annotations

import sys
from typing import NamedTuple, Optional

from .machine import Machine


class ServiceState(NamedTuple):
    """A unit as `systemctl show` gives it."""
    active: bool                  # ActiveState active (or reloading): is-active's yes
    main_pid: Optional[int]       # its main process, while it has one


class Systemd:
    def __init__(self, machine: Machine):
        self.machine = machine

    def do(self, verb: str, unit: str, quiet: bool = False) -> bool:
        """`systemctl VERB UNIT` (start, stop, enable, disable, mask,
        unmask, reset-failed, ...): whether it worked. Unless `quiet`, its
        stderr goes to the hook's ("Job for ... failed")."""
        done = self.machine.run(["systemctl", verb, unit], check=False)
        if done.stderr and not quiet:
            sys.stderr.write(done.stderr)
        return done.returncode == 0

    def is_active(self, unit: str) -> bool:
        return self.do("is-active", unit, quiet=True)

    def service(self, unit: str) -> ServiceState:
        """Whether `unit` is active, and its main process: one call."""
        done = self.machine.run(["systemctl", "show", "-p", "ActiveState", "-p", "MainPID",
                                 unit], check=False)
        shown = dict(line.partition("=")[::2] for line in done.stdout.splitlines())
        try:
            pid = int(shown.get("MainPID") or 0) or None
        except ValueError:
            pid = None
        return ServiceState(shown.get("ActiveState") in ("active", "reloading"), pid)

    def daemon_reload(self) -> None:
        """Raises CalledProcessError if systemd did not reload."""
        self.machine.run(["systemctl", "daemon-reload"])
