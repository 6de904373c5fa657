"""Pod sandboxes on a machine, attached with libcni's own runtime, cnitool.

A pod is a network namespace created from the host side
(``ip netns add flsb-<tag>-pod-<machine>-<name>``), attached by running
``cnitool add <network> /var/run/netns/<pod>`` *inside the machine* (its mount
and network namespaces) with ``CNI_PATH=/opt/cni/bin`` and
``NETCONFPATH=/etc/cni/net.d``: exactly what containerd does for a pod
sandbox, so cnitool sees the machine's private /opt/cni/bin, conflist and
/run/flannel/subnet.env, and fails with libcni's real errors (for example
``failed to find plugin "flannel" in path [/opt/cni/bin]``).  The machine's
/run/netns is a slave of the host's, so the pod namespace is visible inside.

API::

    pod = Pod.create(machine, "busybox", network=None, timeout=60)
        # network None: the "name" of the machine's first conflist/conf in
        # /etc/cni/net.d (the one a kubelet would pick), else "cbr0".
        # raises PodFailed(message, stderr) after removing the half-made pod
    pod.name, pod.netns, pod.machine, pod.network, pod.address ("10.1.52.2"),
    pod.interface ("10.1.52.2/24"), pod.result (the CNI result dict),
    pod.address6 / pod.interface6 (its IPv6 address on a dual-stack network, else None)
    pod.ping(address, count=3, wait=1.0) -> bool      # ICMP from inside the pod
    pod.run(argv, check=True) -> CompletedProcess     # inside the pod's netns only
    pod.delete()                                      # cnitool del + netns delete
    with Pod.create(...) as pod: ...                  # delete() on exit
"""

from __future__ import annotations

import json
import re
import subprocess

from .machine import Machine
from .network import NETNS_DIR, delete_netns, ping_from_netns, ping_unfragmented, run

CNI_ENV = {"CNI_PATH": "/opt/cni/bin", "NETCONFPATH": "/etc/cni/net.d"}
NETCONF_DIR = "/etc/cni/net.d"


class PodFailed(RuntimeError):
    """cnitool failed; ``str(e)`` and ``e.stderr`` carry libcni's own words."""

    def __init__(self, message: str, stderr: str = ""):
        super().__init__(message)
        self.stderr = stderr


def default_network(machine: Machine) -> str:
    """The network name of the first CNI config file in the machine's
    /etc/cni/net.d, in the order a kubelet picks (lexical), or "cbr0"."""
    for name in machine.ls(NETCONF_DIR) or []:
        if not name.endswith((".conflist", ".conf", ".json")):
            continue
        try:
            conf = json.loads(machine.read_file(f"{NETCONF_DIR}/{name}") or b"")
        except ValueError:
            continue
        if isinstance(conf, dict) and conf.get("name"):
            return str(conf["name"])
    return "cbr0"


def _cnitool(machine: Machine, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    from .resource import cnitool_path
    return machine.run([str(cnitool_path()), *args], env=CNI_ENV, check=False, timeout=timeout)


class Pod:
    def __init__(self, machine: Machine, name: str, network: str):
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
            raise ValueError(f"bad pod name {name!r}")
        self.machine = machine
        self.name = name
        self.network = network
        self.netns = machine.pod_prefix + name
        self.result: dict = {}
        self.interface: str | None = None
        self.address: str | None = None
        self.interface6: str | None = None
        self.address6: str | None = None

    def __repr__(self) -> str:
        return f"Pod({self.name!r} on {self.machine.name}, address={self.address!r})"

    @property
    def netns_path(self) -> str:
        return str(NETNS_DIR / self.netns)

    @classmethod
    def create(cls, machine: Machine, name: str, network: str | None = None,
               timeout: float = 60) -> "Pod":
        pod = cls(machine, name, network or default_network(machine))
        if (NETNS_DIR / pod.netns).exists():
            raise ValueError(f"pod {name} already exists on {machine.name}")
        run(["ip", "netns", "add", pod.netns])
        try:
            run(["ip", "-n", pod.netns, "link", "set", "lo", "up"])
            proc = _cnitool(machine, "add", pod.network, pod.netns_path, timeout=timeout)
            if proc.returncode != 0:
                err = (proc.stderr.strip() or proc.stdout.strip()
                       or f"cnitool exited {proc.returncode}")
                raise PodFailed(err, proc.stderr)
            try:
                pod.result = json.loads(proc.stdout)
                addresses = [ip["address"] for ip in pod.result["ips"]]
                pod.interface = next(a for a in addresses if ":" not in a)
            except (ValueError, KeyError, StopIteration, TypeError):
                raise PodFailed(f"cnitool add gave no IPv4 address: {proc.stdout.strip()!r}",
                                proc.stderr)
            pod.address = pod.interface.split("/")[0]
            pod.interface6 = next((a for a in addresses if ":" in a), None)
            pod.address6 = pod.interface6.split("/")[0] if pod.interface6 else None
        except BaseException:
            pod.delete()
            raise
        return pod

    def ping(self, address: str, count: int = 3, wait: float = 1.0) -> bool:
        """True if at least one of `count` ICMP echoes from the pod is answered."""
        return ping_from_netns(self.netns, address, count, wait) > 0

    def ping_unfragmented(self, address: str, size: int) -> str:
        """`ping -M do -s SIZE` from the pod: "answered", the kernel's refusal
        ("Message too long") or "no answer" (network.ping_unfragmented)."""
        return ping_unfragmented(self.netns, address, size)

    def link_mtu(self, ifname: str = "eth0") -> int:
        """The MTU of the pod's `ifname` (what the CNI plugins gave it)."""
        shown = self.run(["ip", "-j", "link", "show", "dev", ifname])
        return int(json.loads(shown.stdout)[0]["mtu"])

    def run(self, argv, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return run(["nsenter", f"--net={self.netns_path}", "--", *map(str, argv)],
                   check=check, timeout=timeout)

    def delete(self) -> str:
        """Detach the pod (cnitool del inside the machine) and delete its
        namespace.  Never raises for a half-made pod; returns cnitool's
        stderr ("" when it succeeded or had nothing to do)."""
        err = ""
        if (NETNS_DIR / self.netns).exists():
            if self.machine.holder is not None:
                proc = _cnitool(self.machine, "del", self.network, self.netns_path)
                if proc.returncode != 0:
                    err = proc.stderr.strip() or proc.stdout.strip()
            delete_netns(self.netns)
        return err

    def __enter__(self) -> "Pod":
        return self

    def __exit__(self, *exc) -> None:
        self.delete()
