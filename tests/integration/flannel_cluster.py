"""The test cluster: its bundle, and bounded ways to look at it.

Every wait in here has a deadline; running out of time fails the test with
what was being waited for (and, for pods, `kubectl describe`, which is
where "failed to find plugin ... in path [/opt/cni/bin]" shows up).
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import secrets
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

FLANNEL = "flannel"
CONTROL_PLANE = "kubernetes-control-plane"
WORKER = "kubernetes-worker"
KUBECONFIG = "/root/.kube/config"
CNI_BIN = "/opt/cni/bin"
# What a flannel pod sandbox delegates to; the worker ships these, and no
# remove/add cycle of the flannel relation may take them away.
WORKER_PLUGINS = ("bridge", "host-local", "loopback", "portmap")

_SUBNET = re.compile(r"Flannel subnet (\d{1,3}(?:\.\d{1,3}){3}/\d{1,2})")


def kubernetes_core_bundle(*, charm: Path, resource_name: str,
                           resource_path: Path, k8s_channel: str,
                           base: str, constraints: str, arch: str) -> dict:
    """kubernetes-core's parts from Charmhub with this flannel as the CNI.

    The relations are those of the kubernetes-core bundle (CK 1.28 and
    later: no kubeapi-load-balancer, workers find the API server through
    kube-control), with flannel in calico's place. Two machines: the
    control plane with etcd, the worker with easyrsa.
    """
    machine = {"base": base, "constraints": f"{constraints} arch={arch}"}

    def ck(charm_name: str, **extra) -> dict:
        return {"charm": charm_name, "channel": k8s_channel, **extra}

    return {
        "description": "kubernetes-core with the local flannel charm "
                       "(flannel charm integration tests)",
        "default-base": base,
        "machines": {"0": dict(machine), "1": dict(machine)},
        "applications": {
            "containerd": ck("containerd"),
            "easyrsa": ck("easyrsa", num_units=1, to=["1"]),
            "etcd": ck("etcd", num_units=1, to=["0"],
                       options={"channel": "3.4/stable"}),
            CONTROL_PLANE: ck(CONTROL_PLANE, num_units=1, to=["0"],
                              options={"channel": k8s_channel}),
            WORKER: ck(WORKER, num_units=1, to=["1"], expose=True,
                       options={"channel": k8s_channel}),
            FLANNEL: {
                "charm": str(charm),
                "resources": {resource_name: str(resource_path)},
            },
        },
        "relations": [
            [f"{CONTROL_PLANE}:kube-control", f"{WORKER}:kube-control"],
            [f"{CONTROL_PLANE}:certificates", "easyrsa:client"],
            ["etcd:certificates", "easyrsa:client"],
            [f"{CONTROL_PLANE}:etcd", "etcd:db"],
            [f"{WORKER}:certificates", "easyrsa:client"],
            [f"{FLANNEL}:etcd", "etcd:db"],
            [f"{FLANNEL}:cni", f"{CONTROL_PLANE}:cni"],
            [f"{FLANNEL}:cni", f"{WORKER}:cni"],
            ["containerd:containerd", f"{WORKER}:container-runtime"],
            ["containerd:containerd", f"{CONTROL_PLANE}:container-runtime"],
        ],
    }


def subnet_in_status(message: str) -> ipaddress.IPv4Interface | None:
    """The subnet a flannel unit names in "Flannel subnet 10.1.52.1/24"."""
    found = _SUBNET.search(message or "")
    return ipaddress.IPv4Interface(found.group(1)) if found else None


async def bounded(awaitable, timeout: float, what: str):
    """Await with a deadline; running out of time fails the test."""
    try:
        return await asyncio.wait_for(awaitable, timeout)
    except asyncio.TimeoutError:
        pytest.fail(f"timed out after {timeout:g}s: {what}", False)


async def juju(ops_test, *args: str, timeout: float) -> str:
    """Run the juju CLI against the test model; fail on a non-zero exit."""
    rc, out, err = await bounded(
        ops_test.juju(*args), timeout, "juju " + shlex.join(args))
    if rc != 0:
        pytest.fail(f"juju {shlex.join(args)} failed ({rc}): "
                    f"{(err or out).strip()}", False)
    return out


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Pod:
    name: str
    ip: ipaddress.IPv4Address
    node: str


class Cluster:
    """Commands on the units (what `juju exec` does), kubectl and pods."""

    def __init__(self, model, *, image: str, pod_timeout: float,
                 command_timeout: float = 180):
        self.model = model
        self.image = image
        self.pod_timeout = pod_timeout
        self.command_timeout = command_timeout

    def unit(self, app: str, index: int = 0):
        units = sorted(self.model.applications[app].units,
                       key=lambda u: int(u.name.split("/")[1]))
        if len(units) <= index:
            pytest.fail(f"{app} has no unit #{index}", False)
        return units[index]

    def flannel_unit_on(self, principal: str):
        """The flannel subordinate of a principal unit, or None."""
        app = self.model.applications.get(FLANNEL)
        for unit in (app.units if app else []):
            if unit.principal_unit == principal:
                return unit
        return None

    async def run(self, unit, command: str,
                  timeout: float | None = None) -> Result:
        """A shell command on a unit's machine, as root (juju exec)."""
        timeout = timeout or self.command_timeout
        action = await bounded(
            unit.run(command, timeout=timeout, block=True), timeout + 60,
            f"`{command}` on {unit.name}")
        results = action.results or {}
        code = results.get("return-code", results.get("Code"))
        if code is None:
            code = 0 if action.status == "completed" else 1
        return Result(int(code),
                      results.get("stdout", results.get("Stdout", "")),
                      results.get("stderr", results.get("Stderr", "")))

    async def kubectl(self, *args: str, check: bool = True) -> str:
        command = shlex.join(["kubectl", "--kubeconfig", KUBECONFIG, *args])
        result = await self.run(self.unit(CONTROL_PLANE), command)
        if check and result.code != 0:
            pytest.fail(f"{command} failed ({result.code}): "
                        f"{(result.stderr or result.stdout).strip()}", False)
        return result.stdout

    async def cni_plugins(self, unit) -> set[str]:
        result = await self.run(unit, f"ls -1 {CNI_BIN}")
        if result.code != 0:
            return set()
        return {line.strip() for line in result.stdout.splitlines()
                if line.strip()}

    async def node_of(self, unit) -> str:
        """The kubernetes.io/hostname label of the node on unit's machine."""
        facts = await self.run(unit, "hostname; hostname -I")
        lines = facts.stdout.split("\n", 1)
        hostname = lines[0].strip()
        addresses = set(lines[1].split()) if len(lines) > 1 else set()
        nodes = json.loads(await self.kubectl("get", "nodes", "-o", "json"))
        for node in nodes.get("items", []):
            meta = node.get("metadata", {})
            label = meta.get("labels", {}).get(
                "kubernetes.io/hostname", meta.get("name", ""))
            known = {meta.get("name"), label}
            known.update(a.get("address") for a in
                         node.get("status", {}).get("addresses", []))
            if hostname in known or addresses & known:
                return label
        pytest.fail(f"no Kubernetes node for {unit.name} ({hostname}, "
                    f"{sorted(addresses)})", False)

    async def start_pod(self, purpose: str, node: str) -> Pod:
        """A busybox pod pinned to node; returns once it is Running."""
        name = f"flannel-it-{purpose}-{secrets.token_hex(3)}"
        overrides = {"apiVersion": "v1",
                     "spec": {"nodeSelector":
                              {"kubernetes.io/hostname": node}}}
        await self.kubectl(
            "run", name, f"--image={self.image}", "--restart=Never",
            "--overrides=" + json.dumps(overrides), "--",
            "sleep", "3600")
        deadline = time.monotonic() + self.pod_timeout
        phase = "unknown"
        while time.monotonic() < deadline:
            pod = json.loads(await self.kubectl(
                "get", "pod", name, "-o", "json"))
            status = pod.get("status", {})
            phase = status.get("phase", "unknown")
            if phase == "Running" and status.get("podIP"):
                return Pod(name, ipaddress.IPv4Address(status["podIP"]),
                           pod.get("spec", {}).get("nodeName", node))
            if phase in ("Failed", "Succeeded"):
                break
            await asyncio.sleep(5)
        describe = await self.kubectl("describe", "pod", name, check=False)
        pytest.fail(f"pod {name} is {phase}, not Running, after "
                    f"{self.pod_timeout:g}s:\n{describe[-3000:]}", False)

    async def delete_pod(self, name: str) -> None:
        await self.kubectl("delete", "pod", name, "--wait=false",
                           "--ignore-not-found", check=False)
