"""A whole sandbox cluster: the small API the main command and the tests share.

    with Cluster(charm_dir, resource, workers=2) as cluster:   # up() / down()
        # worker_generation="reactive" (the worker of LP #1866869, the default)
        # or "ops" (the ops kubernetes-worker); control_plane=True adds a
        # kubernetes-control-plane machine ("cp", ops) related to etcd and,
        # with flannel, to flannel:cni;
        # etcd_v2=True has etcd serve its v2 API too (flannel v0.11's);
        # auto_retry=False: a failed hook waits for controller.resolve();
        # worker_runtime_ready=False: the reactive worker extracts its
        # plugins only once the test makes its container runtime ready;
        # kubernetes=True (with control_plane=True) runs Kubernetes itself:
        # cluster.kubernetes (sandbox.kubernetes) has kubectl;
        # control_plane_config={"service-cidr": ...}: the control plane's
        # options from its deploy (an IPv6 service-cidr: IPv6-only Kubernetes);
        # e2e_images=True (with kubernetes=True): Kubernetes' e2e test images
        # and CoreDNS's in every machine's containerd (sandbox.e2e_images), or
        # a tuple of their names (("agnhost", "coredns"));
        # series="jammy"|"noble": the Ubuntu release (and python3) of every
        # machine, by default one picked by the label.
        cluster.deploy_flannel(config={"cidr": "10.1.0.0/16"})
        cluster.wait_for_flannel()            # update-status until every unit is active
        pod = cluster.start_pod("m1")         # a real netns attached with cnitool
        cluster.remove_cni_relation(); cluster.add_cni_relation()
        print(cluster.status_table())

    What an operator would look at, per machine: cluster.cni_bin(m),
    cluster.subnet_env(m), cluster.vxlan_links(m), cluster.flanneld_pids(m); in etcd:
    cluster.network_config(), cluster.etcd_values(prefix); traffic while
    something happens: `with cluster.pinging(pod, address) as p: ...`.
    Whether a node is as flannel found it: cluster.node_state(m) (iptables
    rules per table, routes, addresses, links, systemd units) and
    cluster.flannel_leftovers(m) (what it gained since up(), the running
    pods' own bridge and chains aside unless pods_stay=False).
    host_leftovers() lists what sandbox runs left on the host.

Real parts: a test network of namespaces, Debian's etcd with client TLS in a
namespace of its own, one machine (net + mount namespaces) per worker (and for
the control plane) running the built charm's hooks, flanneld under systemctl,
pods via cnitool, CRI pods via containerd, and with kubernetes=True
kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
kube-proxy v1.37. Emulated: Juju only (sandbox.juju): the controller, the etcd
charm, kubernetes-worker and kubernetes-control-plane (sandbox.juju.principals
for the ops charms, sandbox.juju.apps.KubernetesWorkerApp for the reactive
worker of the bug report).
"""
from __future__ import annotations

import contextlib
import json
from collections import Counter
import os
import secrets
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from sandbox.etcd import EtcdServer
from sandbox.juju import (Controller, EtcdApp, KubernetesWorkerApp, OpsKubernetesControlPlaneApp,
                          OpsKubernetesWorkerApp)
from sandbox.juju.apps import CNI_PLUGINS
from sandbox.juju.controller import JUJU_VERSION
from sandbox.kubernetes import Kubernetes
from sandbox import ubuntu
from sandbox.machine import Machine
from sandbox.network import (NETNS_DIR, PREFIX, TestNetwork, _ns_id, _tag_of, cleanup_stale,
                             list_netns, owner_alive, ping_loop, run, state_root)
from sandbox.old_flannel import workers_flannel
from sandbox.pki import make_pki
from sandbox.cri import CriPod, cri_leftovers
from sandbox.pod import Pod, PodFailed
from sandbox.resource import host_arch
from sandbox.waiting import wait_for

FLANNEL = "flannel"
WORKER = "kubernetes-worker"
CONTROL_PLANE = "kubernetes-control-plane"
CONTROL_PLANE_MACHINE = "cp"
ETCD = "etcd"
CNI_RELATION = ("flannel:cni", "kubernetes-worker:cni")
# flannel's ipv6-cidr in the sandbox's dual-stack and IPv6-only clusters
IPV6_CIDR = "fd10:1::/56"
CONTROL_PLANE_CNI_RELATION = ("flannel:cni", "kubernetes-control-plane:cni")
CONTROL_PLANE_ETCD_RELATION = ("kubernetes-control-plane:etcd", "etcd:db")
ETCD_RELATION = ("flannel:etcd", "etcd:db")
# What the reactive kubernetes-worker extracts into /opt/cni/bin besides its
# own flannel (Debian's containernetworking-plugins); the ops principals
# extract every plugin there, and no flannel.
WORKER_PLUGINS = CNI_PLUGINS
WORKER_GENERATIONS = ("reactive", "ops")
NETWORK_PREFIX = "/coreos.com/network"
SUBNET_ENV = "/run/flannel/subnet.env"
# the unit file the charm writes (lib/charms/flannel/facts/paths.py)
UNIT_FILE = "/lib/systemd/system/flannel.service"

