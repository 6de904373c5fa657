"""The emulated Juju controller: model operations, the hook queue, status.

Operations (deploy, add_relation, remove_relation, config, upgrade_charm,
attach_resource, update_status, remove_unit, resolve) only change the model
and queue work; settle() then runs queued hooks until the model is quiescent.
Hooks run in Juju's order (see HOOK ORDER below); a hook that fails puts its
unit in error, and that unit runs nothing more until resolve(unit).

HOOK ORDER (Juju 3.x, as documented for charm authors)
- new unit: install, <ep>-relation-created for every relation its
  application already has, leader-elected (leader) or leader-settings-changed,
  config-changed, start; then it enters each relation's scope: for every
  remote unit in scope, <ep>-relation-joined then <ep>-relation-changed, and
  the remote unit gets the same pair about the new unit.
- add_relation between running units: <ep>-relation-created on every unit,
  then joined/changed pairs as units enter scope.  A container-scoped
  relation to a subordinate application creates one subordinate unit per
  principal unit (when the principal enters scope); that unit then runs the
  new-unit sequence above.
- relation data: a committed change to a unit's (or, by the leader, the
  application's) databag queues <ep>-relation-changed on every remote unit
  that has joined it.  relation-set takes effect when the hook exits 0; a
  failed hook's settings are discarded.
- remove_relation: on each side, <ep>-relation-departed for every remote unit
  it had joined, then <ep>-relation-broken.  A subordinate whose container
  relation goes is destroyed: departed (each remote unit) + broken for each
  of its other relations (the remote units see departed), then stop, remove;
  its agent and tools directories are deleted.
- config(): config-changed on every unit; upgrade_charm()/attach_resource():
  upgrade-charm then config-changed; leader-set: leader-settings-changed on
  the other units; update_status(): update-status on every started unit.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
import uuid

from . import model as _model
from .agent import HookRun, ToolsInstaller, UnitAgent, default_python
from .executors import DEFAULT_TIMEOUT, MachineExecutor, as_executor
from .model import Model, ModelError

JUJU_VERSION = "3.6.4"
RELATION_HOOKS = ("created", "joined", "changed", "departed", "broken")


class SettleError(RuntimeError):
    """settle() ran out of its hook budget or time (a hook loop?)."""


def _yaml_load(path):
    import yaml  # controller side only
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def split_endpoint(spec: str):
    app, _, ep = spec.partition(":")
    return app, (ep or None)


class Controller:
    """One emulated model.

    state_dir holds state.json (+ .lock), hooks.jsonl, tools.jsonl, logs/,
    run/ and the staging copy of the hook tools; it must be visible (same
    path) inside every machine whose executor runs hooks."""

    def __init__(self, state_dir, model_name="sandbox", *, python=None,
                 juju_version=JUJU_VERSION, hook_timeout=DEFAULT_TIMEOUT,
                 extra_env=None, arch="amd64"):
        self.state_dir = os.path.abspath(os.fspath(state_dir))
        os.makedirs(self.state_dir, exist_ok=True)
        self.logs_dir = os.path.join(self.state_dir, "logs")
        os.makedirs(self.logs_dir, exist_ok=True)
        self.state = _model.StateFile(os.path.join(self.state_dir, "state.json"))
        self.hooks_log_path = os.path.join(self.state_dir, "hooks.jsonl")
        self.tools_log_path = os.path.join(self.state_dir, "tools.jsonl")
        for p in (self.hooks_log_path, self.tools_log_path):
            open(p, "w").close()
        self.state.create(_model.new_state(model_name, str(uuid.uuid4()), juju_version,
                                           self.logs_dir, self.tools_log_path))
        self.python = python or default_python()
        self.tools = ToolsInstaller(os.path.join(self.state_dir, "tools"), self.python,
                                    juju_version, arch=arch)
        self.tools.build()
        self.agent = UnitAgent(self.state, os.path.join(self.state_dir, "run"), self.tools,
                               timeout=hook_timeout, extra_env=extra_env)
        self.executors: dict[str, object] = {}
        self.emulated: dict[str, object] = {}
        self.queue: list[dict] = []
        self.hook_log: list[HookRun] = []
        self._seq = itertools.count(1)
        self._manifests: dict[str, list[str]] = {}
        self._machines_with_tools: set[str] = set()

    # ======================================================================
    # reading the model
    # ======================================================================
    def model(self) -> Model:
        return Model(self.state.read())

    def unit(self, name: str) -> dict:
        return self.model().unit(name)

    def units(self, app: str) -> list[str]:
        return self.model().units_of(app)

    def relation_id(self, a: str, b: str) -> int:
        return self._find_relation(self.model(), a, b)["id"]

    def relation_data(self, rid, unit_or_app: str) -> dict:
        rel = self.model().relation(rid)
        if "/" in unit_or_app:
            return dict(rel["unit-data"].get(unit_or_app, {}))
        return dict(rel["app-data"].get(unit_or_app, {}))

    def config_of(self, app: str) -> dict:
        return self.model().config(app)

    def executor_for(self, unit: str):
        mid = self.unit(unit).get("machine")
        return self.executors.get(str(mid)) if mid is not None else None

    def read_unit_file(self, unit: str, path: str) -> bytes:
        """Read a file as the unit's machine sees it (path may be relative to
        the unit's agent dir)."""
        rec = self.unit(unit)
        if not path.startswith("/"):
            path = os.path.join(rec["agent-dir"], path)
        return self.agent.read_file(self.executor_for(unit), path)

    def hooks(self, unit: str | None = None, *, include_skipped=True) -> list[str]:
        """Names of hooks dispatched so far (for one unit, or all as 'unit:hook')."""
        out = []
        for r in self.hook_log:
            if not include_skipped and r.skipped:
                continue
            if unit is None:
                out.append(f"{r.unit}:{r.hook}")
            elif r.unit == unit:
                out.append(r.hook)
        return out

    def tool_calls(self, unit: str | None = None) -> list[dict]:
        out = []
        with open(self.tools_log_path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    e = json.loads(line)
                    if unit is None or e.get("unit") == unit:
                        out.append(e)
        return out

    def unit_log(self, unit: str) -> str:
        path = self.unit(unit).get("log-file") if self.model().has_unit(unit) else \
            os.path.join(self.logs_dir, _model.unit_tag(unit) + ".log")
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    # ======================================================================
    # machines
    # ======================================================================
    def add_machine(self, executor, *, address=None, cidr=None, interface="eth0",
                    mac=None, hostname=None, name=None) -> str:
        """Register a machine (an executor, or a sandbox Machine) with its
        network binding; returns its Juju machine id ("0", "1", ...)."""
        ex = as_executor(executor)
        with self.state.transaction() as data:
            mid = str(data["next-machine-id"])
            data["next-machine-id"] += 1
            data["machines"][mid] = {
                "id": mid, "name": name or f"machine-{mid}", "address": address,
                "cidr": cidr, "interface": interface, "mac": mac,
                "hostname": hostname or name or f"juju-machine-{mid}",
                "executor": repr(ex), "since": _now(),
            }
        self.executors[mid] = ex
        return mid

    def add_sandbox_machine(self, machine) -> str:
        """Register a started sandbox.machine.Machine: its eth0 address,
        interface, the test network's subnet and the link's MAC address."""
        mac = None
        try:
            links = machine.ip_json("link", "show", "dev", machine.iface)
            mac = links[0].get("address") if links else None
        except Exception:  # noqa: BLE001  (the MAC is cosmetic)
            mac = None
        subnet = getattr(getattr(machine, "network", None), "subnet", None)
        return self.add_machine(MachineExecutor(machine), address=machine.address,
                                interface=machine.iface, cidr=str(subnet) if subnet else None,
                                mac=mac, hostname=machine.name, name=machine.name)

    # ======================================================================
    # applications
    # ======================================================================
    def deploy(self, app, charm_dir=None, *, config=None, resources=None, to=None,
               num_units=None, address=None) -> str:
        """Deploy a charm directory as application `app` (principal: one unit
        per machine in `to`; subordinate: no units until related), or an
        emulated application object (see sandbox.juju.apps)."""
        if not isinstance(app, str):
            return self._deploy_emulated(app, to=to, address=address)
        if charm_dir is None:
            raise ModelError("deploy needs a charm directory")
        charm_dir = os.path.abspath(os.fspath(charm_dir))
        meta = _yaml_load(os.path.join(charm_dir, "metadata.yaml"))
        cfg_path = os.path.join(charm_dir, "config.yaml")
        options = (_yaml_load(cfg_path).get("options") or {}) if os.path.exists(cfg_path) else {}
        rec = {
            "name": app, "kind": "charm", "charm-dir": charm_dir,
            "charm-name": meta.get("name", app), "charm-revision": 0,
            "subordinate": bool(meta.get("subordinate", False)),
            "endpoints": endpoints_from_metadata(meta),
            "extra-bindings": sorted((meta.get("extra-bindings") or {}).keys()),
            "config-options": {k: {"type": (v or {}).get("type", "string"),
                                   "default": (v or {}).get("default")}
                               for k, v in options.items()},
            "config": {}, "resources": {},
            "resource-meta": {k: {"type": (v or {}).get("type", "file"),
                                  "filename": (v or {}).get("filename") or k}
                              for k, v in (meta.get("resources") or {}).items()},
            "next-unit": 0, "leader": None, "leader-settings": {}, "status": None,
            "version": "", "since": _now(),
        }
        rec["config"] = coerce_config(rec["config-options"], config or {})
        for name, path in (resources or {}).items():
            if name not in rec["resource-meta"]:
                raise ModelError(f'charm "{rec["charm-name"]}" has no resource "{name}"')
            rec["resources"][name] = {"path": os.path.abspath(os.fspath(path)), "revision": 0}
        with self.state.transaction() as data:
            if app in data["applications"]:
                raise ModelError(f'application "{app}" already exists')
            data["applications"][app] = rec
        self._manifests.setdefault(app, [])
        if rec["subordinate"]:
            if to:
                raise ModelError(f'subordinate application "{app}" cannot be placed on machines')
            return app
        for mid in self._placement(to, num_units):
            self._add_unit(app, mid)
        return app

    def _deploy_emulated(self, obj, *, to=None, address=None) -> str:
        name = obj.name
        rec = {
            "name": name, "kind": "emulated", "charm-dir": None,
            "charm-name": getattr(obj, "charm_name", name), "charm-revision": 0,
            "subordinate": bool(getattr(obj, "subordinate", False)),
            "endpoints": {k: {"interface": v["interface"], "role": v.get("role", "provides"),
                              "scope": v.get("scope", "global")}
                          for k, v in obj.endpoints.items()},
            "extra-bindings": [],
            "config-options": {k: {"type": "string", "default": v}
                               for k, v in getattr(obj, "config_defaults", {}).items()},
            "config": {}, "resources": {}, "resource-meta": {},
            "next-unit": 0, "leader": None, "leader-settings": {}, "status": None,
            "version": getattr(obj, "version", "") or "", "since": _now(),
        }
        rec["endpoints"].setdefault("juju-info", {"interface": "juju-info", "role": "provides",
                                                  "scope": "global"})
        with self.state.transaction() as data:
            if name in data["applications"]:
                raise ModelError(f'application "{name}" already exists')
            data["applications"][name] = rec
        self.emulated[name] = obj
        if hasattr(obj, "attach"):
            obj.attach(self)
        if rec["subordinate"]:
            return name
        targets = self._placement(to, None) if to is not None else [None]
        for mid in targets:
            self._add_unit(name, mid, address=address or getattr(obj, "address", None))
        return name

    def _placement(self, to, num_units):
        if to is None:
            raise ModelError("a principal application needs machines (to=[...])")
        if isinstance(to, (str, int)):
            to = [to]
        mids = [str(m) for m in to]
        m = self.model()
        for mid in mids:
            m.machine(mid)
        if num_units is not None and num_units != len(mids):
            raise ModelError("num_units must match the machines given in to")
        return mids

    def add_unit(self, app: str, to) -> str:
        (mid,) = self._placement([to], None)
        if self.model().app(app)["subordinate"]:
            raise ModelError("subordinate units are created by relations, not add_unit")
        return self._add_unit(app, mid)

    def _add_unit(self, app: str, machine_id, principal=None, address=None) -> str:
        with self.state.transaction() as data:
            m = Model(data)
            a = m.app(app)
            num = a["next-unit"]
            a["next-unit"] += 1  # unit numbers are never reused
            name = f"{app}/{num}"
            tag = _model.unit_tag(name)
            ex = self.executors.get(str(machine_id)) if machine_id is not None else None
            if a["kind"] == "charm":
                if ex is None:
                    raise ModelError(f"machine {machine_id} has no executor")
                agent_dir = ex.machine_path(f"/var/lib/juju/agents/{tag}")
                tools_dir = ex.machine_path(f"/var/lib/juju/tools/{tag}")
                charm_dir = agent_dir + "/charm"
            else:
                agent_dir = tools_dir = charm_dir = None
            data["units"][name] = {
                "name": name, "app": app, "number": num,
                "machine": str(machine_id) if machine_id is not None else None,
                "address": address, "principal": principal,
                "agent-dir": agent_dir, "charm-dir": charm_dir, "tools-dir": tools_dir,
                "log-file": os.path.join(self.logs_dir, tag + ".log"),
                "workload": {"status": "waiting", "message": "agent initialising",
                             "set-by-charm": False, "since": _now()},
                "agent": {"status": "allocating", "message": "", "failed-hook": None,
                          "since": _now()},
                "life": "alive", "started": False, "installed": False,
                "phase": "pending", "opened-ports": [], "since": _now(),
            }
            if a.get("leader") is None:
                a["leader"] = name
            kind = a["kind"]
            app_charm = a["charm-dir"]
        if kind == "charm":
            mid = str(machine_id)
            if mid not in self._machines_with_tools:
                self.agent.install_machine_tools(ex, mid)
                self._machines_with_tools.add(mid)
            unit = self.unit(name)
            self._manifests[name] = self.agent.deploy_charm(ex, unit, app_charm)
        self._enqueue({"unit": name, "op": "setup"})
        return name

    # ======================================================================
    # relations
    # ======================================================================
    def _resolve_endpoints(self, m: Model, a: str, b: str):
        app_a, ep_a = split_endpoint(a)
        app_b, ep_b = split_endpoint(b)
        A, B = m.app(app_a), m.app(app_b)
        cands = []
        for na, ea in A["endpoints"].items():
            if ep_a and na != ep_a:
                continue
            for nb, eb in B["endpoints"].items():
                if ep_b and nb != ep_b:
                    continue
                if ea["interface"] != eb["interface"]:
                    continue
                roles = {ea["role"], eb["role"]}
                if roles != {"provides", "requires"}:
                    continue
                if ea["interface"] == "juju-info" and not (ep_a or ep_b):
                    continue
                cands.append((na, ea, nb, eb))
        if not cands:
            raise ModelError(f'no relations found between "{a}" and "{b}"')
        if len(cands) > 1:
            raise ModelError(f'ambiguous relation: "{a} {b}" could refer to ' +
                             "; ".join(f"{app_a}:{x[0]} {app_b}:{x[2]}" for x in cands))
        na, ea, nb, eb = cands[0]
        return (app_a, na, ea), (app_b, nb, eb)

    def _find_relation(self, m: Model, a: str, b: str) -> dict:
        app_a, ep_a = split_endpoint(a)
        app_b, ep_b = split_endpoint(b)
        for rel in m.relations():
            e0, e1 = rel["endpoints"]
            for x, y in ((e0, e1), (e1, e0)):
                if x["app"] == app_a and y["app"] == app_b and \
                        (ep_a is None or x["name"] == ep_a) and (ep_b is None or y["name"] == ep_b):
                    if rel["life"] == "alive":
                        return rel
        raise ModelError(f'relation "{a} {b}" not found')

    def add_relation(self, a: str, b: str) -> int:
        """Relate two endpoints ("flannel:cni", "kubernetes-worker:cni");
        returns the relation id."""
        with self.state.transaction() as data:
            m = Model(data)
            (app_a, na, ea), (app_b, nb, eb) = self._resolve_endpoints(m, a, b)
            for rel in m.relations():
                names = {(e["app"], e["name"]) for e in rel["endpoints"]}
                if names == {(app_a, na), (app_b, nb)}:
                    # Juju keys a relation by its endpoints: a dying one (some unit
                    # has still to run -relation-broken) blocks a new one too
                    key = " ".join(f"{e['app']}:{e['name']}" for e in rel["endpoints"])
                    raise ModelError(f'cannot add relation "{key}": relation {key} '
                                     f'already exists' + (" (dying)" if rel["life"] != "alive"
                                                          else ""))
            scope = "container" if "container" in (ea["scope"], eb["scope"]) else "global"
            if scope == "container" and not (m.app(app_a)["subordinate"] or
                                             m.app(app_b)["subordinate"]):
                raise ModelError("a container-scoped relation needs a subordinate application")
            rid = data["next-relation-id"]
            data["next-relation-id"] += 1
            # Juju lists the provider first
            eps = [{"app": app_a, "name": na, "role": ea["role"]},
                   {"app": app_b, "name": nb, "role": eb["role"]}]
            eps.sort(key=lambda e: 0 if e["role"] == "provides" else 1)
            rel = {"id": rid, "interface": ea["interface"], "scope": scope, "life": "alive",
                   "endpoints": eps, "unit-data": {}, "app-data": {app_a: {}, app_b: {}},
                   "scope-units": [], "members": {}, "created": [], "pending-broken": [],
                   "left": [], "since": _now()}
            rel["scope"] = scope
            data["relations"][str(rid)] = rel
            for u in sorted(data["units"], key=_model.unit_sort_key):
                rec = data["units"][u]
                if rec["life"] != "alive" or not m.participates(rel, u):
                    continue
                if rec["phase"] == "pending":
                    continue  # its setup will run relation-created for it
                self._enqueue(self._hook_entry(m, u, rel, "created"))
                self._enqueue({"unit": u, "op": "enter-scope", "relation": rid})
        return rid

    def remove_relation(self, a: str, b: str) -> None:
        """Remove a relation: departed (each remote unit) then broken on each
        side; subordinates left without their container relation are destroyed."""
        doomed = []
        with self.state.transaction() as data:
            m = Model(data)
            rel = self._find_relation(m, a, b)
            rid = rel["id"]
            participants = [u for u in sorted(data["units"], key=_model.unit_sort_key)
                            if m.participates(rel, u)]
            rel["life"] = "dying"
            rel["pending-broken"] = [u for u in participants if u in rel["created"]]
            # drop setup work for this relation that has not run yet
            setup = ("-relation-created", "-relation-joined", "-relation-changed")
            self.queue = [e for e in self.queue
                          if not (e.get("relation") == rid and
                                  (e["op"] == "enter-scope" or
                                   e.get("hook", "").endswith(setup)))]
            for u in participants:
                for x in m.members(rel, u):
                    self._enqueue(self._hook_entry(m, u, rel, "departed", remote=x, departing=x))
                if u in rel["pending-broken"]:
                    self._enqueue(self._hook_entry(m, u, rel, "broken"))
            rel["scope-units"] = []
            if rel["scope"] == "container":
                for u in participants:
                    rec = data["units"][u]
                    if rec.get("principal") and m.app(rec["app"])["subordinate"]:
                        doomed.append(u)
            if not rel["pending-broken"]:
                del data["relations"][str(rid)]
        for u in doomed:
            self.remove_unit(u)

    # ======================================================================
    # units going away
    # ======================================================================
    def remove_unit(self, unit: str) -> None:
        """Destroy a unit the way Juju does: its subordinates first; it
        departs every relation (departed per remote unit, then broken; the
        remote units see departed), then stop and remove run, then its
        directories are deleted."""
        m = self.model()
        rec = m.unit(unit)
        if rec["life"] != "alive":
            return
        for sub, srec in m.data["units"].items():
            if srec.get("principal") == unit:
                self.remove_unit(sub)
        with self.state.transaction() as data:
            m = Model(data)
            rec = m.unit(unit)
            rec["life"] = "dying"
            teardown = ("-relation-departed", "-relation-broken")
            self.queue = [e for e in self.queue
                          if e["unit"] != unit or e.get("hook", "").endswith(teardown)]
            for rel in m.unit_relations(unit):
                if rel["life"] != "alive":
                    continue  # already being torn down (remove_relation)
                if unit in rel["scope-units"]:
                    rel["scope-units"].remove(unit)
                for w in sorted(data["units"], key=_model.unit_sort_key):
                    if w == unit:
                        continue
                    news = ("-relation-joined", "-relation-changed")
                    self.queue = [e for e in self.queue
                                  if not (e["unit"] == w and e.get("relation") == rel["id"]
                                          and e.get("remote_unit") == unit
                                          and e.get("hook", "").endswith(news))]
                    if unit in rel["members"].get(w, []) and \
                            not self._departure_queued(w, rel["id"], unit):
                        self._enqueue(self._hook_entry(m, w, rel, "departed", remote=unit,
                                                       departing=unit))
                for x in m.members(rel, unit):
                    if not self._departure_queued(unit, rel["id"], x):
                        self._enqueue(self._hook_entry(m, unit, rel, "departed", remote=x,
                                                       departing=unit))
                if unit in rel["created"]:
                    self._enqueue(self._hook_entry(m, unit, rel, "broken"))
                else:
                    rel["left"].append(unit)
            if rec["installed"]:
                self._enqueue({"unit": unit, "op": "hook", "hook": "stop"})
                self._enqueue({"unit": unit, "op": "hook", "hook": "remove"})
            self._enqueue({"unit": unit, "op": "destroy"})

    def _departure_queued(self, unit, rid, remote) -> bool:
        return any(e["unit"] == unit and e.get("relation") == rid and
                   e.get("remote_unit") == remote and
                   e.get("hook", "").endswith("-relation-departed") for e in self.queue)

    def resolve(self, unit: str, retry: bool = True) -> None:
        """`juju resolve`: clear the error; rerun the failed hook (retry) or
        treat it as done (retry=False) and carry on with queued hooks."""
        with self.state.transaction() as data:
            rec = Model(data).unit(unit)
            if rec["agent"]["status"] != "error":
                raise ModelError(f'unit "{unit}" is not in an error state')
            rec["agent"] = {"status": "idle", "message": "", "failed-hook": None, "since": _now()}
        if not retry:
            for i, e in enumerate(self.queue):
                if e["unit"] == unit:
                    del self.queue[i]
                    with self.state.transaction() as data:
                        self._after_hook(Model(data), e, ok=True)
                    break

    # ======================================================================
    # config, charm upgrades, resources, update-status
    # ======================================================================
    def config(self, app: str, **values) -> None:
        """`juju config app key=value ...` (None resets to the default;
        underscores in keyword names stand for dashes: subnet_len=26)."""
        options = self.model().app(app).get("config-options", {})
        self.set_config(app, {(k.replace("_", "-") if k not in options and
                               k.replace("_", "-") in options else k): v
                              for k, v in values.items()})

    def set_config(self, app: str, values: dict) -> None:
        """config() for option names that are not Python identifiers."""
        with self.state.transaction() as data:
            m = Model(data)
            a = m.app(app)
            before = m.config(app)
            for k, v in values.items():
                if k not in a["config-options"]:
                    raise ModelError(f'unknown option "{k}"')
                if v is None:
                    a["config"].pop(k, None)
                else:
                    a["config"].update(coerce_config(a["config-options"], {k: v}))
            changed = m.config(app) != before
        if changed:
            self._fire_all(app, ["config-changed"])

    def upgrade_charm(self, app: str, charm_dir=None, *, resources=None) -> None:
        """`juju refresh app --path DIR [--resource name=path]`: new charm
        files on every unit, then upgrade-charm and config-changed."""
        with self.state.transaction() as data:
            a = Model(data).app(app)
            if charm_dir is not None:
                charm_dir = os.path.abspath(os.fspath(charm_dir))
                meta = _yaml_load(os.path.join(charm_dir, "metadata.yaml"))
                cfg_path = os.path.join(charm_dir, "config.yaml")
                options = ((_yaml_load(cfg_path).get("options") or {})
                           if os.path.exists(cfg_path) else {})
                a["charm-dir"] = charm_dir
                a["endpoints"] = endpoints_from_metadata(meta)
                a["extra-bindings"] = sorted((meta.get("extra-bindings") or {}).keys())
                a["config-options"] = {k: {"type": (v or {}).get("type", "string"),
                                           "default": (v or {}).get("default")}
                                       for k, v in options.items()}
                a["config"] = {k: v for k, v in a["config"].items() if k in a["config-options"]}
                a["resource-meta"] = {k: {"type": (v or {}).get("type", "file"),
                                          "filename": (v or {}).get("filename") or k}
                                      for k, v in (meta.get("resources") or {}).items()}
            a["charm-revision"] += 1
            for name, path in (resources or {}).items():
                if name not in a["resource-meta"]:
                    raise ModelError(f'charm has no resource "{name}"')
                old = a["resources"].get(name, {})
                a["resources"][name] = {"path": os.path.abspath(os.fspath(path)),
                                        "revision": old.get("revision", -1) + 1}
        for u in self.units(app):
            rec = self.unit(u)
            if rec["life"] != "alive" or charm_dir is None or rec["agent-dir"] is None:
                continue
            if rec["phase"] == "pending":  # not installed yet: it gets the new charm now
                self._manifests[u] = self.agent.upgrade_charm(
                    self.executor_for(u), rec, charm_dir, self._manifests.get(u, []))
            else:
                self._enqueue({"unit": u, "op": "deploy-charm"})
        self._fire_all(app, ["upgrade-charm", "config-changed"])

    def attach_resource(self, app: str, name: str, path) -> None:
        """`juju attach-resource app name=path`: Juju fires upgrade-charm on
        the units when a resource changes (then config-changed, as after any
        upgrade-charm)."""
        with self.state.transaction() as data:
            a = Model(data).app(app)
            if name not in a["resource-meta"]:
                raise ModelError(f'charm "{a["charm-name"]}" has no resource "{name}"')
            old = a["resources"].get(name, {})
            a["resources"][name] = {"path": os.path.abspath(os.fspath(path)),
                                    "revision": old.get("revision", -1) + 1}
        self._fire_all(app, ["upgrade-charm", "config-changed"])

    def fire(self, unit: str, hook: str) -> None:
        """Queue a non-relation hook (e.g. config-changed, update-status) on
        one unit, as Juju would for some outside event."""
        if "-relation-" in hook:
            raise ModelError("relation hooks follow relation changes; use the relation operations")
        self.unit(unit)
        self._enqueue({"unit": unit, "op": "hook", "hook": hook})

    def update_status(self, app: str | None = None) -> None:
        m = self.model()
        apps = [app] if app else sorted(m.data["applications"])
        for a in apps:
            self._fire_all(a, ["update-status"], started_only=True)

    def _fire_all(self, app, hooks, started_only=False):
        m = self.model()
        for u in m.units_of(app):
            rec = m.unit(u)
            if rec["life"] != "alive" or rec["phase"] == "pending":
                continue  # its setup runs config-changed anyway
            if started_only and not rec["started"]:
                continue
            for h in hooks:
                self._enqueue({"unit": u, "op": "hook", "hook": h})

    # ======================================================================
    # juju exec
    # ======================================================================
    def exec(self, unit: str, argv, *, relation=None, remote_unit=None, input=None,
             timeout=None):
        """`juju exec --unit UNIT -- argv`: run a command in the unit's hook
        context (hook tools on PATH, CHARM_DIR as cwd; with relation=ID the
        relation variables of that relation, JUJU_REMOTE_UNIT=remote_unit).
        Relation settings it writes are committed if it exits 0.  Returns the
        CompletedProcess (bytes)."""
        context_id = f"{unit}-run-commands-{uuid.uuid4().int % 10**18}"
        with self.state.transaction() as data:
            m = Model(data)
            rec = m.unit(unit)
            if m.app(rec["app"])["kind"] != "charm":
                raise ModelError(f"{unit} is an emulated unit: nothing to exec")
            rel_env = {}
            rid = None
            if relation is not None:
                rid = _model.parse_relation_id(str(relation))
                rel = m.relation(rid)
                ep = m.local_endpoint(rel, rec["app"])["name"]
                rel_env = {"JUJU_RELATION": ep, "JUJU_RELATION_ID": f"{ep}:{rid}",
                           "JUJU_REMOTE_UNIT": remote_unit or "",
                           "JUJU_REMOTE_APP": m.remote_endpoint(rel, rec["app"])["app"]}
            data["contexts"][context_id] = {
                "unit": unit, "hook": None, "relation-id": rid, "remote-unit": remote_unit,
                "remote-app": rel_env.get("JUJU_REMOTE_APP"), "writes": {},
                "app-version": None, "ports": {"open": [], "close": []}}
            model_info = {"model": dict(data["model"])}
        env = self.agent.hook_env(model_info, rec, "", context_id, rel_env)
        env.pop("JUJU_HOOK_NAME", None)
        try:
            cp = self.executor_for(unit).run(list(argv), env=env, cwd=rec["charm-dir"],
                                             input=input, timeout=timeout)
        finally:
            with self.state.transaction() as data:
                ctx = data["contexts"].pop(context_id, None)
                if "cp" in locals() and cp.returncode == 0:
                    self._commit(Model(data), unit, ctx)
        return cp

    # ======================================================================
    # the queue
    # ======================================================================
    @staticmethod
    def _hook_entry(m: Model, unit, rel, kind, remote=None, remote_app=None, departing=None):
        app = m.unit(unit)["app"]
        ep = m.local_endpoint(rel, app)["name"]
        if remote_app is None:
            remote_app = m.remote_endpoint(rel, app)["app"]
        return {"unit": unit, "op": "hook", "hook": f"{ep}-relation-{kind}",
                "relation": rel["id"], "remote_unit": remote, "remote_app": remote_app,
                "departing": departing}

    COALESCED = ("config-changed", "update-status", "leader-settings-changed")

    def _enqueue(self, entry: dict) -> None:
        """Append to the queue; a change notification (relation-changed,
        config-changed, ...) identical to one still pending is merged into it,
        as Juju does: the pending hook will see the latest data anyway."""
        entry = dict(entry)
        hook = entry.get("hook") or ""
        if entry.get("op") == "hook" and (hook.endswith("-relation-changed") or
                                          hook in self.COALESCED):
            keys = ("unit", "op", "hook", "relation", "remote_unit", "remote_app")
            for e in self.queue:
                if all(e.get(k) == entry.get(k) for k in keys):
                    return
        self.queue.append(entry)

    def _next_entry(self):
        data = self.state.read()
        blocked = set()
        i = 0
        while i < len(self.queue):
            e = self.queue[i]
            u = e["unit"]
            rec = data["units"].get(u)
            if rec is None:
                del self.queue[i]  # the unit is gone
                continue
            if u not in blocked and rec["agent"]["status"] != "error":
                return i, e
            blocked.add(u)
            i += 1
        return None

    def pending(self) -> list[dict]:
        return [dict(e) for e in self.queue]

    def settle(self, max_hooks: int = 2000, timeout: float | None = None) -> list[HookRun]:
        """Run queued work until nothing runnable is left (units in error
        keep their queue).  Returns the hooks run by this call."""
        start = len(self.hook_log)
        deadline = time.monotonic() + timeout if timeout else None
        steps = 0
        while True:
            nxt = self._next_entry()
            if nxt is None:
                break
            i, entry = nxt
            steps += 1
            if steps > max_hooks * 4 or len(self.hook_log) - start > max_hooks:
                raise SettleError(f"model did not settle after {max_hooks} hooks; "
                                  f"next: {entry}")
            if deadline and time.monotonic() > deadline:
                raise SettleError(f"model did not settle within {timeout}s; next: {entry}")
            self._execute(i, entry)
        self._cleanup()
        return self.hook_log[start:]

    def _replace(self, i, entry, new_entries):
        assert self.queue[i] is entry
        self.queue[i:i + 1] = new_entries

    def _execute(self, i, entry):
        op = entry["op"]
        unit = entry["unit"]
        if op == "setup":
            with self.state.transaction() as data:
                m = Model(data)
                rec = m.unit(unit)
                rec["phase"] = "setting-up"
            self._replace(i, entry, [
                {"unit": unit, "op": "hook", "hook": "install"},
                {"unit": unit, "op": "setup-relations"},
                {"unit": unit, "op": "leader"},
                {"unit": unit, "op": "hook", "hook": "config-changed"},
                {"unit": unit, "op": "hook", "hook": "start"},
                {"unit": unit, "op": "enter-scopes"},
            ])
        elif op == "setup-relations":
            m = self.model()
            new = [self._hook_entry(m, unit, rel, "created") for rel in m.unit_relations(unit)
                   if rel["life"] == "alive" and unit not in rel["created"]]
            self._replace(i, entry, new)
        elif op == "leader":
            m = self.model()
            hook = "leader-elected" if m.app(m.unit(unit)["app"])["leader"] == unit \
                else "leader-settings-changed"
            self._replace(i, entry, [{"unit": unit, "op": "hook", "hook": hook}])
        elif op == "enter-scopes":
            with self.state.transaction() as data:
                m = Model(data)
                m.unit(unit)["phase"] = "done"
                rels = [r["id"] for r in m.unit_relations(unit)
                        if r["life"] == "alive" and unit in r["created"]]
            self._replace(i, entry, [{"unit": unit, "op": "enter-scope", "relation": rid}
                                     for rid in rels])
        elif op == "enter-scope":
            del self.queue[i]
            self._enter_scope(unit, entry["relation"])
        elif op == "deploy-charm":
            del self.queue[i]
            rec = self.unit(unit)
            app = self.model().app(rec["app"])
            self._manifests[unit] = self.agent.upgrade_charm(
                self.executor_for(unit), rec, app["charm-dir"], self._manifests.get(unit, []))
        elif op == "destroy":
            del self.queue[i]
            self._destroy(unit)
        elif op == "hook":
            self._run_hook(i, entry)
        else:  # pragma: no cover
            raise AssertionError(f"unknown queue op {op}")

    def _enter_scope(self, unit: str, rid: int) -> None:
        create_sub = []
        with self.state.transaction() as data:
            m = Model(data)
            rel = data["relations"].get(str(rid))
            rec = data["units"].get(unit)
            if rel is None or rec is None or rel["life"] != "alive" or rec["life"] != "alive":
                return
            if not m.participates(rel, unit) or unit in rel["scope-units"]:
                return
            rel["scope-units"].append(unit)
            addr = m.unit_address(unit)
            bag = rel["unit-data"].setdefault(unit, {})
            if addr:
                bag.setdefault("private-address", addr)
                bag.setdefault("ingress-address", addr)
                bag.setdefault("egress-subnets", f"{addr}/32")
            for v in self._counterparts(m, rel, unit):
                self._enqueue(self._hook_entry(m, v, rel, "joined", remote=unit))
                self._enqueue(self._hook_entry(m, v, rel, "changed", remote=unit))
                self._enqueue(self._hook_entry(m, unit, rel, "joined", remote=v))
                self._enqueue(self._hook_entry(m, unit, rel, "changed", remote=v))
            app = m.app(rec["app"])
            remote = m.app(m.remote_endpoint(rel, rec["app"])["app"])
            if rel["scope"] == "container" and not app["subordinate"] and remote["subordinate"]:
                have = [u for u, r in data["units"].items()
                        if r["app"] == remote["name"] and r.get("principal") == unit
                        and r["life"] == "alive"]
                if not have:
                    create_sub.append((remote["name"], rec["machine"], unit))
        for sub_app, mid, principal in create_sub:
            self._add_unit(sub_app, mid, principal=principal)

    @staticmethod
    def _counterparts(m: Model, rel: dict, unit: str) -> list[str]:
        rec = m.unit(unit)
        remote_app = m.remote_endpoint(rel, rec["app"])["app"]
        out = []
        for other in rel["scope-units"]:
            orec = m.data["units"].get(other)
            if orec is None or other == unit or orec["app"] != remote_app or \
                    orec["life"] != "alive":
                continue
            if rel["scope"] == "container" and orec.get("machine") != rec.get("machine"):
                continue
            out.append(other)
        return sorted(out, key=_model.unit_sort_key)

    # -- running one hook ------------------------------------------------------------
    def _run_hook(self, i: int, entry: dict) -> None:
        unit = entry["unit"]
        hook = entry["hook"]
        rid = entry.get("relation")
        kind = hook.rsplit("-relation-", 1)[1] if "-relation-" in hook else None
        context_id = f"{unit}-{hook}-{uuid.uuid4().int % 10**18}"
        with self.state.transaction() as data:
            m = Model(data)
            rec = m.unit(unit)
            rel = data["relations"].get(str(rid)) if rid is not None else None
            remote = entry.get("remote_unit")
            if kind is not None:
                if rel is None:
                    del self.queue[i]
                    return
                members = rel["members"].setdefault(unit, [])
                if kind == "joined":
                    if remote not in rel["scope-units"]:
                        del self.queue[i]  # it left before we saw it join
                        return
                    if remote not in members:
                        members.append(remote)
                elif kind == "changed" and remote is not None and remote not in members:
                    del self.queue[i]
                    return
                elif kind == "departed" and remote in members:
                    members.remove(remote)
            data["contexts"][context_id] = {
                "unit": unit, "hook": hook, "relation-id": rid,
                "remote-unit": remote, "remote-app": entry.get("remote_app"),
                "writes": {}, "app-version": None, "ports": {"open": [], "close": []},
            }
            if hook == "install" and not rec["workload"].get("set-by-charm"):
                rec["workload"] = {"status": "maintenance", "message": "installing charm software",
                                   "set-by-charm": False, "since": _now()}
            rec["agent"] = {"status": "executing", "message": f"running {hook} hook",
                            "failed-hook": None, "since": _now()}
            app = m.app(rec["app"])
            leader_before = dict(app.get("leader-settings", {}))
            rel_env = {}
            if rel is not None:
                ep = m.local_endpoint(rel, rec["app"])["name"]
                rel_env = {"JUJU_RELATION": ep, "JUJU_RELATION_ID": f"{ep}:{rid}",
                           "JUJU_REMOTE_UNIT": remote or "",
                           "JUJU_REMOTE_APP": entry.get("remote_app") or "",
                           "JUJU_DEPARTING_UNIT": entry.get("departing") or ""}
            snapshot = {"model": dict(data["model"])}
        seq = next(self._seq)
        if app["kind"] == "emulated":
            run = self._run_emulated(unit, hook, context_id, rel_env, seq, entry)
        else:
            run = self.agent.run_hook(self.executor_for(unit), snapshot, rec, hook,
                                      context_id, rel_env, seq)
        ok = run.exit_code in (0, None)
        with self.state.transaction() as data:
            m = Model(data)
            ctx = data["contexts"].pop(context_id, None)
            rec = m.unit(unit)
            if ok:
                self._commit(m, unit, ctx)
                self._after_hook(m, entry, ok=True)
                rec["agent"] = {"status": "idle", "message": "", "failed-hook": None,
                                "since": _now()}
            else:
                rec["agent"] = {"status": "error", "message": f'hook failed: "{hook}"',
                                "failed-hook": hook, "since": _now()}
            app = m.app(rec["app"])
            if app.get("leader-settings", {}) != leader_before:
                for u in m.units_of(rec["app"]):
                    urec = m.unit(u)
                    if u != unit and urec["life"] == "alive" and urec["phase"] != "pending":
                        self._enqueue({"unit": u, "op": "hook", "hook": "leader-settings-changed"})
        if ok and self.queue and i < len(self.queue) and self.queue[i] is entry:
            del self.queue[i]
        elif ok and entry in self.queue:
            self.queue.remove(entry)
        self.hook_log.append(run)
        with open(self.hooks_log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(run.as_dict()) + "\n")

    def _run_emulated(self, unit, hook, context_id, rel_env, seq, entry) -> HookRun:
        from .apps import HookContext
        obj = self.emulated[self.unit(unit)["app"]]
        ctx = HookContext(self, unit, hook, context_id, entry)
        t0 = time.monotonic()
        started = time.time()
        rc, err = 0, ""
        try:
            obj.dispatch(ctx)
        except Exception as e:  # noqa: BLE001  (an emulated hook failing = hook error)
            import traceback
            rc, err = 1, "".join(traceback.format_exception(e))
        return HookRun(seq=seq, unit=unit, hook=hook, exit_code=rc,
                       duration=time.monotonic() - t0,
                       relation_id=rel_env.get("JUJU_RELATION_ID"),
                       remote_unit=rel_env.get("JUJU_REMOTE_UNIT") or None,
                       remote_app=rel_env.get("JUJU_REMOTE_APP") or None,
                       departing_unit=rel_env.get("JUJU_DEPARTING_UNIT") or None,
                       emulated=True, stderr_tail=err[-4000:], started_at=started)

    def _commit(self, m: Model, unit: str, ctx: dict | None) -> None:
        """Apply a successful hook's buffered changes and queue the
        relation-changed hooks they cause."""
        if not ctx:
            return
        rec = m.unit(unit)
        app = rec["app"]
        for rid_s, writes in ctx.get("writes", {}).items():
            rel = m.data["relations"].get(rid_s)
            if rel is None:
                continue
            if writes.get("unit"):
                bag = rel["unit-data"].setdefault(unit, {})
                before = dict(bag)
                apply_changes(bag, writes["unit"])
                if bag != before:
                    for w, mem in rel["members"].items():
                        if unit in mem and w in m.data["units"] and w != unit:
                            self._enqueue(self._hook_entry(m, w, rel, "changed", remote=unit))
            if writes.get("app"):
                bag = rel["app-data"].setdefault(app, {})
                before = dict(bag)
                apply_changes(bag, writes["app"])
                if bag != before and rel["life"] == "alive":
                    remote_app = m.remote_endpoint(rel, app)["app"]
                    for w in rel["scope-units"]:
                        wrec = m.data["units"].get(w)
                        if wrec and wrec["app"] == remote_app and (
                                rel["scope"] != "container" or wrec["machine"] == rec["machine"]):
                            self._enqueue(self._hook_entry(m, w, rel, "changed", remote=None,
                                                           remote_app=app))
        if ctx.get("app-version") is not None:
            m.app(app)["version"] = ctx["app-version"]
        ports = ctx.get("ports") or {}
        opened = rec.setdefault("opened-ports", [])
        for p in ports.get("open", []):
            if p not in opened:
                opened.append(p)
        for p in ports.get("close", []):
            if p in opened:
                opened.remove(p)

    def _after_hook(self, m: Model, entry: dict, ok: bool) -> None:
        unit = entry["unit"]
        hook = entry.get("hook", "")
        rec = m.data["units"].get(unit)
        if rec is None:
            return
        rel = None
        if entry.get("relation") is not None:
            rel = m.data["relations"].get(str(entry["relation"]))
        if hook == "install":
            rec["installed"] = True
            if not rec["workload"].get("set-by-charm"):
                rec["workload"] = {"status": "unknown", "message": "", "set-by-charm": False,
                                   "since": _now()}
        elif hook == "start":
            rec["started"] = True
        elif hook.endswith("-relation-created") and rel is not None:
            if unit not in rel["created"]:
                rel["created"].append(unit)
        elif hook.endswith("-relation-broken") and rel is not None:
            rel["members"].pop(unit, None)
            if rel["life"] == "alive":
                if unit not in rel["left"]:
                    rel["left"].append(unit)
            else:
                if unit in rel["pending-broken"]:
                    rel["pending-broken"].remove(unit)
                if not rel["pending-broken"]:
                    del m.data["relations"][str(rel["id"])]

    def _destroy(self, unit: str) -> None:
        m = self.model()
        rec = m.unit(unit)
        if rec["agent-dir"]:
            self.agent.remove_unit_files(self.executor_for(unit), rec)
        elect = None
        with self.state.transaction() as data:
            m = Model(data)
            app = m.app(rec["app"])
            del data["units"][unit]
            for rel in data["relations"].values():
                rel["members"].pop(unit, None)
                if unit in rel["scope-units"]:
                    rel["scope-units"].remove(unit)
                if unit in rel["pending-broken"]:
                    rel["pending-broken"].remove(unit)
            for rid in [k for k, r in data["relations"].items()
                        if r["life"] != "alive" and not r["pending-broken"]]:
                del data["relations"][rid]
            if app.get("leader") == unit:
                app["leader"] = None
                cands = [u for u in m.units_of(app["name"]) if m.unit(u)["life"] == "alive"]
                if cands:
                    app["leader"] = cands[0]
                    if m.unit(cands[0])["phase"] != "pending":
                        elect = cands[0]
        self._manifests.pop(unit, None)
        if elect:
            self._enqueue({"unit": elect, "op": "hook", "hook": "leader-elected"})

    def _cleanup(self) -> None:
        """Forget databags of units that are gone and that no queued hook
        can still read (departed hooks may read a departing unit's data)."""
        referenced = {e.get("remote_unit") for e in self.queue}
        with self.state.transaction() as data:
            for rel in data["relations"].values():
                for u in list(rel["unit-data"]):
                    if u not in data["units"] and u not in referenced:
                        del rel["unit-data"][u]

    # ======================================================================
    # status
    # ======================================================================
    def status(self) -> dict:
        """A `juju status --format=yaml`-like structure."""
        m = self.model()
        data = m.data
        out = {"model": {"name": data["model"]["name"], "type": "iaas",
                         "controller": "sandbox", "cloud": "localhost",
                         "version": data["model"]["juju-version"]},
               "machines": {}, "applications": {}}
        for mid, mach in sorted(data["machines"].items(), key=lambda kv: int(kv[0])):
            ips = [mach["address"]] if mach.get("address") else []
            out["machines"][mid] = {"juju-status": {"current": "started"},
                                    "dns-name": mach.get("address"),
                                    "ip-addresses": ips,
                                    "instance-id": mach.get("name"),
                                    "hostname": mach.get("hostname"),
                                    "base": {"name": "ubuntu", "channel": "22.04"},
                                    "network-interfaces": {mach.get("interface") or "eth0": {
                                        "ip-addresses": ips,
                                        "mac-address": mach.get("mac") or "", "is-up": True}}}

        def unit_status(u):
            rec = m.unit(u)
            w = dict(rec["workload"])
            ag = rec["agent"]
            if ag["status"] == "error":
                wl = {"current": "error", "message": ag["message"]}
                js = {"current": "idle"}
            else:
                wl = {"current": w.get("status"), "message": w.get("message", "")}
                js = {"current": ag["status"]}
                if ag.get("message"):
                    js["message"] = ag["message"]
            if rec["life"] == "dying":
                js["current"] = js["current"] if ag["status"] == "executing" else "idle"
                js.setdefault("message", "dying")
            st = {"workload-status": wl, "juju-status": js,
                  "leader": m.app(rec["app"]).get("leader") == u,
                  "machine": rec.get("machine"), "public-address": m.unit_address(u),
                  "life": rec["life"]}
            if rec.get("opened-ports"):
                st["open-ports"] = list(rec["opened-ports"])
            return st

        for name, app in sorted(data["applications"].items()):
            units = m.units_of(name)
            entry = {"charm": app["charm-name"], "charm-rev": app["charm-revision"],
                     "charm-origin": "local" if app["kind"] == "charm" else "emulated",
                     "exposed": False, "version": app.get("version") or "",
                     "subordinate": app["subordinate"]}
            if app.get("status"):
                entry["application-status"] = {"current": app["status"]["status"],
                                               "message": app["status"]["message"]}
            else:
                best = None
                for u in units:
                    ws = unit_status(u)["workload-status"]
                    if best is None or _model.SEVERITY.get(ws["current"], 0) > \
                            _model.SEVERITY.get(best["current"], 0):
                        best = ws
                if best is None:
                    waiting = app["subordinate"] and not units
                    best = {"current": "waiting" if app["subordinate"] else "unknown",
                            "message": "waiting for principal" if waiting else ""}
                entry["application-status"] = best
            rels = {}
            for rel in m.relations():
                for e, o in ((rel["endpoints"][0], rel["endpoints"][1]),
                             (rel["endpoints"][1], rel["endpoints"][0])):
                    if e["app"] == name:
                        rels.setdefault(e["name"], []).append({"related-application": o["app"],
                                                               "interface": rel["interface"],
                                                               "scope": rel["scope"],
                                                               "id": rel["id"],
                                                               "life": rel["life"]})
            entry["relations"] = rels
            if app["subordinate"]:
                entry["subordinate-to"] = sorted({o["related-application"] for r in rels.values()
                                                  for o in r if o["scope"] == "container"})
                entry["scale"] = len(units)
            else:
                entry["units"] = {}
                for u in units:
                    us = unit_status(u)
                    subs = {s: unit_status(s)
                            for s in sorted(data["units"], key=_model.unit_sort_key)
                            if data["units"][s].get("principal") == u}
                    if subs:
                        us["subordinates"] = subs
                    entry["units"][u] = us
                entry["scale"] = len(units)
            out["applications"][name] = entry
        return out

    def format_status(self) -> str:
        """A `juju status`-like table."""
        st = self.status()
        lines = []

        def table(rows):
            widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
            for r in rows:
                lines.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
            lines.append("")

        md = st["model"]
        table([["Model", "Controller", "Cloud/Region", "Version"],
               [md["name"], md["controller"], md["cloud"], md["version"]]])
        rows = [["App", "Version", "Status", "Scale", "Charm", "Rev", "Exposed", "Message"]]
        for name, a in st["applications"].items():
            ast = a["application-status"]
            rows.append([name, a["version"], ast["current"], a["scale"],
                         a["charm"], a["charm-rev"], "no", ast.get("message", "")])
        table(rows)
        rows = [["Unit", "Workload", "Agent", "Machine", "Public address", "Ports", "Message"]]

        def unit_row(u, us, indent):
            star = "*" if us["leader"] else ""
            rows.append([indent + u + star, us["workload-status"]["current"],
                         us["juju-status"]["current"], (us["machine"] or "") if not indent else "",
                         us["public-address"] or "", ",".join(us.get("open-ports", [])),
                         us["workload-status"].get("message", "")])

        for name, a in st["applications"].items():
            for u, us in a.get("units", {}).items():
                unit_row(u, us, "")
                for s, ss in us.get("subordinates", {}).items():
                    unit_row(s, ss, "  ")
        if len(rows) > 1:
            table(rows)
        rows = [["Machine", "State", "Address", "Inst id", "Base", "AZ", "Message"]]
        for mid, mach in st["machines"].items():
            rows.append([mid, mach["juju-status"]["current"], mach["dns-name"] or "",
                         mach["instance-id"], "ubuntu@22.04", "", ""])
        if len(rows) > 1:
            table(rows)
        return "\n".join(lines).rstrip() + "\n"

    def close(self) -> None:
        """Nothing runs in the background; kept for symmetry with machines."""

    def remove_state(self) -> None:
        shutil.rmtree(self.state_dir, ignore_errors=True)


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def endpoints_from_metadata(meta: dict) -> dict:
    eps = {}
    for role in ("provides", "requires", "peers"):
        for name, spec in (meta.get(role) or {}).items():
            spec = spec or {}
            if isinstance(spec, str):
                spec = {"interface": spec}
            eps[name] = {"interface": spec.get("interface"), "role": role,
                         "scope": spec.get("scope", "global")}
    eps.setdefault("juju-info", {"interface": "juju-info", "role": "provides", "scope": "global"})
    return eps


def coerce_config(options: dict, values: dict) -> dict:
    out = {}
    for k, v in values.items():
        if k not in options:
            raise ModelError(f'unknown option "{k}"')
        typ = options[k].get("type", "string")
        try:
            if typ == "int":
                if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
                    raise ValueError
                v = int(v)
            elif typ == "float":
                v = float(v)
            elif typ == "boolean":
                if isinstance(v, str):
                    if v.lower() not in ("true", "false"):
                        raise ValueError
                    v = v.lower() == "true"
                else:
                    v = bool(v)
            else:
                v = str(v)
        except (TypeError, ValueError):
            raise ModelError(f'option "{k}" expected {typ}, got {v!r}') from None
        out[k] = v
    return out


def apply_changes(bag: dict, changes: dict) -> None:
    for k, v in changes.items():
        if v is None or v == "":
            bag.pop(k, None)
        else:
            bag[k] = v
