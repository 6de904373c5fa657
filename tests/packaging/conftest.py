"""Fixtures for the build, bootstrap and interface tests.

- ``reactive``: charms.reactive imported on this (Debian) host. charmhelpers
  refuses to import where /etc/os-release does not look like Ubuntu, so its
  platform probe is answered with "ubuntu" for this test process only.
- ``juju``: a minimal in-process stand-in for the hook tools the Endpoint
  machinery uses (relation-ids/-list/-get/-set, hook and unit names), with
  the interface layers installed as $CHARM_DIR/hooks/relations/<interface>
  exactly as charm-build lays them out.
- ``built_charm``: the built charm dir: $FLANNEL_BUILT_CHARM if set (tox -e
  build sets it after running scripts/build-charm), else a fresh
  scripts/build-charm into a temporary dir (minutes on a cold cache).
"""

import importlib
import os
import shutil
import subprocess
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


class FakeJuju:
    """The model as one unit's hook tools see it, and a way to run hooks."""

    def __init__(self, unit="flannel/0"):
        self.unit = unit
        self.relations = {}  # rid -> {"endpoint", "units": {name: data}, "local": data}
        self.hook = "install"
        self.rid = None
        self.remote = None
        self.relation_sets = []  # (rid, settings) as relation-set got them
        self.logged = []
        self._next_id = 1

    # --- model changes ------------------------------------------------------
    def relate(self, endpoint, app, units=1):
        rid = "{}:{}".format(endpoint, self._next_id)
        self._next_id += 1
        self.relations[rid] = {
            "endpoint": endpoint,
            "units": {"{}/{}".format(app, i): {} for i in range(units)},
            "local": {},
        }
        return rid

    def remote_units(self, rid):
        return sorted(self.relations[rid]["units"])

    # --- hook tools ---------------------------------------------------------
    def relation_ids(self, reltype=None):
        return sorted(r for r, rel in self.relations.items()
                      if reltype is None or rel["endpoint"] == reltype)

    def related_units(self, relid=None):
        rel = self.relations.get(relid or self.rid)
        return sorted(rel["units"]) if rel else []

    def relation_get(self, attribute=None, unit=None, rid=None, app=None):
        rel = self.relations.get(rid or self.rid)
        if rel is None:
            return None
        unit = unit or self.remote
        data = dict(rel["local"] if unit == self.unit else rel["units"].get(unit, {}))
        return data.get(attribute) if attribute else data

    def relation_set(self, relation_id=None, relation_settings=None, app=False, **kwargs):
        settings = dict(relation_settings or {}, **kwargs)
        rid = relation_id or self.rid
        self.relation_sets.append((rid, settings))
        local = self.relations[rid]["local"]
        for key, value in settings.items():
            if value in (None, ""):
                local.pop(key, None)
            else:
                local[key] = str(value)

    def install(self, monkeypatch, hookenv):
        monkeypatch.setattr(hookenv, "hook_name", lambda: self.hook)
        monkeypatch.setattr(hookenv, "local_unit", lambda: self.unit)
        monkeypatch.setattr(hookenv, "remote_unit", lambda: self.remote)
        monkeypatch.setattr(hookenv, "relation_id", lambda *a, **k: self.rid)
        monkeypatch.setattr(hookenv, "relation_type",
                            lambda: self.rid.split(":")[0] if self.rid else None)
        monkeypatch.setattr(hookenv, "relation_ids", self.relation_ids)
        monkeypatch.setattr(hookenv, "related_units", self.related_units)
        monkeypatch.setattr(hookenv, "relation_get", self.relation_get)
        monkeypatch.setattr(hookenv, "relation_set", self.relation_set)
        monkeypatch.setattr(hookenv, "log", lambda msg, level=None: self.logged.append(msg))

    # --- hooks --------------------------------------------------------------
    def run(self, hook, rid=None, remote=None, data=None, on_start=None):
        """Run ``hook`` as the framework would up to (not including) dispatch.

        ``data`` updates ``remote``'s databag first (a -changed hook); a
        -departed hook drops ``remote`` from relation-list, as Juju does;
        -broken leaves the relation with no units. ``on_start(endpoints)``
        runs where handlers would, before relation data is flushed.
        """
        from charmhelpers.core import hookenv, unitdata
        from charms.reactive.endpoints import Endpoint

        self.hook, self.rid, self.remote = hook, rid, remote
        if rid and data is not None:
            self.relations[rid]["units"].setdefault(remote, {}).update(data)
        if rid and hook.endswith("-relation-joined"):
            self.relations[rid]["units"].setdefault(remote, {})
        if rid and hook.endswith("-relation-departed"):
            self.relations[rid]["units"].pop(remote, None)
        if rid and hook.endswith("-relation-broken"):
            self.relations[rid]["units"].clear()
        hookenv.cache.clear()
        Endpoint._endpoints.clear()
        Endpoint._startup()
        if on_start:
            on_start(Endpoint._endpoints)
        hookenv._run_atexit()
        unitdata.kv().flush()
        if rid and hook.endswith("-relation-broken"):
            del self.relations[rid]
        return Endpoint._endpoints


@pytest.fixture
def juju(reactive, charm_dir, tmp_path, monkeypatch):
    from charmhelpers.core import hookenv, unitdata

    monkeypatch.setenv("CHARM_DIR", str(charm_dir))
    monkeypatch.setenv("UNIT_STATE_DB", str(tmp_path / "unit-state.db"))
    monkeypatch.setenv("JUJU_UNIT_NAME", "flannel/0")
    monkeypatch.setattr(unitdata, "_KV", None)
    for path in (str(charm_dir), str(charm_dir / "hooks")):
        if path not in sys.path:
            monkeypatch.syspath_prepend(path)
    fake = FakeJuju()
    fake.install(monkeypatch, hookenv)
    yield fake
    hookenv.cache.clear()


@pytest.fixture
def flag(reactive):
    return reactive.is_flag_set


@pytest.fixture(scope="session")
def built_charm(tmp_path_factory):
    """The built charm dir (OUTDIR/flannel); builds one if none was given."""
    given = os.environ.get("FLANNEL_BUILT_CHARM")
    if given:
        path = Path(given)
        if not (path / "metadata.yaml").is_file():
            pytest.fail("FLANNEL_BUILT_CHARM={} is not a built charm dir".format(given))
        return path
    cache = Path(os.environ.get("FLANNEL_CACHE", "/var/cache/flannel-charm"))
    tools = cache / "charm-tools" / "bin" / "charm-build"
    if not (tools.exists() or shutil.which("charm-build")):
        pytest.skip("charm-tools is not installed (scripts/setup-host)")
    outdir = tmp_path_factory.mktemp("build")
    run = subprocess.run([str(REPO / "scripts" / "build-charm"), str(outdir)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        pytest.fail("scripts/build-charm failed:\n" + run.stdout[-4000:])
    return outdir / "flannel"