# An etcd3gw client inside etcd's namespace (the host has no route to the
# test network) with a session that trusts only the sandbox CA, whatever
# REQUESTS_CA_BUNDLE says, and a timeout.
_ETCD_CLIENT = """
import json, sys, requests, etcd3gw
host, port, ca, cert, key, prefix = sys.argv[1:7]
session = requests.Session()
session.trust_env = False
session.verify = ca
session.cert = (cert, key)
client = etcd3gw.Etcd3Client(host=host, port=int(port), protocol="https",
                             session=session, timeout=5)
"""
# Prints {key: [value, version]} as JSON (version: how many times the key
# was written since it was created).
_ETCD_READ = _ETCD_CLIENT + """
out = {}
for value, meta in client.get_prefix(prefix):
    k = meta["key"]
    out[k.decode() if isinstance(k, bytes) else k] = [value.decode(), int(meta["version"])]
print(json.dumps(out))
"""

# Delete every key under a prefix, in etcd's v3 keyspace and, where etcd
# serves it, its v2 one (flannel v0.11's); run inside etcd's namespace, as
# _ETCD_READ. Prints the keys deleted as a JSON list.
_ETCD_DELETE = _ETCD_CLIENT + """
gone = []
for value, meta in client.get_prefix(prefix):
    k = meta["key"]
    k = k.decode() if isinstance(k, bytes) else k
    if client.delete(k):
        gone.append(k)
url = "https://" + (f"[{host}]" if ":" in host else host) + f":{port}/v2/keys" + prefix
listed = session.get(url, params={"recursive": "true"}, timeout=5)
if listed.status_code == 200:
    for node in listed.json()["node"].get("nodes") or []:
        session.delete(url.rsplit(prefix, 1)[0] + node["key"], timeout=5).raise_for_status()
        gone.append("v2:" + node["key"])
print(json.dumps(gone))
"""

# etcd compacts its history as a long-running cluster does (the etcd charm's
# auto-compaction): two writes outside flannel's prefix (under the given
# one), then a physical compaction at the current revision. Prints the
# revision compacted at.
_ETCD_COMPACT = _ETCD_CLIENT + """
for n in range(2):
    client.put(prefix + "/filler", str(n))
revision = int(client.status()["header"]["revision"])
url = "https://" + (f"[{host}]" if ":" in host else host) + f":{port}/v3/kv/compaction"
session.post(url, json={"revision": str(revision), "physical": True},
             timeout=30).raise_for_status()
client.delete(prefix + "/filler")
print(revision)
"""

# The same through etcd's v2 API (flannel v0.11's keyspace): {key: [value,
# ttl or null]} of every key under the prefix, {} when there is none (or
# etcd serves no v2 API).
_ETCD_V2_READ = """
import json, sys, requests
endpoint, ca, cert, key, prefix = sys.argv[1:6]
session = requests.Session()
session.trust_env = False
session.verify = ca
session.cert = (cert, key)
reply = session.get(endpoint + "/v2/keys" + prefix, params={"recursive": "true"}, timeout=5)
out = {}
def walk(node):
    if node.get("dir"):
        for child in node.get("nodes") or []:
            walk(child)
    else:
        out[node["key"]] = [node.get("value"), node.get("ttl")]
if reply.status_code != 404:
    reply.raise_for_status()
    walk(reply.json()["node"])
print(json.dumps(out))
"""


SEED_ENV = "FLANNEL_SANDBOX_SEED"


