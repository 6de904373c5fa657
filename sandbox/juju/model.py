"""Model state of the emulated Juju: one JSON file guarded by fcntl.flock.

The controller side (sandbox.juju.controller) and the hook tools (separate
processes, possibly inside a machine's mount namespace that still sees the
state file's path) share it.  This module is stdlib-only at import time: the
hook tools carry a copy of it into each unit's tools directory.

State layout (all JSON)::

    {"format": 1,
     "model": {"name", "uuid", "juju-version"},
     "next-relation-id": int, "next-machine-id": int,
     "machines": {"0": {"id", "name", "address", "interface", "cidr", "mac",
                        "hostname", "juju-root", "zone",
                        "extra-bind-addresses": [{"interface", "address", "cidr", "mac",
                                                  "first"}]}},
     "applications": {"flannel": {
          "name", "kind": "charm"|"emulated", "charm-dir", "charm-name",
          "charm-revision", "subordinate", "endpoints": {ep: {"interface",
          "role", "scope"}}, "extra-bindings": [...], "config-options":
          {opt: {"type", "default"}}, "config": {set values}, "resources":
          {name: {"path", "filename", "revision"}}, "resource-meta":
          {name: {"filename", "type"}}, "next-unit": int, "leader": unit|None,
          "leader-settings": {}, "status": {"status", "message"}|None,
          "version": str}},
     "units": {"flannel/0": {"name", "app", "number", "machine", "principal",
          "agent-dir", "charm-dir", "tools-dir", "log-file",
          "workload": {"status", "message", "set-by-charm"},
          "agent": {"status", "message", "failed-hook"}, "life",
          "started", "opened-ports": [...]}},
     "relations": {"3": {"id", "interface", "scope", "life": "alive"|"dying",
          "endpoints": [{"app", "name", "role"}, {...}],
          "unit-data": {unit: {k: v}}, "app-data": {app: {k: v}},
          "scope": "global"|"container", "scope-units": [units in scope],
          "members": {unit: [remote units it has joined]}, "left": [units that
          ran -relation-broken of a relation that lives on],
          "created": [units that ran -relation-created],
          "pending-broken": [units that still have to run -relation-broken]}},
     "contexts": {context-id: {"unit", "hook", "relation-id", "remote-unit",
          "remote-app", "writes": {rid: {"unit": {}, "app": {}}},
          "app-version", "ports": {"open": [], "close": []}}},
     "paths": {"logs", "tools-log"}}
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time

STATE_ENV = "JUJU_SANDBOX_STATE"
CONTEXT_ENV = "JUJU_CONTEXT_ID"

WORKLOAD_SETTABLE = ("maintenance", "blocked", "waiting", "active")
# Severity used to derive an application's status from its units (Juju's order).
SEVERITY = {"error": 100, "blocked": 90, "waiting": 80, "maintenance": 70,
            "terminated": 60, "active": 50, "unknown": 40}


class ModelError(Exception):
    """An operation the model refuses (bad name, unknown unit, ...)."""


# --------------------------------------------------------------------------
# the state file
# --------------------------------------------------------------------------

class StateFile:
    """The JSON state file plus a sibling lock file used with fcntl.flock.

    Writers take LOCK_EX and replace the file atomically (tmp + rename), so a
    reader holding LOCK_SH always sees a complete document.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self.lock_path = self.path + ".lock"

    def exists(self) -> bool:
        return os.path.exists(self.path)

    @contextlib.contextmanager
    def _lock(self, exclusive: bool):
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _load(self) -> dict:
        with open(self.path, encoding="utf-8") as f:
            return json.load(f)

    def _store(self, data: dict) -> None:
        directory = os.path.dirname(self.path) or "."
        fd, tmp = tempfile.mkstemp(prefix=".state-", dir=directory)
        try:
            # json.dumps without indent is C's encoder; json.dump (or an
            # indent) is Python's, which at 64 machines cost the sandbox's
            # Juju more CPU than flanneld and etcd together
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def read(self) -> dict:
        return self._load()  # writers rename a complete file into place

    def create(self, data: dict) -> None:
        with self._lock(True):
            self._store(data)

    @contextlib.contextmanager
    def transaction(self):
        """Yield the state dict under an exclusive lock; write it back on a
        clean exit, discard changes if the block raises."""
        with self._lock(True):
            data = self._load()
            yield data
            self._store(data)


