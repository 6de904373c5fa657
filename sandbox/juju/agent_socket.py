"""The unit agents' socket: where the hook tools run.

Juju's hook tools are one small client (jujuc) that hands each call to the
unit agent over a socket. The sandbox does the same: every tool in a unit's
tools directory is `jujuc` (sandbox/forwarding_client.c, built by
sandbox.forwarding.build_client), and :class:`AgentSocket`, in the
controller's process, runs the call with sandbox.juju.hooktools against the
model state. A call costs the client's
exec and one socket round trip, not a Python interpreter that imports the
tools and parses the model (70-80 ms of CPU per call before).

The client passes its standard streams (SCM_RIGHTS), so the tool writes
straight to the hook's pipes; files it names (`relation-set --file`, `-o`,
resource-get's download) are reached through /proc/PID/root and
/proc/PID/cwd of the client, which may sit in a machine's mount namespace.
"""

from __future__ import annotations

import os
import socket
import socketserver
import struct
import threading
import time
import traceback

from .. import forwarding
from . import hooktools


class CallStats:
    """CPU the agent spent on tool calls (thread time), for the benchmark."""

    def __init__(self):
        self._lock = threading.Lock()
        self.calls = 0
        self.cpu_seconds = 0.0

    def add(self, seconds: float) -> None:
        with self._lock:
            self.calls += 1
            self.cpu_seconds += seconds


# every AgentSocket's calls together (the benchmark adds them to the hooks' CPU)
ALL_CALLS = CallStats()


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        started = time.thread_time()
        sock: socket.socket = self.request
        fds: list[int] = []
        try:
            request = forwarding.read_request(sock)
            fds = request.fds
            rc = self._run(request.argv, request.env, fds, request.pid)
            fds = []  # the streams closed them
            forwarding.answer(sock, rc)
        except (OSError, ValueError, struct.error):
            pass
        finally:
            for fd in fds:
                os.close(fd)
            spent = time.thread_time() - started
            self.server.stats.add(spent)
            ALL_CALLS.add(spent)

    @staticmethod
    def _run(argv: list[str], env: dict[str, str], fds: list[int], pid: int) -> int:
        stdin = open(fds[0], "r", encoding="utf-8", errors="surrogateescape")
        stdout = open(fds[1], "w", encoding="utf-8", errors="surrogateescape")
        stderr = open(fds[2], "w", encoding="utf-8", errors="surrogateescape")
        caller = hooktools.Caller(stdin, stdout, stderr, pid=pid)
        try:
            name, args = hooktools.dispatch(argv)
            try:
                return hooktools.run(name, args, env, caller)
            except Exception:  # noqa: BLE001 - a bug in a tool: the hook sees it
                stderr.write(traceback.format_exc())
                return 1
        finally:
            for stream in (stdin, stdout, stderr):
                try:
                    stream.close()
                except OSError:  # the hook closed its end of a pipe
                    pass


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    stats: CallStats


class AgentSocket:
    """A Unix socket at `path` serving hook tool calls until close()."""

    def __init__(self, path: str):
        self.path = path
        self.stats = CallStats()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "AgentSocket":
        if os.path.exists(self.path):
            os.unlink(self.path)
        # bind() takes at most 107 bytes of path: name the directory through
        # an open descriptor of it (no chdir: other threads rely on the cwd)
        directory = os.open(os.path.dirname(self.path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            self._server = _Server(f"/proc/self/fd/{directory}/{os.path.basename(self.path)}",
                                   _Handler)
        finally:
            os.close(directory)
        self._server.stats = self.stats
        os.chmod(self.path, 0o600)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.5},
                                        name="sandbox-juju-agent-socket", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