def lock_order_seed(label: str = "") -> Optional[int]:
    """The seed of the hook order (Controller(seed=): the machine lock's,
    and which of a unit's relation hooks goes next) from
    $FLANNEL_SANDBOX_SEED: a number; a fixed set of them, "1,2,3", of which
    each cluster plays the one its label picks (the same one every run);
    "random" (a new one per cluster, printed); or unset: queue order."""
    value = os.environ.get(SEED_ENV, "").strip()
    if not value:
        return None
    if value == "random":
        return secrets.randbelow(1 << 31)
    seeds = [int(seed) for seed in value.split(",") if seed.strip()]
    return seeds[zlib.crc32(label.encode()) % len(seeds)]


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
                 worker_generation: str = "reactive", control_plane: bool = False,
                 routed_workers: int = 0, etcd_v2: bool = False, auto_retry: bool = True,
                 worker_runtime_ready: bool = True, kubernetes: bool = False,
                 series: Optional[str] = None, juju: str = JUJU_VERSION,
                 containerd: str = "1.6", label: str = "",
                 control_plane_config: Optional[dict] = None, e2e_images=False,
                 say: Callable[[str], None] = lambda _: None, workdir: Optional[Path] = None):
        if worker_generation not in WORKER_GENERATIONS:
            raise ValueError(f"worker_generation must be one of {WORKER_GENERATIONS}, "
                             f"not {worker_generation!r}")
        self.charm_dir = Path(charm_dir)
        self.resource = Path(resource)
        self.worker_count = workers
        self.worker_generation = worker_generation
        self.with_control_plane = control_plane
        # the control plane's options from its deploy on (`juju deploy
        # --config`): a cluster's service-cidr is set before it first starts
        self.control_plane_config = dict(control_plane_config or {})
        # the last `routed_workers` workers sit on a second subnet behind a router
        self.routed_workers = routed_workers
        # etcd serves its v2 API too, as the etcd charm did for flannel v0.11
        self.etcd_v2 = etcd_v2
        # Juju's agents retry a failed hook by themselves (5 s, doubling);
        # False: it waits for controller.resolve(), for tests that look at
        # the error state
        self.auto_retry = auto_retry
        # the reactive worker extracts its cni-plugins once its container
        # runtime is ready: at its install, or (False) when a test says so
        self.worker_runtime_ready = worker_runtime_ready
        # Kubernetes itself (sandbox.kubernetes): an API server on the control
        # plane, kubelet and kube-proxy on every machine, driven by the
        # principals; it needs the control plane
        if kubernetes and not control_plane:
            raise ValueError("kubernetes=True needs control_plane=True")
        self.with_kubernetes = kubernetes
        # the images Kubernetes' e2e tests and CoreDNS run (sandbox.e2e_images),
        # in every machine's containerd (sandbox.conformance): True for all,
        # or the names of those a cluster's checks need (each import copies
        # the image on every machine)
        if e2e_images and not kubernetes:
            raise ValueError("e2e_images=True needs kubernetes=True")
        self.e2e_images = e2e_images
        # the Ubuntu release every machine claims, whose python3 runs the
        # hooks: given, else picked by the label (ubuntu.series_for)
        self.series = series or ubuntu.series_for(label)
        # the Juju the controller plays (sandbox/juju/versions.py): 3.6, or
        # 4.0, which deploys and refreshes the packed charm only
        self.juju = juju
        # the machines' container runtime (sandbox.cri): Debian's containerd
        # 1.6, or "2" (containerd 2 from the Go module proxy)
        self.containerd = containerd
        self.kubernetes: Optional[Kubernetes] = None
        self.say = say
        self.timings = Timings()
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="flannel-sandbox-")
        self.workdir = Path(workdir or self._tmp.name)
        self.network: Optional[TestNetwork] = None
        self.etcd: Optional[EtcdServer] = None
        self.machines: dict[str, Machine] = {}
        self.machine_ids: dict[str, str] = {}
        self.controller: Optional[Controller] = None
        self.worker_app = None            # KubernetesWorkerApp or OpsKubernetesWorkerApp
        self.control_plane_app: Optional[OpsKubernetesControlPlaneApp] = None
        self.pods: list[Pod] = []
        self._pod_serial = 0
        self.pristine: dict[str, NodeState] = {}
        self.seed = lock_order_seed(label)

    # --- lifecycle ------------------------------------------------------------
    def __enter__(self) -> "Cluster":
        try:
            return self.up()
        except BaseException:
            self.down()
            raise

    def __exit__(self, *exc) -> None:
        """Every scenario ends with each running flanneld on its unit file's
        command line (a unit file rewritten without daemon-reload and a
        restart runs the old one: sandbox.systemctl keeps what it loaded)."""
        stale = self.flanneld_command_line_problems() if exc[0] is None else []
        self.down()
        if stale:
            raise ClusterError("; ".join(stale))

    def flanneld_command_line_problems(self) -> list[str]:
        """Each machine's running flanneld against the ExecStart= of the
        flannel.service on disk."""
        problems = []
        for name, machine in self.machines.items():
            if machine.holder is None:
                continue
            unit = (machine.read_file(UNIT_FILE) or b"").decode()
            exec_start = next((line.split("=", 1)[1] for line in unit.splitlines()
                               if line.startswith("ExecStart=")), None)
            for running in machine.command_lines("flanneld"):
                if exec_start is None:
                    problems.append(f"{name}: flanneld runs with no {UNIT_FILE} on disk")
                elif running != shlex.split(exec_start):
                    problems.append(f"{name}: flanneld runs `{' '.join(running)}`, "
                                    f"{UNIT_FILE} says `{exec_start}`")
        return problems

    def up(self) -> "Cluster":
        cleanup_stale()
        with self.timings.phase("network, etcd and machines", self.say):
            self.network = TestNetwork().create()
            etcd_ns = self.network.attach(ETCD, kind="service")
            pki = make_pki(self.workdir / "pki", server_ips=[etcd_ns.address])
            self.etcd = EtcdServer(self.workdir / "etcd", pki, host=etcd_ns.address,
                                   netns=self.network.netns_for(ETCD),
                                   enable_v2=self.etcd_v2).start()
            names = [CONTROL_PLANE_MACHINE] if self.with_control_plane else []
            names += [f"m{n}" for n in range(1, self.worker_count + 1)]
            routed = set(names[len(names) - self.routed_workers:]) if self.routed_workers else ()
            if routed:
                self.network.add_routed_segment()
            for name in names:
                machine = Machine(name, self.network, series=self.series,
                                  segment="routed" if name in routed else "main").start()
                machine.containerd = self.containerd
                self.machines[machine.name] = machine
        if self.with_kubernetes:
            with self.timings.phase("containerd on every machine, Kubernetes' certificates",
                                    self.say):
                self.kubernetes = Kubernetes(self.workdir / "kubernetes", pki,
                                             self.etcd.connection_string)
                with ThreadPoolExecutor(max_workers=len(self.machines)) as pool:
                    list(pool.map(self.kubernetes.prepare_node, self.machines.values()))
                if self.e2e_images:
                    from sandbox import e2e_images
                    from sandbox.cri import runtime_for
                    e2e_images.archives(progress=self.say)
                    with ThreadPoolExecutor(max_workers=len(self.machines)) as pool:
                        names = None if self.e2e_images is True else tuple(self.e2e_images)
                        list(pool.map(lambda m: e2e_images.import_into(runtime_for(m), names),
                                      self.machines.values()))
                self.kubernetes.attach_control_plane(self.machines[CONTROL_PLANE_MACHINE])
        principals = f"{self.worker_generation} kubernetes-worker" + (
            " and kubernetes-control-plane" if self.with_control_plane else "")
        with self.timings.phase(f"deploy etcd, {principals}", self.say):
            self.controller = Controller(self.workdir / "model", seed=self.seed,
                                         auto_retry=self.auto_retry, juju_version=self.juju)
            if self.seed is not None:
                self.say(f"   hook order: seed {self.seed} "
                         f"({SEED_ENV}={self.seed} plays it again)")
            for name, machine in self.machines.items():
                self.machine_ids[name] = self.controller.add_sandbox_machine(machine)
            self.controller.deploy(EtcdApp.from_server(self.etcd))
            # the reactive worker's cni-plugins (v0.7.5) had a flannel of its own
            if self.worker_generation == "ops":
                self.worker_app = OpsKubernetesWorkerApp()
                self.worker_app.kubernetes = self.kubernetes
            else:
                self.worker_app = KubernetesWorkerApp(flannel=workers_flannel(self.resource))
                self.worker_app.kubernetes = self.kubernetes
                self.worker_app.container_runtime_ready = self.worker_runtime_ready
            self.controller.deploy(self.worker_app, to=[
                self.machine_ids[m] for m in self.worker_machines()])
            if self.with_control_plane:
                self.control_plane_app = OpsKubernetesControlPlaneApp()
                self.control_plane_app.kubernetes = self.kubernetes
                self.controller.deploy(self.control_plane_app,
                                       to=[self.machine_ids[CONTROL_PLANE_MACHINE]],
                                       config=self.control_plane_config or None)
                self.controller.add_relation(*CONTROL_PLANE_ETCD_RELATION)
            self.controller.settle()
        self.remember_nodes()
        return self

    def remember_nodes(self) -> None:
        """Each node as flannel finds it: what flannel_leftovers() compares
        with (taken by up(); again by a test that shapes the nodes first)."""
        self.pristine = {m: self.node_state(m) for m in self.machines}

    def worker_machines(self) -> list[str]:
        return [m for m in self.machines if m != CONTROL_PLANE_MACHINE]

    def principal_app(self, machine: str):
        """The emulated principal on `machine` (worker or control plane)."""
        if machine == CONTROL_PLANE_MACHINE and self.control_plane_app is not None:
            return self.control_plane_app
        return self.worker_app

    def principal_plugins(self, machine: str) -> tuple[str, ...]:
        """The CNI plugins the principal on `machine` puts in /opt/cni/bin."""
        return tuple(self.principal_app(machine).plugins)

    def principal_units(self) -> list[str]:
        units = self.controller.units(WORKER)
        if self.control_plane_app is not None:
            units += self.controller.units(CONTROL_PLANE)
        return units

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
            self.controller.deploy(FLANNEL, self.deployable(charm_dir or self.charm_dir),
                                   config=config or {},
                                   resources={self.resource_name: resource or self.resource})
            self.controller.add_relation(*ETCD_RELATION)
            self.controller.add_relation(*CNI_RELATION)
            if self.control_plane_app is not None:
                self.controller.add_relation(*CONTROL_PLANE_CNI_RELATION)
            self.settle()

    def deployable(self, charm_dir: Path) -> Path:
        """What `juju deploy` and `juju refresh --path` are given: the charm
        directory, or where this Juju deploys packed charms only (4.0) the
        `.charm` scripts/build-charm packed beside it."""
        if self.controller.rules.deploys_directories or not Path(charm_dir).is_dir():
            return Path(charm_dir)
        packed = Path(charm_dir).with_suffix(".charm")
        if not packed.is_file():
            raise ClusterError(f"Juju {self.juju} deploys a packed charm: no {packed}")
        return packed

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
                failed = "".join(f"\nfailed: {line}" for line in self.failed_hooks())
                raise ClusterError(f"flannel units not {state} after {timeout:.0f}s: {seen}\n"
                                   + self.controller.format_status() + failed)
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

    def upgrade_flannel(self, resource: Path, charm_dir: Optional[Path] = None) -> None:
        """`juju refresh flannel [--path DIR] --resource flannel-<arch>=TARBALL`."""
        self.controller.upgrade_charm(FLANNEL,
                                      charm_dir and self.deployable(charm_dir),
                                      resources={self.resource_name: resource})
        self.settle()

    def failed_hooks(self) -> list[str]:
        """Every hook that exited non-zero so far, as "unit hook (exit N)"."""
        return [f"{h.unit} {h.hook} (exit {h.exit_code}): {h.stderr_tail[-500:]}"
                for h in self.controller.hook_log if not h.ok]

    def reboot(self, machine: str, *, start_enabled: bool = True) -> tuple[list, list[str]]:
        """`machine` loses power and boots again (Machine.reboot(): its
        processes, /run, links, routes and its pods' namespaces gone; with
        start_enabled the units it enabled start at boot, as systemd does),
        then Juju's agent fires `start` on its units (Controller.reboot()),
        settled. Its pods are gone, as after a real reboot: they leave
        `self.pods` and are returned; what they held on disk (host-local's
        allocations under /var/lib/cni) is released as the kubelet does for a
        dead pod sandbox, with a CNI DEL whose namespace no longer exists
        (release_pod). The kubelet then starts new pods: start_pod().
        Returns (the pods gone, what Machine.reboot() says went); a CNI DEL
        that failed raises ClusterError."""
        m = self.machines[machine]
        gone = [p for p in self.pods if p.machine is m]
        self.pods = [p for p in self.pods if p.machine is not m]
        went = m.reboot(start_enabled=start_enabled)
        self.controller.reboot(self.machine_ids[machine])
        self.settle()
        for pod in gone:
            error = self.release_pod(pod)
            if error:
                raise ClusterError(f"CNI DEL of {pod.name}, gone with {machine}'s reboot: {error}")
        return gone, went

    def release_pod(self, pod) -> str:
        """CNI DEL for a pod whose namespace is gone (what containerd runs
        when the kubelet removes a dead sandbox): the plugins free what the
        pod held on disk. Returns the plugin's stderr ("" when it succeeded)."""
        from sandbox.pod import _cnitool
        if isinstance(pod, CriPod):
            return ""   # containerd's own state: not modelled across a reboot
        proc = _cnitool(pod.machine, "del", pod.network, pod.netns_path)
        return "" if proc.returncode == 0 else (proc.stderr.strip() or proc.stdout.strip())

    # --- pods --------------------------------------------------------------------
    def start_pod(self, machine: str, runtime: str = "cnitool") -> Pod | CriPod:
        """A pod on `machine`: runtime "cnitool" attaches a network namespace
        with libcni alone; "cri" makes a CRI pod (crictl runp + a busybox
        container) through the machine's containerd, started on first use."""
        self._pod_serial += 1
        if runtime == "cri":
            pod = CriPod.create(self.machines[machine], f"p{self._pod_serial}")
        else:
            pod = Pod.create(self.machines[machine], f"p{self._pod_serial}")
        self.pods.append(pod)
        return pod

    def try_pod(self, machine: str, runtime: str = "cnitool") -> tuple[Optional[Pod], str]:
        """(pod, "") or (None, libcni's / containerd's error) — for scenarios
        that expect failure."""
        try:
            return self.start_pod(machine, runtime), ""
        except PodFailed as failed:
            return None, str(failed)

    @contextlib.contextmanager
    def pinging(self, pod: Pod, address: str, interval: float = 0.5):
        """Ping `address` from `pod` in the background while the block runs:
        one echo every `interval` seconds, each answered however late (until
        2 s after the block). Yields a Pinger (sent, answered, lost,
        longest_outage); at least one echo is sent."""
        pinger = Pinger(pod.netns, address, interval)
        pinger.start()
        try:
            yield pinger
        finally:
            pinger.stop()

    # --- what an operator would look at ----------------------------------------------
    def cni_bin(self, machine: str) -> dict[str, bytes]:
        m = self.machines[machine]
        return {name: m.read_file(f"/opt/cni/bin/{name}") for name in (m.ls("/opt/cni/bin") or [])}

    def default_conflist_link(self, machine: str, stem: str = "01-default") -> Optional[str]:
        """Where /etc/cni/net.d/<stem>.conflist points on `machine` (the
        principal's link to the CNI's conflist: 01-default the ops control
        plane's, 05-default that of the reactive kubernetes-worker of 2020),
        None if it is no link."""
        cp = self.machines[machine].run(["readlink", f"/etc/cni/net.d/{stem}.conflist"],
                                        check=False)
        return cp.stdout.strip() or None if cp.returncode == 0 else None

    def subnet_env(self, machine: str) -> dict[str, str]:
        """/run/flannel/subnet.env on `machine` as {VARIABLE: value} ({} if absent)."""
        text = (self.machines[machine].read_file(SUBNET_ENV) or b"").decode()
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def set_underlay_mtu(self, mtu: int) -> None:
        """The MTU of the network the machines (and etcd) share: every link on it."""
        self.network.set_mtu(mtu)

    def narrow_path_to(self, machine: str, mtu: int) -> None:
        """The path to `machine` carries frames of at most `mtu` bytes, and
        drops bigger ones without a word, as a link or tunnel in between
        narrower than the nodes' interfaces does (an MTU black hole); the
        nodes' own interfaces keep theirs. 1500 restores it."""
        self.network.set_port_mtu(machine, mtu)

    def run_action(self, unit: str, action: str, **params):
        """`juju run UNIT ACTION key=value...` (sandbox.juju ActionResult);
        underscores in parameter names stand for dashes."""
        return self.controller.run_action(
            unit, action, {key.replace("_", "-"): value for key, value in params.items()})

    def vxlan_links(self, machine: str) -> dict[str, dict]:
        """flanneld's vxlan devices in `machine` (it names them flannel.<VNI>:
        flannel.1 by default), as `ip -d -j link show` describes them:
        name -> {"vni", "port" (UDP dstport), "local", "dev", "mtu"}."""
        found = {}
        for link in self.machines[machine].ip_json("-d", "link", "show"):
            info = link.get("linkinfo", {})
            if info.get("info_kind") != "vxlan" or not link["ifname"].startswith("flannel"):
                continue
            data = info.get("info_data", {})
            found[link["ifname"]] = {"vni": data.get("id"), "port": data.get("port"),
                                     "local": data.get("local"), "dev": data.get("link"),
                                     "mtu": link.get("mtu")}
        return found

    def flanneld_pids(self, machine: str) -> list[int]:
        return self.machines[machine].pids_of("flanneld")

    def flannel_leftovers(self, machine: str, *, pods_stay: bool = True) -> list[str]:
        """What `machine` holds now that it did not before flannel came
        (iptables rules, routes, links, addresses, systemd units), leaving
        out, with pods_stay, what the pods still running keep."""
        return self.node_state(machine).gained_since(self.pristine[machine],
                                                     pods_stay=pods_stay)

    def node_state(self, machine: str) -> "NodeState":
        """What an operator would look at to see whether a node is as
        flannel found it: iptables and ip6tables rules per table (counters
        dropped), nft tables but iptables-nft's, routes and addresses of both
        families, links, and the systemd units the machine knows."""
        m = self.machines[machine]
        rules = {}
        for cmd in ("iptables", "ip6tables"):
            out = m.run([f"{cmd}-save"], check=False).stdout
            table = None
            for line in out.splitlines():
                if line.startswith("*"):
                    table = f"{cmd} {line[1:]}"
                elif table and (line.startswith("-A ") or line.startswith(":")):
                    entry = line.split(" [", 1)[0] if line.startswith(":") else line
                    # iptables-nft makes a table and its built-in chains on first
                    # use: a built-in chain that accepts is no trace of anyone
                    if entry.split()[0][1:] in BUILTIN_CHAINS and entry.endswith(" ACCEPT"):
                        continue
                    rules.setdefault(table, []).append(entry)
        # nft tables but the ones iptables-nft keeps its tables in (seen above)
        for line in m.run(["nft", "list", "tables"], check=False).stdout.splitlines():
            words = line.split()
            if len(words) == 3 and words[2] not in IPTABLES_NFT_TABLES:
                rules.setdefault("nft tables", []).append(f"{words[1]} {words[2]}")
        routes = {f"{family} {r.get('dst')} dev {r.get('dev')}"
                  + (f" via {r['gateway']}" if r.get("gateway") else "")
                  for family in ("-4", "-6") for r in m.ip_json(family, "route", "show")}
        addresses = {f"{link['ifname']} {a['local']}/{a['prefixlen']}"
                     for link in m.ip_json("addr", "show")
                     for a in link.get("addr_info", []) if a.get("scope") != "link"}
        units = set()
        for line in m.run(["systemctl", "list-units", "--all", "--no-legend"],
                          check=False).stdout.splitlines():
            if line.split():
                units.add(line.split()[0].lstrip("●*"))
        # enabled (or masked) units: their links under /etc/systemd/system
        for line in m.run(["find", "/etc/systemd/system", "-type", "l"],
                          check=False).stdout.splitlines():
            units.add(f"link {line.strip()}")
        return NodeState(rules={t: tuple(sorted(r)) for t, r in rules.items()},
                         routes=frozenset(routes), links=frozenset(m.links()),
                         addresses=frozenset(addresses), units=frozenset(units))

    def machine_of(self, unit: str) -> str:
        """The name of the machine `unit` runs on."""
        mid = self.controller.unit(unit).get("machine")
        for name, known in self.machine_ids.items():
            if known == mid:
                return name
        raise ClusterError(f"{unit} is on no sandbox machine")

    def unit_kv(self, unit: str) -> dict:
        """The unit's charmhelpers unitdata ($CHARM_DIR/.unit-state.db, read
        as charms.reactive reads it): the reactive flags as
        "reactive.states.<flag>" keys, and the charm's own keys."""
        charm_dir = self.controller.unit(unit)["charm-dir"]
        data = self.machines[self.machine_of(unit)].read_file(f"{charm_dir}/.unit-state.db")
        if not data:
            return {}
        with tempfile.NamedTemporaryFile(suffix=".db") as copy:
            copy.write(data)
            copy.flush()
            conn = sqlite3.connect(copy.name)
            try:
                rows = conn.execute("select key, data from kv").fetchall()
            finally:
                conn.close()
        return {key: json.loads(value) for key, value in rows}

    def etcd_values(self, prefix: str = NETWORK_PREFIX) -> dict[str, str]:
        """Every key under `prefix` in the sandbox etcd, read with etcd3gw from
        inside etcd's namespace."""
        return {key: value for key, (value, _) in self.etcd_entries(prefix).items()}

    def etcd_entries(self, prefix: str = NETWORK_PREFIX) -> dict[str, tuple[str, int]]:
        """Every key under `prefix` with its value and version (the number of
        writes since the key was created)."""
        pki = self.etcd.pki
        host, port = self.etcd.endpoint.rsplit("//", 1)[1].rsplit(":", 1)
        out = run(["ip", "netns", "exec", self.network.netns_for(ETCD), sys.executable,
                   "-c", _ETCD_READ, host.strip("[]"), port, str(pki.ca_cert),
                   str(pki.client_cert), str(pki.client_key), prefix], timeout=30).stdout
        return {key: (value, version) for key, (value, version) in json.loads(out).items()}

    def expire_leases(self, subnet: str = "") -> list[str]:
        """Every node's lease leaves etcd, as when a day passes without
        flanneld renewing it (a lease lives 24 h), in etcd's v2 keyspace
        too; with `subnet` ("10.1.52.0/24"), that lease only: the keys
        deleted ("v2:" before a v2 one)."""
        pki = self.etcd.pki
        host, port = self.etcd.endpoint.rsplit("//", 1)[1].rsplit(":", 1)
        prefix = f"{NETWORK_PREFIX}/subnets/" + subnet.replace("/", "-")
        out = run(["ip", "netns", "exec", self.network.netns_for(ETCD), sys.executable,
                   "-c", _ETCD_DELETE, host.strip("[]"), port, str(pki.ca_cert),
                   str(pki.client_cert), str(pki.client_key), prefix],
                  timeout=30).stdout
        return json.loads(out)

    def compact_etcd(self) -> int:
        """etcd's history compacted at its current revision, after two writes
        no flanneld watches (as other clients of a shared etcd make): the
        revision compacted at."""
        pki = self.etcd.pki
        host, port = self.etcd.endpoint.rsplit("//", 1)[1].rsplit(":", 1)
        out = run(["ip", "netns", "exec", self.network.netns_for(ETCD), sys.executable,
                   "-c", _ETCD_COMPACT, host.strip("[]"), port, str(pki.ca_cert),
                   str(pki.client_cert), str(pki.client_key), "/sandbox/compaction"],
                  timeout=60).stdout
        return int(out.strip())

    def restart_etcd(self) -> None:
        """etcd restarts (its data kept): every client's stream breaks."""
        self.etcd.stop()
        self.etcd.start()

    def rebuild_etcd_empty(self) -> None:
        """etcd loses its data and starts again empty (a disaster recovery
        without a backup); its address and certificates stay."""
        self.etcd.stop()
        shutil.rmtree(self.etcd.data_dir)
        self.etcd.start()

    def settle_watching(self, after_hooks: Callable[[list], None]) -> list:
        """settle(), a few hooks at a time: after each batch (at most one hook
        per machine, as they ran at once) `after_hooks(runs)` looks at the
        model and the machines before anything else runs. Returns every
        hook run."""
        ran: list = []
        while True:
            start = len(self.controller.hook_log)
            batch = self.controller.settle(
                stop_before=lambda entry: len(self.controller.hook_log) > start)
            if not batch:
                return ran
            ran += batch
            after_hooks(batch)

    def etcd_v2_values(self, prefix: str = NETWORK_PREFIX) -> dict[str, tuple]:
        """Every key under `prefix` in etcd's v2 keyspace (flannel v0.11's),
        with its value and the seconds its TTL has left (None: no TTL)."""
        pki = self.etcd.pki
        out = run(["ip", "netns", "exec", self.network.netns_for(ETCD), sys.executable,
                   "-c", _ETCD_V2_READ, self.etcd.endpoint, str(pki.ca_cert),
                   str(pki.client_cert), str(pki.client_key), prefix], timeout=30).stdout
        return {key: (value, ttl) for key, (value, ttl) in json.loads(out).items()}

    def network_config(self) -> Optional[dict]:
        """flannel's network config (<prefix>/config) as stored in etcd."""
        value = self.etcd_values(f"{NETWORK_PREFIX}/config").get(f"{NETWORK_PREFIX}/config")
        return json.loads(value) if value is not None else None

    def status_table(self) -> str:
        lines = [self.controller.format_status(), ""]
        lines.append(f"{'Machine':<8} {'Address':<16} {'Flannel subnet':<18} Pods")
        for name, m in self.machines.items():
            subnet = self.subnet_env(name).get("FLANNEL_SUBNET", "-")
            pods = ", ".join(f"{p.name}={p.address}" for p in self.pods if p.machine is m) or "-"
            lines.append(f"{name:<8} {m.address or '-':<16} {subnet:<18} {pods}")
        return "\n".join(lines)