def new_state(model_name: str, model_uuid: str, juju_version: str,
              logs_dir: str, tools_log: str) -> dict:
    return {
        "format": 1,
        "model": {"name": model_name, "uuid": model_uuid,
                  "juju-version": juju_version},
        "next-relation-id": 0,
        "next-machine-id": 0,
        "machines": {},
        "applications": {},
        "units": {},
        "relations": {},
        "contexts": {},
        "paths": {"logs": logs_dir, "tools-log": tools_log},
    }


# --------------------------------------------------------------------------
# queries over a loaded state dict
# --------------------------------------------------------------------------

class Model:
    """Read/update helpers over one loaded state dict (no I/O)."""

    def __init__(self, data: dict):
        self.data = data

    # -- plain look-ups ---------------------------------------------------
    def app(self, name: str) -> dict:
        try:
            return self.data["applications"][name]
        except KeyError:
            raise ModelError(f'application "{name}" not found') from None

    def unit(self, name: str) -> dict:
        try:
            return self.data["units"][name]
        except KeyError:
            raise ModelError(f'unit "{name}" not found') from None

    def has_unit(self, name: str) -> bool:
        return name in self.data["units"]

    def machine(self, machine_id) -> dict:
        try:
            return self.data["machines"][str(machine_id)]
        except KeyError:
            raise ModelError(f'machine "{machine_id}" not found') from None

    def relation(self, rid) -> dict:
        try:
            return self.data["relations"][str(int(rid))]
        except (KeyError, ValueError):
            raise ModelError(f"relation {rid} not found") from None

    def units_of(self, app: str) -> list[str]:
        units = [u for u, rec in self.data["units"].items() if rec["app"] == app]
        return sorted(units, key=unit_sort_key)

    def relations(self) -> list[dict]:
        return [self.data["relations"][k]
                for k in sorted(self.data["relations"], key=int)]

    # -- relation geometry ---------------------------------------------------
    @staticmethod
    def local_endpoint(rel: dict, app: str) -> dict:
        eps = rel["endpoints"]
        if eps[0]["app"] == app:
            return eps[0]
        if eps[1]["app"] == app:
            return eps[1]
        raise ModelError(f"application {app} is not in relation {rel['id']}")

    @staticmethod
    def remote_endpoint(rel: dict, app: str) -> dict:
        eps = rel["endpoints"]
        if eps[0]["app"] == app:
            return eps[1]
        if eps[1]["app"] == app:
            return eps[0]
        raise ModelError(f"application {app} is not in relation {rel['id']}")

    def relation_key(self, rel: dict, unit: str) -> str:
        """'cni:3' as seen from the unit."""
        app = self.unit(unit)["app"]
        return f"{self.local_endpoint(rel, app)['name']}:{rel['id']}"

    def valid_for(self, rel: dict, unit: str) -> bool:
        """Juju's RelationUnit.Valid(): a subordinate unit takes part in a
        container-scoped relation with its own principal's application, or
        with another subordinate application (nrpe-external-master between
        two subordinates of one principal); container scope then pairs the
        units on the same machine."""
        rec = self.unit(unit)
        app = rec["app"]
        if app not in (rel["endpoints"][0]["app"], rel["endpoints"][1]["app"]):
            return False
        if rel["scope"] != "container":
            return True
        remote_app = self.remote_endpoint(rel, app)["app"]
        if rec.get("principal"):
            return (self.app(remote_app)["subordinate"]
                    or self.unit(rec["principal"])["app"] == remote_app)
        return True

    def participates(self, rel: dict, unit: str) -> bool:
        if not self.valid_for(rel, unit):
            return False
        if rel["life"] == "alive":
            return unit not in rel.get("left", [])
        return unit in rel.get("pending-broken", [])

    def unit_relations(self, unit: str, endpoint: str | None = None) -> list[dict]:
        app = self.unit(unit)["app"]
        out = []
        for rel in self.relations():
            if not self.participates(rel, unit):
                continue
            if endpoint is not None and self.local_endpoint(rel, app)["name"] != endpoint:
                continue
            out.append(rel)
        return out

    def counterparts(self, rel: dict, unit: str) -> list[str]:
        """Remote units this unit can see in the relation, if in scope
        (container scope: only those on the same machine)."""
        rec = self.unit(unit)
        remote_app = self.remote_endpoint(rel, rec["app"])["app"]
        out = []
        for other in rel.get("scope-units", []):
            orec = self.data["units"].get(other)
            if orec is None or orec["app"] != remote_app or other == unit:
                continue
            if rel["scope"] == "container" and orec.get("machine") != rec.get("machine"):
                continue
            out.append(other)
        return sorted(out, key=unit_sort_key)

    def members(self, rel: dict, unit: str) -> list[str]:
        return sorted(rel.get("members", {}).get(unit, []), key=unit_sort_key)

    # -- config ----------------------------------------------------------------
    def config(self, app: str, include_unset: bool = True) -> dict:
        rec = self.app(app)
        out = {}
        for name, opt in rec.get("config-options", {}).items():
            out[name] = opt.get("default")
        out.update(rec.get("config", {}))
        if not include_unset:
            out = {k: v for k, v in out.items() if v is not None}
        return out

    # -- network -----------------------------------------------------------------
    def unit_address(self, unit: str) -> str | None:
        mid = self.unit(unit).get("machine")
        if mid is None:
            return self.unit(unit).get("address")
        return self.machine(mid).get("address")

    def network_info(self, unit: str) -> dict:
        """network-get's answer: the machine's primary interface, plus any
        extra bind addresses the machine has (a fan-* bridge on fan models),
        in the machine's order; ingress and egress stay the primary address."""
        rec = self.unit(unit)
        if rec.get("machine") is None:
            addr = rec.get("address")
            m = {"address": addr, "interface": "eth0", "cidr": None, "mac": None}
        else:
            m = self.machine(rec["machine"])
        addr = m.get("address")
        primary = {"interface": m.get("interface") or "", "mac": m.get("mac") or "",
                   "address": addr, "cidr": m.get("cidr") or ""}
        extra = list(m.get("extra-bind-addresses") or [])
        before = [e for e in extra if e.get("first")]
        after = [e for e in extra if not e.get("first")]
        bind = []
        for entry in before + [primary] + after:
            a = entry.get("address")
            addresses = [{"hostname": "", "address": a, "cidr": entry.get("cidr") or "",
                          "value": a}] if a else []
            mac, iface = entry.get("mac") or "", entry.get("interface") or ""
            bind.append({"mac-address": mac, "interface-name": iface, "addresses": addresses,
                         # legacy spellings Juju still prints beside the new ones
                         "macaddress": mac, "interfacename": iface})
        return {
            "bind-addresses": bind,
            "egress-subnets": [f"{addr}/32"] if addr else [],
            "ingress-addresses": [addr] if addr else [],
        }


def hook_relations(m: Model, unit: str, endpoint: str | None, context: dict | None) -> list:
    """The relations relation-ids lists in a hook: Juju 3.4+ leaves the
    relation out of its own -relation-broken hook."""
    rels = m.unit_relations(unit, endpoint)
    if context and (context.get("hook") or "").endswith("-relation-broken"):
        rels = [r for r in rels if r["id"] != context.get("relation-id")]
    return rels


def unit_sort_key(name: str):
    app, _, num = name.partition("/")
    try:
        return (app, int(num))
    except ValueError:
        return (app, -1)


def unit_tag(unit: str) -> str:
    """flannel/3 -> unit-flannel-3"""
    return "unit-" + unit.replace("/", "-")


def parse_relation_id(value: str) -> int:
    """Accept 'cni:3' or '3' (Juju's -r syntax)."""
    text = value.strip()
    if ":" in text:
        text = text.rsplit(":", 1)[1]
    if not text.isdigit():
        raise ValueError(value)
    return int(text)


def timestamp() -> str:
    """Juju's status timestamps (UTC, seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
