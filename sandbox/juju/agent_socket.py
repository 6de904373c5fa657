"""The unit agents' socket: where the hook tools run.

Juju's hook tools are one small client (jujuc) that hands each call to the
unit agent over a socket. The sandbox does the same: every tool in a unit's
tools directory is `jujuc` (sandbox/juju/jujuc.c, built by :func:`build_client`),
and :class:`AgentSocket`, in the controller's process, runs the call with
sandbox.juju.hooktools against the model state. A call costs the client's
exec and one socket round trip, not a Python interpreter that imports the
tools and parses the model (70-80 ms of CPU per call before).

The client passes its standard streams (SCM_RIGHTS), so the tool writes
straight to the hook's pipes; files it names (`relation-set --file`, `-o`,
resource-get's download) are reached through /proc/PID/root and
/proc/PID/cwd of the client, which may sit in a machine's mount namespace.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import socketserver
import struct
import subprocess
import threading
import time
import traceback

from . import hooktools

PKG_DIR = os.path.dirname(os.path.abspath(__file__))
CLIENT_SOURCE = os.path.join(PKG_DIR, "jujuc.c")
MAGIC = b"JUJC"
MAX_REQUEST = 16 << 20


def build_client(dest: str) -> None:
    """jujuc at `dest`: compiled from jujuc.c once per version of it (a
    static binary: it runs in any machine), cached under $FLANNEL_CACHE."""
    with open(CLIENT_SOURCE, "rb") as f:
        key = hashlib.sha256(f.read()).hexdigest()[:16]
    cached = os.path.join(os.environ.get("FLANNEL_CACHE", "/var/cache/flannel-charm"),
                          "jujuc", key, "jujuc")
    if not os.path.isfile(cached):
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        tmp = f"{cached}.{os.getpid()}.{threading.get_ident()}"
        _compile(tmp)
        os.replace(tmp, cached)
    shutil.copy2(cached, dest)


def _compile(dest: str) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("the sandbox's hook tools need a C compiler (gcc: scripts/setup-host)")
    cp = subprocess.run([cc, "-O2", "-s", "-static", "-Wall", "-Werror", "-o", dest, CLIENT_SOURCE],
                        capture_output=True, text=True)
    if cp.returncode != 0:
        # -static needs libc.a (libc6-dev); a dynamic binary works as well here
        cp = subprocess.run([cc, "-O2", "-s", "-Wall", "-Werror", "-o", dest, CLIENT_SOURCE],
                            capture_output=True, text=True)
    if cp.returncode != 0:
        raise RuntimeError(f"compiling {CLIENT_SOURCE} failed:\n{cp.stderr[-2000:]}")


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 16))
        if not chunk:
            raise ConnectionError("the client went away mid-request")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def parse_request(body: bytes) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) from a request body."""
    (argc,) = struct.unpack_from("=I", body)
    fields = body[4:].split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    if len(fields) < argc:
        raise ValueError("request holds fewer arguments than it says")
    text = [f.decode("utf-8", "surrogateescape") for f in fields]
    argv, env = text[:argc], {}
    for entry in text[argc:]:
        key, eq, value = entry.partition("=")
        if eq:
            env[key] = value
    return argv, env


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
            header, fds, _, _ = socket.recv_fds(sock, 8, 3, socket.MSG_CMSG_CLOEXEC)
            if len(header) < 8:
                header += _read_exactly(sock, 8 - len(header))
            if header[:4] != MAGIC or len(fds) != 3:
                return
            (length,) = struct.unpack("=I", header[4:])
            if length > MAX_REQUEST:
                return
            argv, env = parse_request(_read_exactly(sock, length))
            pid = struct.unpack("3i", sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
            rc = self._run(argv, env, fds, pid)
            fds = []  # the streams closed them
            sock.sendall(struct.pack("=i", rc))
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
