"""Fixtures for the build, bootstrap and interface tests.

- ``reactive``: charms.reactive imported on this (Debian) host. charmhelpers
  refuses to import where /etc/os-release does not look like Ubuntu, so its
  platform probe is answered with "ubuntu" for this test process only.
- ``juju``: a flannel unit in the sandbox's emulated Juju (sandbox.juju):
  hooks in Juju's order, run in this process through charms.reactive's
  Endpoint machinery with the sandbox's own hook tools, the interface
  layers installed as $CHARM_DIR/hooks/relations/<interface> exactly as
  charm-build lays them out.
- ``built_charm`` (tests/conftest.py): the built charm dir: $FLANNEL_BUILT_CHARM
  if set (tox -e build sets it after running scripts/build-charm), else a
  fresh scripts/build-charm into a temporary dir (minutes on a cold cache).
"""

import importlib
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INTERFACES = ("etcd", "kubernetes-cni", "nrpe-external-master")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: takes minutes (builds the charm, installs its wheelhouse)")
    config.addinivalue_line("markers", "build: needs charm-tools and a built charm")


def _import_reactive():
    try:
        import charmhelpers.osplatform as osplatform
    except ImportError:
        pytest.skip("charmhelpers is not installed (requirements-dev.txt)")
    try:
        osplatform.get_platform()
    except RuntimeError:
        # Debian: pretend to be Ubuntu, before charmhelpers.core.host looks.
        osplatform.get_platform = lambda: "ubuntu"
    return importlib.import_module("charms.reactive")


@pytest.fixture(scope="session")
def reactive():
    return _import_reactive()


@pytest.fixture(scope="session")
def charm_dir(tmp_path_factory, reactive):
    """A charm dir with metadata.yaml and the interfaces where charm-build puts them."""
    root = tmp_path_factory.mktemp("charm") / "charm"
    relations = root / "hooks" / "relations"
    relations.mkdir(parents=True)
    (relations / "__init__.py").touch()
    for name in INTERFACES:
        shutil.copytree(REPO / "interfaces" / name, relations / name)
        (relations / name / "__init__.py").touch()
    shutil.copy(REPO / "metadata.yaml", root / "metadata.yaml")
    return root


class InProcessFlannel:
    """flannel's interface layers as charms.reactive runs them, in this
    process, as an application of the sandbox's emulated Juju: each hook the
    controller dispatches to a flannel unit runs the Endpoint machinery with
    the environment and hook tools (sandbox/juju/hooktools.py) a unit's hook
    gets; ``during(endpoints)`` runs where handlers would."""

    name = "flannel"
    charm_name = "flannel"
    subordinate = True
    version = ""
    address = None
    threadsafe = False  # swaps os.environ; charmhelpers' sqlite is per thread

    def __init__(self, charm_dir):
        import yaml
        from sandbox.juju.operations import endpoints_from_metadata

        self.charm_dir = charm_dir
        meta = yaml.safe_load((charm_dir / "metadata.yaml").read_text())
        self.endpoints = {k: v for k, v in endpoints_from_metadata(meta).items()
                          if k != "juju-info"}
        self.during = None
        self.last = {}      # the Endpoint objects of the last hook
        self.hooks = []

    def dispatch(self, ctx):
        from charmhelpers.core import hookenv, unitdata
        from charms.reactive.endpoints import Endpoint

        self.hooks.append(ctx.hook)
        env = ctx.hook_env(self.charm_dir)
        saved = dict(os.environ)
        os.environ.update(env)
        try:
            hookenv.cache.clear()
            Endpoint._endpoints.clear()
            Endpoint._startup()
            if self.during:
                self.during(Endpoint._endpoints)
            hookenv._run_atexit()
            unitdata.kv().flush()
            self.last = dict(Endpoint._endpoints)
        finally:
            os.environ.clear()
            os.environ.update(saved)


class Publisher:
    """A remote application that publishes what the test gives it, from its
    units' own hooks (config-changed), on every relation of its endpoint."""

    charm_name = None
    subordinate = False
    version = ""
    address = None

    def __init__(self, name, endpoint, interface, scope="global"):
        from sandbox.juju import EmulatedApp

        self.name = self.charm_name = name
        self.endpoint = endpoint
        self.endpoints = {endpoint: {"interface": interface, "role": "provides",
                                     "scope": scope}}
        self.pending = {}
        self._base = EmulatedApp(name)

    def attach(self, controller):
        self._base.attach(controller)

    def dispatch(self, ctx):
        if ctx.hook == "config-changed" and ctx.unit in self.pending:
            values = self.pending.pop(ctx.unit)
            for rid in ctx.relation_ids(self.endpoint):
                ctx.relation_set(rid=rid, **values)


