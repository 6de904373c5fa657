"""Fixtures for the emulated Juju's tests: a throwaway bash charm whose hooks
run scripts the test writes (at any time) into a scripts directory."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
import yaml

from sandbox.juju import Controller, EtcdApp, KubernetesWorkerApp, LocalExecutor

BASE_HOOKS = ("install", "start", "stop", "remove", "config-changed", "leader-elected",
              "leader-settings-changed", "upgrade-charm", "update-status")
REL_KINDS = ("created", "joined", "changed", "departed", "broken")

SUB_META = {
    "name": "testsub", "summary": "throwaway subordinate", "description": "test",
    "subordinate": True,
    "requires": {"etcd": {"interface": "etcd"},
                 "cni": {"interface": "kubernetes-cni", "scope": "container"}},
    "resources": {"flannel-amd64": {"type": "file", "filename": "flannel.tar.gz",
                                    "description": "x"},
                  "flannel-arm64": {"type": "file", "filename": "flannel.tar.gz",
                                    "description": "x"}},
}
PRINCIPAL_META = {
    "name": "testprincipal", "summary": "throwaway principal", "description": "test",
    "provides": {"cni": {"interface": "kubernetes-cni", "scope": "container"}},
    "requires": {"db": {"interface": "etcd"}},
    "extra-bindings": {"public": None},
}
CONFIG = {"options": {
    "cidr": {"type": "string", "default": "10.1.0.0/16", "description": "x"},
    "subnet-len": {"type": "int", "default": 24, "description": "x"},
    "debug": {"type": "boolean", "default": False, "description": "x"},
    "iface": {"type": "string", "default": "", "description": "x"},
    "unset": {"type": "string", "description": "no default"},
}}


class World:
    """A controller, local machines and a scripts dir the charm's hooks read."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.scripts = tmp_path / "scripts"
        self.scripts.mkdir()
        self.out = tmp_path / "out"
        self.out.mkdir()
        self.ctl = Controller(tmp_path / "state")
        self._n = 0

    def add_machine(self) -> str:
        n = self._n
        self._n += 1
        return self.ctl.add_machine(LocalExecutor(self.tmp / f"machine{n}"),
                                    address=f"10.99.0.{10 + n}", cidr="10.99.0.0/24",
                                    interface="eth0", mac=f"02:00:0a:63:00:{10 + n:02x}")

    def script(self, hook: str, body: str) -> None:
        """bash run by hook `hook` (or by every hook, hook='any')."""
        p = self.scripts / hook
        p.write_text("set -e\n" + textwrap.dedent(body))

    def charm(self, name="testsub", meta=None, config=CONFIG, extra_files=None,
              principal=False) -> Path:
        d = self.tmp / "charms" / name
        (d / "hooks").mkdir(parents=True)
        meta = dict(meta or (PRINCIPAL_META if principal else SUB_META))
        (d / "metadata.yaml").write_text(yaml.safe_dump(meta))
        if config is not None:
            (d / "config.yaml").write_text(yaml.safe_dump(config))
        eps = []
        for role in ("provides", "requires", "peers"):
            eps += list((meta.get(role) or {}).keys())
        hooks = list(BASE_HOOKS) + [f"{ep}-relation-{k}" for ep in eps for k in REL_KINDS]
        for h in hooks:
            p = d / "hooks" / h
            p.write_text(textwrap.dedent(f"""\
                #!/bin/bash
                hook=${{0##*/}}
                s={self.scripts}
                if [ -f "$s/$hook" ]; then exec /bin/bash "$s/$hook"; fi
                if [ -f "$s/any" ]; then exec /bin/bash "$s/any"; fi
                exit 0
                """))
            p.chmod(0o755)
        for rel, text in (extra_files or {}).items():
            p = d / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        return d

    def read_out(self, name: str) -> str:
        return (self.out / name).read_text()

    def host(self, unit: str, path: str) -> Path:
        """Host path of a unit's file (LocalExecutor: the path itself)."""
        rec = self.ctl.unit(unit)
        if not path.startswith("/"):
            path = os.path.join(rec["agent-dir"], path)
        return Path(self.ctl.executor_for(unit).host_path(path))


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


@pytest.fixture
def cluster(world):
    """etcd (emulated, no machine), kubernetes-worker (emulated) on one
    machine, the throwaway subordinate deployed as "flannel" and related to
    etcd; nothing related to the worker yet.  Settled."""
    m0 = world.add_machine()
    etcd = EtcdApp("https://10.99.0.2:2379", version="3.4.22", client_ca="CA PEM",
                   client_cert="CERT PEM", client_key="KEY PEM", address="10.99.0.2")
    worker = KubernetesWorkerApp(plugin_dir=str(world.tmp / "fake-cni"))
    (world.tmp / "fake-cni").mkdir()
    for p in worker.plugins:
        (world.tmp / "fake-cni" / p).write_text(f"#!/bin/sh\necho {p}\n")
    world.ctl.deploy(etcd)
    world.ctl.deploy(worker, to=[m0])
    charm = world.charm()
    world.ctl.deploy("flannel", charm)
    world.ctl.add_relation("flannel:etcd", "etcd:db")
    world.ctl.settle()
    world.etcd = etcd
    world.worker = worker
    world.m0 = m0
    return world
