"""A real etcd (Debian's /usr/bin/etcd) with client TLS, for tests and the
sandbox: one member, or a cluster of several.

    with EtcdServer(workdir, make_pki(workdir / "pki", ["127.0.0.1"])) as etcd:
        etcd.endpoint           # "https://127.0.0.1:<port>"
        etcd.connection_string  # what the etcd charm publishes: the same, here

    pki = make_pki(workdir / "pki", ["127.0.0.1"])
    with EtcdCluster(workdir, pki, hosts=["127.0.0.1"] * 3) as etcd:
        etcd.connection_string  # "https://127.0.0.1:<p1>,https://...:<p2>,..."
        etcd.members[0].stop()  # one member down: the other two keep quorum

With netns="NAME" it runs inside that network namespace (via
`ip netns exec NAME`), and its health is checked from inside it too.
With enable_v2=True it also serves etcd's v2 API (`--enable-v2`, off by
default in 3.4), as the etcd charm of 2020 did for flannel v0.11.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

from .pki import Pki

ETCD = "/usr/bin/etcd"
# seconds: a bound for a hang (a first start with fsyncs on a slow disk takes a few)
START_TIMEOUT = 120.0
NETNS_CLIENT_PORT = 2379  # a fresh namespace has nothing else listening
NETNS_PEER_PORT = 2380

# Run by `ip netns exec` to check health from inside a namespace; stdlib
# only, and an explicit SSLContext, so no environment variable can interfere.
_HEALTH_PROBE = """
import json, ssl, sys, urllib.request
url, ca, cert, key, timeout = sys.argv[1:6]
context = ssl.create_default_context(cafile=ca)
context.load_cert_chain(cert, key)
with urllib.request.urlopen(url, context=context, timeout=float(timeout)) as reply:
    sys.stdout.write(reply.read().decode())
"""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at the moment (the OS picks it)."""
    return free_ports(host, 1)[0]


