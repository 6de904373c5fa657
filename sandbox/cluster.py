"""A whole sandbox cluster: the small API the main command and the tests share.

    with Cluster(charm_dir, resource, workers=2) as cluster:   # up() / down()
        cluster.deploy_flannel(config={"cidr": "10.1.0.0/16"})
        cluster.wait_for_flannel()            # update-status until every unit is active
        pod = cluster.start_pod("m1")         # a real netns attached with cnitool
        cluster.remove_cni_relation(); cluster.add_cni_relation()
        print(cluster.status_table())

Real parts: a test network of namespaces, Debian's etcd with client TLS in a
namespace of its own, one machine (net + mount namespaces) per worker running
the built charm's hooks, flanneld under systemctl, pods via cnitool. Emulated:
Juju only (sandbox.juju): the controller, the etcd charm and kubernetes-worker.
"""
from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from sandbox.etcd import EtcdServer
from sandbox.juju import Controller, EtcdApp, KubernetesWorkerApp
from sandbox.machine import Machine
from sandbox.network import TestNetwork, cleanup_stale
from sandbox.pki import make_pki
from sandbox.pod import Pod, PodFailed
from sandbox.resource import host_arch

FLANNEL = "flannel"
WORKER = "kubernetes-worker"
ETCD = "etcd"
CNI_RELATION = ("flannel:cni", "kubernetes-worker:cni")
ETCD_RELATION = ("flannel:etcd", "etcd:db")
# What kubernetes-worker ships in /opt/cni/bin (Debian's containernetworking-plugins).
WORKER_PLUGINS = ("bridge", "host-local", "loopback", "portmap")


class ClusterError(RuntimeError):
    pass


@dataclass
class Phase:
    name: str
    seconds: float


@dataclass
class Timings:
    phases: list[Phase] = field(default_factory=list)

    @contextlib.contextmanager
    def phase(self, name: str, say: Callable[[str], None]):
        say(f"-- {name} ...")
        started = time.monotonic()
        try:
            yield
        finally:
            took = time.monotonic() - started
            self.phases.append(Phase(name, took))
            say(f"   {name}: {took:.1f}s")

    def table(self) -> str:
        width = max((len(p.name) for p in self.phases), default=5)
        rows = [f"{p.name:<{width}}  {p.seconds:7.1f}s" for p in self.phases]
        rows.append(f"{'total':<{width}}  {sum(p.seconds for p in self.phases):7.1f}s")
        return "\n".join(rows)