BUILTIN_CHAINS = ("INPUT", "FORWARD", "OUTPUT", "PREROUTING", "POSTROUTING")
IPTABLES_NFT_TABLES = ("filter", "nat", "mangle", "raw", "security")


@dataclass(frozen=True)
class NodeState:
    """A node's network and init state (Cluster.node_state)."""
    rules: dict        # "iptables nat" -> sorted "-A ..." and ":CHAIN" lines (twice: twice)
    routes: frozenset  # "-4 10.1.2.0/24 dev eth0 via 172.31.254.12"
    links: frozenset
    addresses: frozenset   # "cni0 10.1.52.1/24" (global scope)
    units: frozenset       # systemd units the machine lists

    def gained_since(self, before: "NodeState", *, pods_stay: bool = True) -> list[str]:
        """What this node holds that it did not `before`. With pods_stay,
        what the pods still running keep is left out (docs/explanation/
        what-a-node-keeps.md): their bridge cni0 with its address and route, their veths,
        and their port-mapping chains (portmap's CNI-*)."""
        def kept(text: str) -> bool:
            if not pods_stay:
                return False
            words = text.split()
            return ("cni0" in words or any(w.startswith("veth") for w in words)
                    or any(w.lstrip(":").startswith("CNI-") for w in words))
        out = []
        for table in sorted(set(self.rules) | set(before.rules)):
            extra = Counter(self.rules.get(table, ())) - Counter(before.rules.get(table, ()))
            for rule in sorted(extra.elements()):
                if not kept(rule):
                    out.append(f"{table}: {rule}")
        for kind in ("routes", "links", "addresses", "units"):
            for item in sorted(getattr(self, kind) - getattr(before, kind)):
                if not kept(item):
                    out.append(f"{kind[:-1]} {item}")
        return out


