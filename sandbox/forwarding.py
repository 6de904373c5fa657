"""Commands that run in a server: the small client and its request.

Two of the sandbox's commands are one small C client (forwarding_client.c)
that hands its command line, environment and standard streams to a server
over a Unix socket and exits with the code the server answers:

- the hook tools (jujuc): the server is the unit agent's socket in the
  controller's process (sandbox.juju.agent_socket), as in Juju;
- each machine's systemctl: the server is a process in the machine that has
  systemctl3 loaded and forks for each call (sandbox.systemctl.serve), as
  systemctl asks systemd; without a server it runs the Python systemctl.

A call costs the client's exec and one round trip, not a Python interpreter
that imports a large module first (50-90 ms of CPU per call before).

Request: b"JUJC", u32 length, then that many bytes: u32 argc, argc
NUL-terminated arguments, NUL-terminated NAME=VALUE environment entries; fds
0, 1 and 2 ride along (SCM_RIGHTS) with the first bytes. Answer: an i32 exit
code. Integers in the host's byte order.

Standard library only: the machines' systemctl imports this module from its
own directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import struct
import subprocess
import threading
from dataclasses import dataclass

CLIENT_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "forwarding_client.c")
MAGIC = b"JUJC"
MAX_REQUEST = 16 << 20


def build_client(dest: str, *, server_socket: str | None = None,
                 fallback: str | None = None) -> None:
    """The client at `dest`: compiled once per version of its source and
    build (a static binary: it runs in any machine), cached under
    $FLANNEL_CACHE. Without server_socket it reaches the server named by
    $JUJU_AGENT_SOCKET_ADDRESS (jujuc); with it, that socket, and it execs
    `fallback` with its own arguments when that socket cannot be reached."""
    defines = []
    if server_socket:
        defines.append(f'-DSERVER_SOCKET="{server_socket}"')
    if fallback:
        defines.append(f'-DFALLBACK="{fallback}"')
    with open(CLIENT_SOURCE, "rb") as f:
        key = hashlib.sha256(f.read() + "\0".join(defines).encode()).hexdigest()[:16]
    cached = os.path.join(os.environ.get("FLANNEL_CACHE", "/var/cache/flannel-charm"),
                          "forwarding-client", key, "client")
    if not os.path.isfile(cached):
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        tmp = f"{cached}.{os.getpid()}.{threading.get_ident()}"
        _compile(tmp, defines)
        os.replace(tmp, cached)
    shutil.copy2(cached, dest)


def _compile(dest: str, defines: list[str]) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("the sandbox's hook tools need a C compiler (gcc: scripts/setup-host)")
    argv = [cc, "-O2", "-s", "-Wall", "-Werror", *defines, "-o", dest, CLIENT_SOURCE]
    cp = subprocess.run(argv[:2] + ["-static"] + argv[2:], capture_output=True, text=True)
    if cp.returncode != 0:
        # -static needs libc.a (libc6-dev); a dynamic binary works as well here
        cp = subprocess.run(argv, capture_output=True, text=True)
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


@dataclass
class Request:
    """One call read from a client's connection: argv, env, its standard
    streams (fds, now this process's to close) and the client's pid."""
    argv: list[str]
    env: dict[str, str]
    fds: list[int]
    pid: int


def read_request(sock: socket.socket) -> Request:
    """The call on `sock`. Raises OSError, ValueError or struct.error for a
    connection that is no request or breaks off (its fds closed)."""
    header, fds, _, _ = socket.recv_fds(sock, 8, 3, socket.MSG_CMSG_CLOEXEC)
    try:
        if len(header) < 8:
            header += _read_exactly(sock, 8 - len(header))
        (length,) = struct.unpack("=I", header[4:8])
        if header[:4] != MAGIC or len(fds) != 3 or length > MAX_REQUEST:
            raise ValueError("not a request")
        argv, env = parse_request(_read_exactly(sock, length))
        pid = struct.unpack("3i", sock.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return Request(argv, env, fds, pid)


def answer(sock: socket.socket, code: int) -> None:
    sock.sendall(struct.pack("=i", code))
