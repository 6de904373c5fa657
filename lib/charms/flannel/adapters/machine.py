"""Commands on the unit's machine: `ip`, `iptables`, `systemctl`, flanneld.

Every adapter that runs a command takes a Machine, so that the charm's steps
run unchanged against a network namespace of a test's own (a runner that
enters it) or the handler tier's in-memory machine (tests/handlers), whose
answers tests/unit/test_machine_contract.py compares with a real kernel's.
"""
from __future__ import annotations

import http.client
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

Runner = Callable[..., subprocess.CompletedProcess]
TIMEOUT = 60


def _run_here(argv: Sequence[str], *, check: bool, input: Optional[str]
              ) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], check=check, capture_output=True, text=True,
                          input=input, timeout=TIMEOUT)


class Machine:
    """This machine, or with `runner` (argv, check=, input= ->
    CompletedProcess) another place commands run in."""

    def __init__(self, runner: Optional[Runner] = None,
                 which: Callable[[str], Optional[str]] = shutil.which):
        self._runner = runner or _run_here
        self._which = which

    def run(self, argv: Sequence[str], *, check: bool = True,
            input: Optional[str] = None) -> subprocess.CompletedProcess:
        """The command's CompletedProcess (text); with check, a failure
        raises CalledProcessError."""
        return self._runner([str(a) for a in argv], check=check, input=input)

    def output(self, argv: Sequence[str]) -> str:
        """The command's stdout; a failure raises CalledProcessError."""
        return self.run(argv).stdout

    @property
    def is_here(self) -> bool:
        """Whether commands run on this process's own kernel (no runner): an
        adapter may then read /proc or ask the kernel itself, cheaper than a
        command."""
        return self._runner is _run_here

    def has(self, command: str) -> bool:
        return self._which(command) is not None

    def which(self, command: str) -> Optional[str]:
        """The command's absolute path, or None."""
        return self._which(command)

    def http_status(self, host: str, port: int, path: str, timeout: float = 1.0
                    ) -> Optional[int]:
        """The status code of GET http://host:port/path from this machine, or
        None if nothing answered within `timeout`."""
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.request("GET", path)
            return conn.getresponse().status
        except (OSError, http.client.HTTPException):
            return None
        finally:
            conn.close()

    def process_started(self, pid: int) -> Optional[float]:
        """When process `pid` started, in seconds since boot (the kernel's
        count, CLOCK_BOOTTIME), or None if it is gone: with the pid, it names
        one process for the machine's life."""
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            # the fields after the command's name; the 22nd, starttime, in ticks
            return int(stat.rpartition(")")[2].split()[19]) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def process_age(self, pid: int) -> Optional[float]:
        """Seconds since process `pid` started, or None if it is gone. Both
        ends are on the boot clock: a step of the wall clock moves neither."""
        started = self.process_started(pid)
        if started is None:
            return None
        return max(time.clock_gettime(time.CLOCK_BOOTTIME) - started, 0.0)

    def flanneld_version(self, binary) -> Optional[str]:
        """The version `flanneld -version` prints (to stderr), or None."""
        from ..facts.flanneld import version_in
        try:
            done = self.run([str(binary), "-version"], check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return version_in(done.stdout + done.stderr)
