"""flanneld's journal, as `journalctl` gives it."""
from __future__ import annotations

import subprocess

from .machine import Machine


def tail(machine: Machine, unit: str, lines: int) -> list[str]:
    """The last `lines` lines a unit logged (their messages only); none if
    the journal cannot be read."""
    try:
        done = machine.run(["journalctl", "-u", unit, "-n", str(lines), "-o", "cat",
                            "--no-pager"], check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return done.stdout.splitlines() if done.returncode == 0 else []
