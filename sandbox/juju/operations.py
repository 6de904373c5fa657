"""Model operations of the emulated controller: what `juju deploy`,
`juju integrate`, `juju remove-relation`, `juju remove-unit`, `juju config`,
`juju refresh`, `juju attach-resource`, `juju resolve` and `juju exec` do.

Each operation changes the model state (sandbox.juju.model, under its lock)
and queues the hooks Juju would fire; it runs nothing itself: the hook
queue (sandbox.juju.scheduler) runs them when settle() is called.  The hook
order these operations queue is described in controller.py.

ModelOperations is a mixin of Controller: it uses the controller's state,
agent, executors and emulated apps, and the scheduler's _enqueue(),
_hook_entry(), _commit() and queue.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
import zipfile

from .. import ubuntu
from . import model as _model
from .executors import MachineExecutor, as_executor
from .hooktools import append_unit_log
from .model import Model, ModelError, timestamp as _now
from .versions import SERIES_UPGRADE_HOOKS, manifest_problem


def _yaml_load(path):
    import yaml  # controller side only
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def split_endpoint(spec: str):
    app, _, ep = spec.partition(":")
    return app, (ep or None)


class ModelOperations:
    """Operations on the model (mixin of Controller)."""

    # ======================================================================
    # machines
    # ======================================================================
    def add_machine(self, executor, *, address=None, cidr=None, interface="eth0",
                    mac=None, hostname=None, name=None, zone="", base="22.04") -> str:
        """Register a machine (an executor, or a sandbox Machine) with its
        network binding and availability zone; returns its Juju machine id
        ("0", "1", ...)."""
        ex = as_executor(executor)
        with self.state.transaction() as data:
            mid = str(data["next-machine-id"])
            data["next-machine-id"] += 1
            data["machines"][mid] = {
                "id": mid, "name": name or f"machine-{mid}", "address": address,
                "cidr": cidr, "interface": interface, "mac": mac,
                "hostname": hostname or name or f"juju-machine-{mid}", "zone": zone or "",
                "extra-bind-addresses": [], "base": base,
                "executor": repr(ex), "since": _now(),
            }
        self.executors[mid] = ex
        return mid

    def add_bind_address(self, machine_id, interface: str, address: str, cidr: str = "",
                         mac: str = "", first: bool = False) -> None:
        """Give a machine one more bind address network-get lists (a
        `fan-252` bridge on fan-enabled models, say), after the primary
        interface or, with first=True, before it."""
        with self.state.transaction() as data:
            mach = Model(data).machine(machine_id)
            mach.setdefault("extra-bind-addresses", []).append(
                {"interface": interface, "address": address, "cidr": cidr, "mac": mac,
                 "first": bool(first)})

    def add_sandbox_machine(self, machine) -> str:
        """Register a started sandbox.machine.Machine: its eth0 address,
        interface, the test network's subnet and the link's MAC address."""
        mac = None
        try:
            links = machine.ip_json("link", "show", "dev", machine.iface)
            mac = links[0].get("address") if links else None
        except Exception:  # noqa: BLE001  (the MAC is cosmetic)
            mac = None
        subnet = getattr(machine, "subnet", None)
        return self.add_machine(MachineExecutor(machine), address=machine.address,
                                interface=machine.iface, cidr=str(subnet) if subnet else None,
                                mac=mac, hostname=machine.name, name=machine.name,
                                base=ubuntu.RELEASES[getattr(machine, "series", "jammy")][0])

    # ======================================================================
    # applications
    # ======================================================================
    def deploy(self, app, charm_dir=None, *, config=None, resources=None, to=None,
               num_units=None, address=None) -> str:
        """Deploy a charm directory as application `app` (principal: one unit
        per machine in `to`; subordinate: no units until related), or an
        emulated application object (see sandbox.juju.apps)."""
        if not isinstance(app, str):
            return self._deploy_emulated(app, to=to, address=address, config=config)
        if charm_dir is None:
            raise ModelError("deploy needs a charm directory")
        charm_dir = self._charm_source(app, charm_dir)
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

    def _charm_source(self, app: str, path) -> str:
        """The directory a charm is deployed from: a packed `.charm` (a zip)
        unpacked in the controller's state, or (before Juju 4) a charm
        directory; refused, as this Juju refuses it, otherwise."""
        path = os.path.abspath(os.fspath(path))
        if os.path.isdir(path):
            if not self.rules.deploys_directories:
                raise ModelError(f"Juju {self.rules.version} deploys a packed charm only, not "
                                 f"the directory {path}: pack it (charmcraft pack)")
            charm_dir = path
        else:
            charm_dir = os.path.join(self.state_dir, "charms", f"{app}-{uuid.uuid4().hex[:8]}")
            try:
                with zipfile.ZipFile(path) as packed:
                    packed.extractall(charm_dir)
                    for info in packed.infolist():   # zip keeps the mode in the high bits
                        mode = info.external_attr >> 16
                        if mode:
                            os.chmod(os.path.join(charm_dir, info.filename), mode & 0o7777)
            except (OSError, zipfile.BadZipFile) as error:
                raise ModelError(f"cannot read the charm {path}: {error}") from None
        if self.rules.needs_manifest_bases:
            manifest = os.path.join(charm_dir, "manifest.yaml")
            problem = manifest_problem(_yaml_load(manifest) if os.path.exists(manifest)
                                       else None)
            if problem:
                raise ModelError(f"invalid charm {path}: {problem}")
        return charm_dir

    def _deploy_emulated(self, obj, *, to=None, address=None, config=None) -> str:
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
            "config": {k: str(v) for k, v in (config or {}).items()}, "resources": {},
            "resource-meta": {},
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
                # A subordinate unit goes with the last container relation
                # to its principal's application, not with one to another
                # subordinate (flannel's nrpe-external-master to nrpe).
                apps = {e["app"] for e in rel["endpoints"]}
                for u in participants:
                    rec = data["units"][u]
                    if not (rec.get("principal") and m.app(rec["app"])["subordinate"]):
                        continue
                    principal_app = data["units"][rec["principal"]]["app"]
                    if principal_app in apps and not any(
                            other is not rel and other["life"] == "alive" and
                            other["scope"] == "container" and
                            {e["app"] for e in other["endpoints"]} == {rec["app"], principal_app}
                            for other in m.relations()):
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
            # Juju's teardown (worker/uniter resolver.go, Dying): `stop` only
            # for a unit that started (and not stopped), `remove` for one that
            # installed; a unit removed between install and start gets remove alone
            if rec["started"]:
                self._enqueue({"unit": unit, "op": "hook", "hook": "stop"})
            if rec["installed"]:
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
        if retry:
            return   # the failed hook runs next (scheduler.failed_entry)
        failed = self.failed_entry(unit)
        self._failed.pop(unit, None)
        for i, e in enumerate(self.queue):
            if e is failed or (failed is None and e["unit"] == unit):
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
                charm_dir = self._charm_source(app, charm_dir)
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
            if rec["life"] != "alive":
                continue
            if charm_dir is not None and rec["agent-dir"] is not None and rec["phase"] == "pending":
                # not installed yet: it gets the new charm now, and its
                # setup runs config-changed anyway
                self._manifests[u] = self.agent.upgrade_charm(
                    self.executor_for(u), rec, charm_dir, self._manifests.get(u, []))
                continue
            self._refresh_unit(u, deploy=charm_dir is not None and rec["agent-dir"] is not None)

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
        for u in self.units(app):
            if self.unit(u)["life"] == "alive":
                self._refresh_unit(u, deploy=False)

    def _refresh_unit(self, unit: str, deploy: bool) -> None:
        """upgrade-charm and config-changed (after the new charm files, if
        `deploy`) ahead of what the unit has queued, as Juju's uniter does;
        nothing for a unit not installed yet (its setup runs config-changed)."""
        if self.unit(unit)["phase"] == "pending":
            return
        entries = [{"unit": unit, "op": "deploy-charm"}] if deploy else []
        entries += [{"unit": unit, "op": "hook", "hook": h}
                    for h in ("upgrade-charm", "config-changed")]
        self._enqueue_first(unit, entries)

    def fire(self, unit: str, hook: str) -> None:
        """Queue a non-relation hook (e.g. config-changed, update-status) on
        one unit, as Juju would for some outside event."""
        if "-relation-" in hook:
            raise ModelError("relation hooks follow relation changes; use the relation operations")
        if hook in SERIES_UPGRADE_HOOKS and not self.rules.series_upgrade:
            raise ModelError(f"Juju {self.rules.version} has no {hook} hook: `juju "
                             "upgrade-machine` is gone (a new machine of the new base instead)")
        self.unit(unit)
        self._enqueue({"unit": unit, "op": "hook", "hook": hook})

    def reboot(self, machine_id) -> list[str]:
        """The machine `machine_id` is back from a reboot (the OS side:
        sandbox.machine.Machine.reboot()). Juju 2.8+ (juju/juju#11261): the
        unit agent detects the reboot (its transient marker under /run is
        gone) and fires `start` on every unit of the machine that had
        started before; no other hook: config-changed comes only when the
        config, trust or the machine's addresses changed, relation hooks only
        when a relation did. A unit still setting up carries on where it was
        (its queued hooks stay). Returns the units `start` was queued for."""
        m = self.model()
        mid = str(machine_id)
        units = [u for u in m.data["units"]
                 if str(m.unit(u).get("machine")) == mid and m.unit(u)["life"] == "alive"
                 and m.unit(u)["started"]]
        for u in units:
            self._enqueue({"unit": u, "op": "hook", "hook": "start"})
        return units

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
            machine = data["machines"].get(str(rec.get("machine")))
        env = self.agent.hook_env(model_info, rec, "", context_id, rel_env, machine)
        del env["JUJU_HOOK_NAME"], env["JUJU_DISPATCH_PATH"]  # a command, not a hook
        try:
            cp = self.executor_for(unit).run(list(argv), env=env, cwd=rec["charm-dir"],
                                             input=input, timeout=timeout)
        finally:
            with self.state.transaction() as data:
                ctx = data["contexts"].pop(context_id, None)
                if "cp" in locals() and cp.returncode == 0:
                    self._commit(Model(data), unit, ctx)
        return cp

    def run_action(self, unit: str, action: str, params: dict | None = None) -> ActionResult:
        """`juju run UNIT ACTION key=value...` (Juju 3; `juju run-action
        --wait` on 2.9): the parameters checked against the charm's
        actions.yaml and its defaults filled in, then the action run in the
        unit's context (action-get/set/fail/log work; relation data and
        status it writes are not kept, as the action is not a hook) while no
        hook runs (call it between settles). A refused action (unknown, bad
        parameters) raises ModelError; a failed one returns status "failed"."""
        m = self.model()
        rec = m.unit(unit)
        app = m.app(rec["app"])
        if app["kind"] != "charm":
            raise ModelError(f"{unit} is an emulated unit: it has no actions")
        spec_path = os.path.join(app["charm-dir"], "actions.yaml")
        spec = (_yaml_load(spec_path) if os.path.exists(spec_path) else {}).get(action)
        if spec is None:
            raise ModelError(f'action "{action}" not defined on unit "{unit}"')
        values = action_params(action, spec, params or {},
                               extra_allowed=self.rules.actions_allow_extra_params)
        context_id = f"{unit}-{action}-{uuid.uuid4().int % 10**18}"
        with self.state.transaction() as data:
            data["contexts"][context_id] = {
                "unit": unit, "hook": None, "relation-id": None, "writes": {},
                "app-version": None, "ports": {"open": [], "close": []},
                "action": {"name": action, "params": values, "results": {},
                           "failed": None, "log": []}}
            model_info = {"model": dict(data["model"])}
            machine = data["machines"].get(str(rec.get("machine")))
        try:
            rc, stdout, stderr = self.agent.run_action(self.executor_for(unit), model_info, rec,
                                                       action, context_id, machine)
        finally:
            with self.state.transaction() as data:
                ctx = data["contexts"].pop(context_id, None)
        done = ctx["action"]
        results = dict(done["results"])
        if rc is None:
            raise ModelError(f'charm of {unit} declares "{action}" but has no actions/{action}')
        results["return-code"] = rc
        for key, text in (("stdout", stdout), ("stderr", stderr)):
            if text:
                results[key] = text.decode("utf-8", "replace")
        if done["failed"] is not None:
            status, message = "failed", done["failed"]
        elif rc != 0:
            status, message = "failed", f"exit status {rc}"
        else:
            status, message = "completed", ""
        run = ActionResult(unit=unit, action=action, params=values, status=status,
                           message=message, results=results, log=list(done["log"]))
        append_unit_log(self.model(), unit, f'INFO juju.worker.uniter.operation ran '
                        f'"{action}" action (status {status})')
        return run


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


@dataclasses.dataclass
class ActionResult:
    """What `juju run` shows of one action: its status ("completed" or
    "failed"), the message action-fail gave (or "exit status N"), the
    results (action-set's, with Juju's return-code, stdout and stderr) and
    action-log's messages."""
    unit: str
    action: str
    params: dict
    status: str
    message: str
    results: dict
    log: list

    @property
    def ok(self) -> bool:
        return self.status == "completed"