class Cluster:
    def __init__(self, charm_dir: Path, resource: Path, *, workers: int = 2,
                 say: Callable[[str], None] = lambda _: None,
                 workdir: Optional[Path] = None):
        self.charm_dir = Path(charm_dir)
        self.resource = Path(resource)
        self.worker_count = workers
        self.say = say
        self.timings = Timings()
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="flannel-sandbox-")
        self.workdir = Path(workdir or self._tmp.name)
        self.network: Optional[TestNetwork] = None
        self.etcd: Optional[EtcdServer] = None
        self.machines: dict[str, Machine] = {}
        self.machine_ids: dict[str, str] = {}
        self.controller: Optional[Controller] = None
        self.worker_app: Optional[KubernetesWorkerApp] = None
        self.pods: list[Pod] = []
        self._pod_serial = 0

    # --- lifecycle ------------------------------------------------------------
    def __enter__(self) -> "Cluster":
        try:
            return self.up()
        except BaseException:
            self.down()
            raise

    def __exit__(self, *exc) -> None:
        self.down()

    def up(self) -> "Cluster":
        cleanup_stale()
        with self.timings.phase("network, etcd and machines", self.say):
            self.network = TestNetwork().create()
            etcd_ns = self.network.attach(ETCD, kind="service")
            pki = make_pki(self.workdir / "pki", server_ips=[etcd_ns.address])
            self.etcd = EtcdServer(self.workdir / "etcd", pki, host=etcd_ns.address,
                                   netns=self.network.netns_for(ETCD)).start()
            for n in range(1, self.worker_count + 1):
                machine = Machine(f"m{n}", self.network).start()
                self.machines[machine.name] = machine
        with self.timings.phase("deploy etcd and kubernetes-worker", self.say):
            self.controller = Controller(self.workdir / "model")
            for name, machine in self.machines.items():
                self.machine_ids[name] = self.controller.add_sandbox_machine(machine)
            self.controller.deploy(EtcdApp.from_server(self.etcd))
            self.worker_app = KubernetesWorkerApp()
            self.controller.deploy(self.worker_app, to=list(self.machine_ids.values()))
            self.controller.settle()
        return self

    def down(self) -> None:
        for pod in self.pods:
            with contextlib.suppress(Exception):
                pod.delete()
        self.pods.clear()
        if self.controller is not None:
            with contextlib.suppress(Exception):
                self.controller.close()
        for machine in self.machines.values():
            with contextlib.suppress(Exception):
                machine.destroy()
        self.machines.clear()
        if self.etcd is not None:
            with contextlib.suppress(Exception):
                self.etcd.stop()
        if self.network is not None:
            with contextlib.suppress(Exception):
                self.network.destroy()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # --- the flannel application -----------------------------------------------
    def deploy_flannel(self, config: Optional[dict] = None, *, charm_dir: Optional[Path] = None,
                       resource: Optional[Path] = None) -> None:
        with self.timings.phase("deploy flannel and relate it", self.say):
            self.controller.deploy(FLANNEL, charm_dir or self.charm_dir, config=config or {},
                                   resources={self.resource_name: resource or self.resource})
            self.controller.add_relation(*ETCD_RELATION)
            self.controller.add_relation(*CNI_RELATION)
            self.settle()

    @property
    def resource_name(self) -> str:
        return f"flannel-{host_arch()}"

    def settle(self) -> None:
        self.controller.settle()

    def flannel_units(self) -> list[str]:
        return self.controller.units(FLANNEL)

    def unit_on(self, machine: str) -> str:
        for unit in self.flannel_units():
            if self.controller.unit(unit).get("machine") == self.machine_ids[machine]:
                return unit
        raise ClusterError(f"no flannel unit on {machine}")

    def workload(self, unit: str) -> tuple[str, str]:
        status = self.controller.unit(unit).get("workload") or {}
        return status.get("status", ""), status.get("message", "")

    def wait_for_flannel(self, timeout: float = 60.0, state: str = "active") -> dict[str, str]:
        """Fire update-status (Juju's timer, sped up) until every flannel unit
        reaches `state`; returns unit -> message. Hooks themselves never wait."""
        deadline = time.monotonic() + timeout
        while True:
            units = self.flannel_units()
            seen = {u: self.workload(u) for u in units}
            if units and all(s == state for s, _ in seen.values()):
                return {u: m for u, (_, m) in seen.items()}
            if time.monotonic() > deadline:
                raise ClusterError(f"flannel units not {state} after {timeout:.0f}s: {seen}\n"
                                   + self.controller.format_status())
            time.sleep(1.0)
            self.controller.update_status(FLANNEL)
            self.settle()

    def configure(self, **values) -> None:
        self.controller.config(FLANNEL, **values)
        self.settle()

    def remove_cni_relation(self) -> None:
        self.controller.remove_relation(*CNI_RELATION)
        self.settle()

    def add_cni_relation(self) -> None:
        self.controller.add_relation(*CNI_RELATION)
        self.settle()

    def remove_etcd_relation(self) -> None:
        self.controller.remove_relation(*ETCD_RELATION)
        self.settle()

    def add_etcd_relation(self) -> None:
        self.controller.add_relation(*ETCD_RELATION)
        self.settle()

    def upgrade_flannel(self, resource: Path) -> None:
        self.controller.upgrade_charm(FLANNEL, resources={self.resource_name: resource})
        self.settle()

    # --- pods --------------------------------------------------------------------
    def start_pod(self, machine: str) -> Pod:
        """A pod sandbox on `machine`, attached exactly as containerd would."""
        self._pod_serial += 1
        pod = Pod.create(self.machines[machine], f"p{self._pod_serial}")
        self.pods.append(pod)
        return pod

    def try_pod(self, machine: str) -> tuple[Optional[Pod], str]:
        """(pod, "") or (None, libcni's error) — for scenarios that expect failure."""
        try:
            return self.start_pod(machine), ""
        except PodFailed as failed:
            return None, str(failed)

    # --- what an operator would look at ----------------------------------------------
    def cni_bin(self, machine: str) -> dict[str, bytes]:
        m = self.machines[machine]
        return {name: m.read_file(f"/opt/cni/bin/{name}") for name in (m.ls("/opt/cni/bin") or [])}

    def status_table(self) -> str:
        lines = [self.controller.format_status(), ""]
        lines.append(f"{'Machine':<8} {'Address':<16} {'Flannel subnet':<18} Pods")
        for name, m in self.machines.items():
            env = m.read_file("/run/flannel/subnet.env") or b""
            subnet = next((line.split("=", 1)[1] for line in env.decode().splitlines()
                           if line.startswith("FLANNEL_SUBNET=")), "-")
            pods = ", ".join(f"{p.name}={p.address}" for p in self.pods if p.machine is m) or "-"
            lines.append(f"{name:<8} {m.address or '-':<16} {subnet:<18} {pods}")
        return "\n".join(lines)