def free_ports(host: str = "127.0.0.1", count: int = 1) -> list[int]:
    """`count` distinct TCP ports nothing listens on at the moment: every
    probe stays bound until all are picked (one at a time, the OS may hand
    the same port out twice: a cluster's members once got one peer port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with contextlib.ExitStack() as probes:
        ports = []
        for _ in range(count):
            probe = probes.enter_context(socket.socket(family, socket.SOCK_STREAM))
            probe.bind((host, 0))
            ports.append(int(probe.getsockname()[1]))
        return ports


def etcd_version(binary: str = ETCD) -> str:
    """The version the etcd binary reports, e.g. "3.4.23"."""
    output = subprocess.run([binary, "--version"], capture_output=True, text=True,
                            check=True).stdout
    match = re.search(r"etcd Version:\s*(\S+)", output)
    if not match:
        raise RuntimeError(f"cannot tell the version of {binary}: {output!r}")
    return match.group(1)


class EtcdServer:
    def __init__(self, workdir: str | os.PathLike[str], pki: Pki, host: str = "127.0.0.1",
                 port: int | None = None, netns: str | None = None, name: str = "sandbox",
                 initial_cluster: str | None = None, enable_v2: bool = False,
                 peer_port: int | None = None) -> None:
        """initial_cluster: "name=peer-url,..." of every member of a new
        cluster (EtcdCluster sets it); None, a cluster of this one member."""
        self.workdir = Path(workdir)
        self.enable_v2 = enable_v2
        self.name = name
        self.initial_cluster = initial_cluster
        self.pki = pki
        self.host = host
        self.netns = netns
        if netns:
            port, peer_port = port or NETNS_CLIENT_PORT, peer_port or NETNS_PEER_PORT
        elif port is None or peer_port is None:
            picked = free_ports(host, 2)
            port, peer_port = port or picked[0], peer_port or picked[1]
        self.port = port
        self.peer_port = peer_port
        self.data_dir = self.workdir / "data"
        self.log_file = self.workdir / "etcd.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"https://{self._url_host}:{self.port}"

    @property
    def connection_string(self) -> str:
        """The client URLs the etcd charm publishes: this member's."""
        return self.endpoint

    @property
    def peer_url(self) -> str:
        return f"http://{self._url_host}:{self.peer_port}"

    @property
    def version(self) -> str:
        return etcd_version()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def _url_host(self) -> str:
        return f"[{self.host}]" if ipaddress.ip_address(self.host).version == 6 else self.host

    def command(self) -> list[str]:
        peer = self.peer_url
        command = [
            ETCD,
            "--name", self.name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.endpoint,
            "--advertise-client-urls", self.endpoint,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", self.initial_cluster or f"{self.name}={peer}",
            "--initial-cluster-state", "new",
            "--client-cert-auth",
            "--trusted-ca-file", str(self.pki.ca_cert),
            "--cert-file", str(self.pki.server_cert),
            "--key-file", str(self.pki.server_key),
            "--logger", "zap",
            "--log-outputs", "stderr",
        ]
        if self.enable_v2:
            command.append("--enable-v2=true")
        if self.netns:
            command = ["ip", "netns", "exec", self.netns, *command]
        return command

    def start(self, timeout: float = START_TIMEOUT, wait: bool = True) -> EtcdServer:
        """Launch etcd and (with wait) wait until it reports healthy. A member
        of a new cluster is healthy only once a quorum runs: start them all
        with wait=False, then wait_healthy() each."""
        if self.running:
            return self if not wait else self.wait_healthy(timeout)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.data_dir, 0o700)  # etcd warns about anything wider
        # ETCD_* variables would override the flags above.
        env = {key: value for key, value in os.environ.items() if not key.startswith("ETCD_")}
        with open(self.log_file, "ab") as log:
            self._process = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                start_new_session=True,  # a Ctrl-C in the terminal is for the test runner
            )
        atexit.register(self.stop)
        return self.wait_healthy(timeout) if wait else self

    def wait_healthy(self, timeout: float = START_TIMEOUT) -> EtcdServer:
        """Wait until the launched etcd reports healthy; stop it if it does not."""
        assert self._process is not None, "start() it first"
        deadline = time.monotonic() + timeout
        last_error = "no answer yet"
        while True:
            if self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                raise RuntimeError(f"etcd exited with status {code}:\n{self.log_tail()}")
            try:
                if self.healthy():
                    return self
                last_error = "it answered but is not healthy yet"
            except (OSError, requests.RequestException, subprocess.SubprocessError,
                    ValueError) as error:
                last_error = str(error)
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"etcd at {self.endpoint} not healthy after {timeout:g}s "
                    f"({last_error}):\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def healthy(self, timeout: float = 2.0) -> bool:
        """GET /health over TLS with the client certificate."""
        url = f"{self.endpoint}/health"
        if self.netns:
            result = subprocess.run(
                ["ip", "netns", "exec", self.netns, sys.executable, "-c", _HEALTH_PROBE,
                 url, str(self.pki.ca_cert), str(self.pki.client_cert),
                 str(self.pki.client_key), str(timeout)],
                capture_output=True, text=True, timeout=timeout + 5, check=False,
            )
            if result.returncode != 0:
                raise OSError(result.stderr.strip().splitlines()[-1:] or "health probe failed")
            body = json.loads(result.stdout)
        else:
            with self.session() as session:
                body = session.get(url, timeout=timeout).json()
        return str(body.get("health")) == "true"

    def session(self) -> requests.Session:
        """A requests session that trusts only this etcd's CA and presents the
        client certificate, whatever REQUESTS_CA_BUNDLE says."""
        session = requests.Session()
        session.trust_env = False
        session.verify = str(self.pki.ca_cert)
        session.cert = (str(self.pki.client_cert), str(self.pki.client_key))
        return session

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate etcd and wait for it; kill it if it lingers."""
        process, self._process = self._process, None
        atexit.unregister(self.stop)
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def __enter__(self) -> EtcdServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EtcdCluster:
    """A new etcd cluster of several members sharing one PKI, whose server
    certificate names every member's host. The same surface as EtcdServer
    where the sandbox needs it (pki, version, host, connection_string,
    start/stop, healthy), plus `members`, each an EtcdServer to stop and
    start on its own. Members in network namespaces get one each (netns[i]);
    on the host they share `host` with ports of their own."""

    def __init__(self, workdir: str | os.PathLike[str], pki: Pki, hosts: list[str],
                 netns: list[str | None] | None = None) -> None:
        workdir = Path(workdir)
        netns = netns or [None] * len(hosts)
        self.pki = pki
        # members on one host need ports of their own, all distinct
        ports = iter(free_ports(hosts[0], 2 * len(hosts)) if None in netns else ())
        self.members = [EtcdServer(workdir / f"member{n}", pki, host=host, netns=ns,
                                   name=f"member{n}",
                                   port=None if ns else next(ports),
                                   peer_port=None if ns else next(ports))
                        for n, (host, ns) in enumerate(zip(hosts, netns))]
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        for member in self.members:
            member.initial_cluster = initial

    @property
    def connection_string(self) -> str:
        return ",".join(m.endpoint for m in self.members)

    @property
    def host(self) -> str:
        return self.members[0].host

    @property
    def version(self) -> str:
        return etcd_version()

    def healthy(self) -> bool:
        """Whether every running member reports healthy."""
        return all(m.healthy() for m in self.members if m.running)

    def start(self, timeout: float = START_TIMEOUT) -> EtcdCluster:
        for member in self.members:
            member.start(wait=False)
        for member in self.members:
            member.wait_healthy(timeout)
        return self

    def stop(self) -> None:
        for member in self.members:
            member.stop()

    def __enter__(self) -> EtcdCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