JSON_TYPES = {"string": (str,), "integer": (int,), "number": (int, float),
              "boolean": (bool,), "array": (list,), "object": (dict,)}


def action_params(action: str, spec: dict, given: dict, *, extra_allowed: bool = True) -> dict:
    """The parameters an action runs with: `given` checked against its
    actions.yaml schema (types, enum, required, additionalProperties, whose
    default is `extra_allowed`: true before Juju 4, false since), the
    schema's defaults filled in."""
    props = (spec or {}).get("params") or {}
    values = {}
    for key, value in given.items():
        if key not in props and spec.get("additionalProperties", extra_allowed) is False:
            raise ModelError(f'action "{action}": additional property "{key}" is not allowed')
        schema = props.get(key) or {}
        kind = schema.get("type")
        if kind in JSON_TYPES and (not isinstance(value, JSON_TYPES[kind]) or (
                kind in ("integer", "number") and isinstance(value, bool))):
            raise ModelError(f'action "{action}": {key}: expected {kind}, given '
                             f'{type(value).__name__} {value!r}')
        if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
            raise ModelError(f'action "{action}": {key}: {value!r} is less than the '
                             f'minimum {schema["minimum"]}')
        if "enum" in schema and value not in schema["enum"]:
            raise ModelError(f'action "{action}": {key}: {value!r} is not one of '
                             f'{schema["enum"]}')
        values[key] = value
    for key, schema in props.items():
        if key not in values and isinstance(schema, dict) and "default" in schema:
            values[key] = schema["default"]
    missing = [key for key in spec.get("required") or () if key not in values]
    if missing:
        raise ModelError(f'action "{action}": missing required parameters: {", ".join(missing)}')
    return values
