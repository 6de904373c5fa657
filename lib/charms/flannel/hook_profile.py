"""What one hook (or action) costs, for the benchmark (sandbox/bench.py).

With FLANNEL_HOOK_PROFILE=<directory> (bootstrap.PROFILE_ENV) in a hook's environment, the
bootstrap runs the hook under `profiled()`, which appends one JSON line to
<directory>/<unit>.jsonl: its wall and CPU time in the venv's python, the
modules it imported and the time spent importing (outermost imports only),
the commands it ran (hook tools counted apart) and their time, the command
lines it ran more than once (the same question asked twice?), its HTTP
requests by destination (etcd's, flanneld's /readyz, others) and its TLS
handshakes. Without the variable nothing here is imported. Standard
library only: the bootstrap loads it before the venv's packages.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from typing import Callable

# A directory: cProfile's statistics of the hook written there as well
CPROFILE_ENV = "FLANNEL_HOOK_CPROFILE"
# flanneld's health server (facts/flanneld.py HEALTHZ_PORT)
HEALTHZ = ("127.0.0.1", 8474)
# Juju's hook tools, as a hook runs them (their own names on PATH)
HOOK_TOOLS = frozenset((
    "action-fail", "action-get", "action-log", "action-set", "application-version-set",
    "close-port", "config-get", "credential-get", "goal-state", "is-leader", "juju-log",
    "juju-reboot", "leader-get", "leader-set", "network-get", "open-port", "opened-ports",
    "relation-get", "relation-ids", "relation-list", "relation-set", "resource-get",
    "secret-get", "state-delete", "state-get", "state-set", "status-get", "status-set",
    "storage-get", "storage-list", "unit-get"))


class Tally:
    """Counters the patched functions add to; `patch()` installs them."""

    def __init__(self):
        self.imports = 0.0
        self._depth = 0
        self.commands: Counter = Counter()
        self.command_lines: Counter = Counter()   # of the commands but hook tools
        self.command_seconds = 0.0
        self.http: Counter = Counter()
        self.tls = 0

    def patch(self) -> None:
        """Count imports and commands from now on, and HTTP requests and TLS
        handshakes once the hook imports http.client and ssl: importing them
        here would charge both charms of the benchmark for modules that only
        one of them imports (~15 ms)."""
        import importlib._bootstrap as bootstrap
        tally = self
        find_and_load = bootstrap._find_and_load
        watched = {"http.client": self._count_requests, "ssl": self._count_handshakes}

        def timed_import(name, *args, **kwargs):
            tally._depth += 1
            started = time.perf_counter()
            try:
                return find_and_load(name, *args, **kwargs)
            finally:
                tally._depth -= 1
                if not tally._depth:
                    tally.imports += time.perf_counter() - started
                module = sys.modules.get(name)
                if name in watched and module is not None and not getattr(
                        getattr(module, "__spec__", None), "_initializing", False):
                    watched.pop(name, lambda module: None)(module)
        bootstrap._find_and_load = timed_import
        for name in list(watched):   # (already imported: by the bootstrap, say)
            if name in sys.modules:
                watched.pop(name)(sys.modules[name])

        popen_init, communicate, wait = (subprocess.Popen.__init__,
                                         subprocess.Popen.communicate, subprocess.Popen.wait)

        def counted_init(self, args, *rest, **kwargs):
            name = os.path.basename(str(args[0] if isinstance(args, (list, tuple)) else
                                        str(args).split()[0]))
            tally.commands["tool" if name in HOOK_TOOLS else name] += 1
            if name not in HOOK_TOOLS:
                tally.command_lines[" ".join(map(str, args)) if isinstance(args, (list, tuple))
                                    else str(args)] += 1
            self._profile_started = time.perf_counter()
            return popen_init(self, args, *rest, **kwargs)

        def finished(method):
            def timed(self, *args, **kwargs):
                try:
                    return method(self, *args, **kwargs)
                finally:
                    started = getattr(self, "_profile_started", None)
                    if started is not None and self.returncode is not None:
                        tally.command_seconds += time.perf_counter() - started
                        self._profile_started = None
            return timed
        subprocess.Popen.__init__ = counted_init
        subprocess.Popen.communicate = finished(communicate)
        subprocess.Popen.wait = finished(wait)

    def _count_requests(self, client) -> None:
        """Count each request of http.client's connections by destination."""
        tally, request = self, client.HTTPConnection.request

        def counted_request(self, *args, **kwargs):
            where = (self.host, self.port)
            tally.http["readyz" if where == HEALTHZ else
                       "etcd" if self.port == 2379 else f"{self.host}:{self.port}"] += 1
            return request(self, *args, **kwargs)
        client.HTTPConnection.request = counted_request

    def _count_handshakes(self, ssl) -> None:
        tally, wrap_socket = self, ssl.SSLContext.wrap_socket

        def counted_wrap(self, *args, **kwargs):
            tally.tls += 1
            return wrap_socket(self, *args, **kwargs)
        ssl.SSLContext.wrap_socket = counted_wrap


def profiled(run: Callable[[], None], directory: str) -> None:
    """run() (the hook), then its profile appended to the unit's file,
    whether it returned, exited or raised."""
    tally = Tally()
    modules = len(sys.modules)
    # (the process's own CPU from its clock: os.times() counts in ticks of
    # 10 ms, an eighth of a whole update-status)
    cpu, ticks, wall = time.process_time(), os.times(), time.perf_counter()
    tally.patch()
    calls = os.environ.get(CPROFILE_ENV)
    try:
        if calls:   # every call's time too, for pstats
            import cProfile
            os.makedirs(calls, exist_ok=True)
            cProfile.runctx("run()", {}, {"run": run}, os.path.join(
                calls, f"{os.path.basename(sys.argv[0])}-{os.getpid()}.pstats"))
        else:
            run()
    finally:
        done = os.times()
        record = {
            "hook": os.path.basename(sys.argv[0]),
            "wall": round(time.perf_counter() - wall, 4),
            "cpu": round(time.process_time() - cpu, 4),
            "children_cpu": round(done.children_user + done.children_system
                                  - ticks.children_user - ticks.children_system, 4),
            "modules_imported": len(sys.modules) - modules,
            "import_seconds": round(tally.imports, 4),
            "commands": dict(tally.commands),
            "command_seconds": round(tally.command_seconds, 4),
            "repeated": {line: n for line, n in tally.command_lines.items() if n > 1},
            "http": dict(tally.http), "tls": tally.tls}
        unit = os.environ.get("JUJU_UNIT_NAME", "unit").replace("/", "-")
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, f"{unit}.jsonl"), "a") as out:
            out.write(json.dumps(record, sort_keys=True) + "\n")