class Pinger:
    """Background pings from a pod's namespace (see Cluster.pinging): one
    process for the whole run (network.ping_loop). An echo counts as lost
    only if no reply ever came (a reply a loaded host delays still counts);
    `longest_outage` is the longest run of echoes in a row that got none."""

    def __init__(self, netns: str, address: str, interval: float = 0.5):
        self.netns, self.address, self.interval = netns, address, interval
        self._sent: list[int] = []
        self._answered: set[int] = set()
        self._proc = None
        self._reader = None

    @property
    def sent(self) -> int:
        return len(self._sent)

    @property
    def answered(self) -> int:
        return len(self._answered)

    @property
    def lost(self) -> int:
        return self.sent - self.answered

    @property
    def longest_outage(self) -> int:
        longest = run_length = 0
        for seq in self._sent:
            run_length = 0 if seq in self._answered else run_length + 1
            longest = max(longest, run_length)
        return longest

    def _read(self) -> None:
        for line in self._proc.stdout:
            kind, _, seq = line.partition(" ")
            if kind == "s":
                self._sent.append(int(seq))
            elif kind == "a":
                self._answered.add(int(seq))

    def start(self) -> None:
        self._proc = ping_loop(self.netns, self.address, self.interval)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        # at least one echo is on its way before the block runs
        wait_for(lambda: self._sent or self._proc.poll() is not None, 30, interval=0.02)
        if not self._sent:
            self.stop()
            raise ClusterError(f"the pinger to {self.address} sent nothing")

    def stop(self) -> None:
        try:
            self._proc.stdin.write("stop\n")
            self._proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join()
        if self._proc.returncode != 0:
            raise ClusterError(f"the pinger to {self.address} failed "
                               f"({self._proc.returncode}): {self._proc.stderr.read()[-500:]}")

    def __str__(self) -> str:
        return (f"{self.answered}/{self.sent} echoes to {self.address} answered"
                f" (longest outage {self.longest_outage})")


