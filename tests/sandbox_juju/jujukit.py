"""Helpers for the emulated Juju's tests: World (a controller, local machines
and a throwaway bash charm whose hooks run scripts the test writes, at any
time, into a scripts directory) and a throwaway charms.reactive charm."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import yaml

from sandbox.juju import Controller, LocalExecutor

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

    def __init__(self, tmp_path: Path, **controller):
        self.tmp = tmp_path
        self.scripts = tmp_path / "scripts"
        self.scripts.mkdir()
        self.out = tmp_path / "out"
        self.out.mkdir()
        self.ctl = Controller(tmp_path / "state", **controller)
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

    def pack(self, charm: Path, bases=(("ubuntu", "22.04"),)) -> Path:
        """`charmcraft pack`'s output for `charm`: a zip holding its files and
        a manifest.yaml with `bases` (none: a charm of the series era)."""
        import zipfile
        if bases:
            (charm / "manifest.yaml").write_text(yaml.safe_dump({"bases": [
                {"name": name, "channel": channel, "architectures": ["amd64"]}
                for name, channel in bases]}))
        packed = charm.with_suffix(".charm")
        with zipfile.ZipFile(packed, "w") as out:
            for path in sorted(charm.rglob("*")):
                if path.is_file():
                    info = zipfile.ZipInfo(str(path.relative_to(charm)))
                    info.external_attr = (path.stat().st_mode & 0o7777) << 16
                    out.writestr(info, path.read_bytes())
        return packed

    def read_out(self, name: str) -> str:
        return (self.out / name).read_text()

    def host(self, unit: str, path: str) -> Path:
        """Host path of a unit's file (LocalExecutor: the path itself)."""
        rec = self.ctl.unit(unit)
        if not path.startswith("/"):
            path = os.path.join(rec["agent-dir"], path)
        return Path(self.ctl.executor_for(unit).host_path(path))


# -- a charms.reactive charm ----------------------------------------------------

CANDIDATES = ("/var/cache/flannel-charm/venv/bin/python", "/tmp/venv/bin/python")


def reactive_python():
    for py in CANDIDATES:
        if os.access(py, os.X_OK) and subprocess.run(
                [py, "-c", "import importlib.util, sys; "
                           "sys.exit(importlib.util.find_spec('charms.reactive') is None)"],
                capture_output=True).returncode == 0:
            return py
    return None


REACTIVE_PYTHON = PY = reactive_python()

HANDLERS = '''
from charms.reactive import when, when_not, set_flag, clear_flag, endpoint_from_flag, hook
from charmhelpers.core import hookenv


@when_not('test.installed')
def install():
    hookenv.status_set('maintenance', 'installing')
    hookenv.application_version_set('1.2.3')
    set_flag('test.installed')


@when('endpoint.etcd.joined')
@when_not('test.etcd.available')
def etcd_joined():
    ep = endpoint_from_flag('endpoint.etcd.joined')
    if ep.all_joined_units.received_raw.get('connection_string'):
        set_flag('test.etcd.available')


@when('endpoint.cni.joined', 'test.etcd.available')
@when_not('test.cni.published')
def publish():
    ep = endpoint_from_flag('endpoint.cni.joined')
    ep.publish(hookenv.config()['cidr'], '10-flannel.conflist')
    set_flag('test.cni.published')


@when('test.cni.published')
def ready():
    address = hookenv.network_get('cni')['ingress-addresses'][0]
    hookenv.status_set('active', 'ready on ' + address)


@hook('stop')
def stop():
    clear_flag('test.installed')
    clear_flag('test.cni.published')
'''

CNI_REQUIRES = '''
from charms.reactive import Endpoint


class CNIRequires(Endpoint):
    def publish(self, cidr, conf):
        for relation in self.relations:
            relation.to_publish_raw.update({'cidr': cidr, 'cni-conf-file': conf})
'''

ETCD_REQUIRES = '''
from charms.reactive import Endpoint


class EtcdRequires(Endpoint):
    pass
'''


def reactive_charm(world):
    hook = textwrap.dedent(f"""\
        #!{PY}
        import sys
        sys.path.append('lib')
        from charms.reactive import main
        main()
        """)
    files = {
        "reactive/test.py": HANDLERS,
        "hooks/relations/__init__.py": "",
        "hooks/relations/kubernetes-cni/__init__.py": "",
        "hooks/relations/kubernetes-cni/requires.py": CNI_REQUIRES,
        "hooks/relations/etcd/__init__.py": "",
        "hooks/relations/etcd/requires.py": ETCD_REQUIRES,
    }
    charm = world.charm("reactive", extra_files=files)
    for p in (charm / "hooks").iterdir():
        if p.is_file() and p.name != "__init__.py":
            p.write_text(hook)
            p.chmod(0o755)
    return charm