class SandboxJuju:
    """A flannel unit in the sandbox's emulated model (sandbox.juju), on a
    local machine under a kubernetes-worker, related to remote applications
    whose units publish what the test gives them.  Every hook runs in Juju's
    order, through the same hook tools the sandbox machines use."""

    def __init__(self, tmp_path, charm_dir):
        from sandbox.juju import Controller, LocalExecutor

        self.ctl = Controller(tmp_path / "model")
        self.machine = self.ctl.add_machine(LocalExecutor(tmp_path / "m0"), address="10.0.0.10",
                                            cidr="10.0.0.0/24", interface="eth0")
        self.charm = InProcessFlannel(charm_dir)
        self.ctl.deploy(self.charm)
        self.apps = {}

    @property
    def unit(self):
        alive = [u for u in self.ctl.units("flannel") if self.ctl.unit(u)["life"] == "alive"]
        return alive[-1] if alive else None

    @property
    def endpoints(self):
        return self.charm.last

    def relate(self, endpoint, app, units=1):
        """Relate flannel:endpoint to a new application `app` (a principal
        on the machine for cni; else, once flannel has a unit, anywhere);
        settle; returns the relation id."""
        from sandbox.juju import NrpeApp

        spec = self.charm.endpoints[endpoint]
        if endpoint == "cni":
            remote = Publisher(app, "cni", spec["interface"], scope="container")
            self.ctl.deploy(remote, to=[self.machine] * units)
        else:
            if self.unit is None:
                self.relate("cni", "kubernetes-worker")
            if endpoint == "nrpe-external-master":
                remote = NrpeApp(app)
                self.ctl.deploy(remote)
                principal = self.ctl.unit(self.unit)["principal"].split("/")[0]
                self.ctl.add_relation(f"{app}:general-info", f"{principal}:juju-info")
            else:
                remote = Publisher(app, "db", spec["interface"])
                self.ctl.deploy(remote, to=[self.machine] * units)
        self.apps[app] = remote
        ep = "nrpe-external-master" if endpoint == "nrpe-external-master" else remote.endpoint
        rid = self.ctl.add_relation(f"flannel:{endpoint}", f"{app}:{ep}")
        self.settle()
        return rid

    def publish(self, unit, **values):
        """`unit` sets relation data in one of its hooks (config-changed);
        flannel sees -relation-changed. Returns flannel's endpoints."""
        self.apps[unit.split("/")[0]].pending[unit] = values
        self.ctl.fire(unit, "config-changed")
        self.settle()
        return self.endpoints

    def depart(self, unit):
        """The remote unit goes away (`juju remove-unit`)."""
        self.ctl.remove_unit(unit)
        self.settle()

    def unrelate(self, rid):
        rel = self.ctl.model().relation(rid)
        a, b = (f"{e['app']}:{e['name']}" for e in rel["endpoints"])
        self.ctl.remove_relation(a, b)
        self.settle()

    def fire(self, hook):
        self.ctl.fire(self.unit, hook)
        self.settle()
        return self.endpoints

    def settle(self):
        self.ctl.settle()
        failed = [r for r in self.ctl.hook_log if not r.ok]
        assert not failed, failed[0].stderr_tail

    def local_data(self, rid):
        return self.ctl.relation_data(rid, self.unit)

    def relation_sets(self, rid=None):
        """relation-set calls flannel's hooks made (on relation rid)."""
        def on(call):
            return rid is None or any(a == str(rid) or a.endswith(f":{rid}")
                                      for a in call["args"])
        return [c for c in self.ctl.tool_calls() if c["tool"] == "relation-set"
                and (c["unit"] or "").startswith("flannel/") and on(c)]

    def log(self):
        return "".join(self.ctl.unit_log(u) for u in self.ctl.units("flannel"))


@pytest.fixture
def juju(reactive, charm_dir, tmp_path, monkeypatch):
    from charmhelpers.core import hookenv, unitdata

    monkeypatch.setenv("UNIT_STATE_DB", str(tmp_path / "unit-state.db"))
    monkeypatch.setattr(unitdata, "_KV", None)
    for path in (str(charm_dir), str(charm_dir / "hooks")):
        if path not in sys.path:
            monkeypatch.syspath_prepend(path)
    model = SandboxJuju(tmp_path, charm_dir)
    yield model
    model.ctl.close()
    hookenv.cache.clear()


@pytest.fixture
def flag(reactive):
    return reactive.is_flag_set