def host_leftovers() -> list[str]:
    """What sandbox runs left on this host: flsb- namespaces, sandbox state
    directories, etcd / flanneld / machine-holder processes outside the
    caller's (the host's) network namespace, mounts under the sandbox paths. Whatever
    belongs to another sandbox whose owner is still alive (a concurrent run
    by someone else) is theirs, not a leftover."""
    me = os.getpid()

    def foreign(tag: Optional[str]) -> bool:
        if not tag or not owner_alive(tag):
            return False
        owner = json.loads((state_root() / "owners" / f"{tag}.json").read_text())
        return owner.get("pid") != me

    found = []
    foreign_ns = set()
    for name in list_netns():
        if not name.startswith(PREFIX):
            continue
        if foreign(_tag_of(name)):
            foreign_ns.add(_ns_id(NETNS_DIR / name))
        else:
            found.append(f"network namespace {name}")
    root = state_root()
    if root.is_dir():
        for d in root.iterdir():
            if d.name.startswith(PREFIX) and not foreign(_tag_of(d.name)):
                found.append(f"state directory {d}")
    host_net = _ns_id("/proc/self/ns/net")   # the caller runs in the host's (pid 1 may be hidden)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            comm = open(f"/proc/{entry}/comm").read().strip()
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        net = _ns_id(f"/proc/{entry}/ns/net")
        # containerd-shim-runc-v2's comm is cut to 15 characters
        ours = (comm in ("etcd", "flanneld", "containerd", "containerd-shim")
                or "flsb-holder:" in cmdline)
        if ours and net not in (None, host_net) and net not in foreign_ns:
            found.append(f"process {entry} {cmdline.strip()[:120]}")
    try:
        mounts = open("/proc/self/mountinfo").read().splitlines()
    except OSError:
        mounts = []
    for line in mounts:
        point = line.split()[4]
        base = os.path.basename(point)
        if point.startswith(str(NETNS_DIR / PREFIX)) and foreign(_tag_of(base)):
            continue
        if point.startswith(str(NETNS_DIR / PREFIX)) or point.startswith(str(root) + "/"):
            found.append(f"mount {point}")
    return found + cri_leftovers()
