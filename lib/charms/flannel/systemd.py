"""systemctl, as the charm asks it.

The verbs the charm uses, each one `systemctl VERB UNIT` (systemd 252:
`daemon-reload` takes no unit: "Too many arguments"). Only daemon-reload
raises on failure (a unit file systemd did not load must fail the hook, to
be retried); the others answer whether they worked, as charmhelpers'
service_* do.
"""
from __future__ import annotations

import subprocess
from typing import Callable

Run = Callable[..., subprocess.CompletedProcess]


class Systemd:
    def __init__(self, run: Run = subprocess.run):
        self._run = run

    def do(self, verb: str, unit: str, quiet: bool = False) -> bool:
        """`systemctl VERB UNIT` (start, stop, enable, disable, unmask,
        reset-failed, ...): whether it worked. Its stderr is the hook's
        (systemd's "Job for ... failed" reaches the log), unless `quiet`."""
        return self._run(["systemctl", verb, unit], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL if quiet else None,
                         check=False).returncode == 0

    def is_active(self, unit: str) -> bool:
        return self.do("is-active", unit, quiet=True)

    def daemon_reload(self) -> None:
        """Raises CalledProcessError if systemd did not reload."""
        self._run(["systemctl", "daemon-reload"], stdout=subprocess.DEVNULL, check=True)
