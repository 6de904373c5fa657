"""The hook queue of the emulated controller: what runs next, and running it.

Operations (sandbox.juju.operations) append entries to `queue`; settle()
runs them until nothing runnable is left.  An entry is a hook for one unit
({"unit", "op": "hook", "hook", "relation", "remote_unit", "remote_app",
"departing"}) or a step of the agent's life ("setup", "setup-relations",
"leader", "enter-scopes", "enter-scope", "deploy-charm", "destroy") that
expands into hooks or changes the model.

Rules (Juju's): one unit's hooks run one at a time, in the order queued (a
refresh goes ahead of what is queued: upgrade-charm, then config-changed); a
unit in error runs nothing until resolved; a change notification
(relation-changed, config-changed, ...) identical to one still pending is
merged into it; a successful hook's relation settings are committed when it
exits and queue -relation-changed on the units that see them, a failed
hook's are discarded.

HookScheduler is a mixin of Controller: it uses the controller's state,
agent, executors, emulated apps and hook log, and _add_unit() of the
model operations.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
import uuid

from . import model as _model
from .agent import HookRun
from .model import Model, timestamp as _now


class SettleError(RuntimeError):
    """settle() ran out of its hook budget or time (a hook loop?)."""


class HookScheduler:
    """The hook queue and settle() (mixin of Controller)."""

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

    def _enqueue_first(self, unit: str, entries: list[dict]) -> None:
        """Queue `entries` ahead of everything the unit has pending: a
        refresh, which Juju's uniter carries out before the events it has
        queued, and whose upgrade-charm it always follows with
        config-changed (a pending config-changed of the unit is merged into
        that one: it will see the latest config)."""
        entries = [dict(e) for e in entries]
        if any(e.get("hook") == "config-changed" for e in entries):
            self.queue[:] = [e for e in self.queue if not (
                e["unit"] == unit and e.get("op") == "hook" and e.get("hook") == "config-changed")]
        at = next((i for i, e in enumerate(self.queue) if e["unit"] == unit), len(self.queue))
        self.queue[at:at] = entries

    def _lane(self, data: dict, unit: str) -> str:
        """Hooks of units on one machine run one at a time: Juju's unit
        agents take the machine's hook-execution lock ("machine-lock") around
        every hook.  Units on no machine (emulated etcd) have a lane each."""
        mid = data["units"][unit].get("machine")
        return f"machine-{mid}" if mid is not None else f"unit-{unit}"

    def _next_entry(self, data: dict, busy_units=(), busy_lanes=()):
        """The entry that can start now: each unit's entries in their order,
        nothing for a unit in error or still running a hook; a hook also
        needs its machine's lane free. Which unit's goes first: the first
        queued, or with a seed (Controller(seed=)) a seeded pick among the
        units that could, as unit agents race for Juju's machine lock."""
        if self._lock_order is None:
            return self._first_entry(data, busy_units, busy_lanes)
        ready = []
        while True:
            entry = self._first_entry(data, busy_units, busy_lanes,
                                      skip={e["unit"] for e in ready})
            if entry is None:
                break
            ready.append(entry)
        return self._lock_order.choice(ready) if ready else None

    def _first_entry(self, data: dict, busy_units=(), busy_lanes=(), skip=()):
        seen = set(skip)
        for e in list(self.queue):
            u = e["unit"]
            if u in seen:
                continue
            seen.add(u)
            rec = data["units"].get(u)
            if rec is None:
                self._drop(e)  # the unit is gone
                continue
            if rec["agent"]["status"] == "error" and not self._retry_due(u):
                continue
            if u in busy_units:
                continue
            if e["op"] == "hook" and self._lane(data, u) in busy_lanes:
                continue
            if e["op"] == "destroy" and any(r.get("principal") == u
                                            for r in data["units"].values()):
                continue   # Juju removes a principal once its subordinates are gone
            # after a failure the agent runs that hook again first (retried
            # by itself, or after `juju resolve`), wherever it stood in the
            # unit's queue; starting it clears the error
            return self.failed_entry(u) or self._relation_hook_pick(e)
        return None

    def failed_entry(self, unit: str) -> dict | None:
        """The queued entry whose hook failed and put `unit` in error."""
        failed = self._failed.get(unit)
        return failed if any(e is failed for e in self.queue) else None

    def _relation_hook_pick(self, first: dict) -> dict:
        """Which of a unit's pending relation hooks runs next: Juju's uniter
        takes them from a Go map, in no fixed order. With a seed, a seeded
        pick among the first pending hook of each relation in the run of
        relation hooks at the head of the unit's queue (one relation's
        hooks keep their order: joined before changed, departed before
        broken); without one, queue order."""
        if self._relation_order is None or "-relation-" not in (first.get("hook") or ""):
            return first
        heads, started = {}, False
        for e in self.queue:
            if e["unit"] != first["unit"]:
                continue
            started = started or e is first
            if not started:
                continue
            if e.get("op") != "hook" or "-relation-" not in (e.get("hook") or ""):
                break
            heads.setdefault(e.get("relation"), e)
        choices = list(heads.values())
        return self._relation_order.choice(choices) if len(choices) > 1 else first

    # -- automatic retry of failed hooks (Controller(auto_retry=True)) -----------------
    def _hook_failed(self, unit: str) -> None:
        _, failures = self._retries.get(unit, (0.0, 0))
        delay = self.retry_delays[min(failures, len(self.retry_delays) - 1)]
        self._retries[unit] = (time.monotonic() + delay, failures + 1)

    def _retry_due(self, unit: str) -> bool:
        if not self.auto_retry or unit not in self._retries:
            return False
        return time.monotonic() >= self._retries[unit][0]

    def retry_pending(self) -> dict[str, float]:
        """Units in error whose failed hook the agent will retry: unit ->
        seconds until it does (0: at the next settle())."""
        now = time.monotonic()
        return {u: max(0.0, due - now) for u, (due, _) in self._retries.items()
                if self.auto_retry and self.model().has_unit(u)
                and self.unit(u)["agent"]["status"] == "error"}

    def pending(self) -> list[dict]:
        return [dict(e) for e in self.queue]

    def settle(self, max_hooks: int = 2000, timeout: float | None = None,
               stop_before=None, hold=None) -> list[HookRun]:
        """Run queued work until nothing runnable is left (units in error
        keep their queue), or, with stop_before(entry) true for the next
        runnable entry, until the hooks running finish: the model as it is
        at that point (a unit removed before its start hook ran, say).
        Hooks of units on different machines run at the same time (up to
        `self.parallel`), as Juju's unit agents do; one
        machine runs one hook at a time.  The queue and the model's
        bookkeeping are only touched here, in the calling thread; worker
        threads only run hook processes (or emulated hooks).  With
        hold(unit) true, that unit's agent runs nothing in this call (it is
        slow to get the machine lock, say) while the others go on.  Returns
        the hooks run by this call."""
        start = len(self.hook_log)
        deadline = time.monotonic() + timeout if timeout else None
        steps = 0
        running: dict = {}  # future -> (entry, job)
        stopped = False
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.parallel),
                                                   thread_name_prefix="hook") as pool:
            try:
                while True:
                    busy_units = {e["unit"] for e, _ in running.values()}
                    if hold is not None:
                        busy_units |= {e["unit"] for e in self.queue if hold(e["unit"])}
                    busy_lanes = {job["lane"] for _, job in running.values()}
                    entry = None
                    if len(running) < max(1, self.parallel) and not stopped:
                        entry = self._next_entry(self.state.read(), busy_units, busy_lanes)
                        if entry is not None and stop_before is not None and stop_before(entry):
                            entry, stopped = None, True
                    if entry is not None:
                        steps += 1
                        if steps > max_hooks * 4 or len(self.hook_log) - start > max_hooks:
                            raise SettleError(f"model did not settle after {max_hooks} hooks; "
                                              f"next: {entry}")
                        if deadline and time.monotonic() > deadline:
                            raise SettleError(f"model did not settle within {timeout}s; "
                                              f"next: {entry}")
                        if entry["op"] != "hook":
                            self._execute(entry)
                            continue
                        job = self._begin_hook(entry)
                        if job is None:
                            continue
                        if job["emulated"] and not getattr(
                                self.emulated[job["record"]["app"]], "threadsafe", True):
                            # e.g. real charm code run in this process (os.environ, sqlite)
                            self._finish_hook(entry, job, self._run_job(job))
                            continue
                        running[pool.submit(self._run_job, job)] = (entry, job)
                        continue
                    if not running:
                        break
                    wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                    done, _ = concurrent.futures.wait(
                        running, timeout=wait, return_when=concurrent.futures.FIRST_COMPLETED)
                    if not done:
                        raise SettleError(f"model did not settle within {timeout}s; running: "
                                          f"{[e for e, _ in running.values()]}")
                    for fut in sorted(done, key=lambda f: running[f][1]["seq"]):
                        entry, job = running.pop(fut)
                        self._finish_hook(entry, job, fut.result())
            finally:
                for fut in concurrent.futures.as_completed(list(running)):
                    entry, job = running.pop(fut)
                    self._finish_hook(entry, job, fut.result())
        self._cleanup()
        return self.hook_log[start:]

    def _drop(self, entry: dict) -> None:
        for i, e in enumerate(self.queue):
            if e is entry:
                del self.queue[i]
                return

    def _replace(self, entry, new_entries):
        for i, e in enumerate(self.queue):
            if e is entry:
                self.queue[i:i + 1] = new_entries
                return
        raise AssertionError(f"{entry} is not queued")

    def _execute(self, entry):
        op = entry["op"]
        unit = entry["unit"]
        if op == "setup":
            with self.state.transaction() as data:
                m = Model(data)
                rec = m.unit(unit)
                rec["phase"] = "setting-up"
            # A unit enters its relations' scopes right after its install
            # (Juju's uniter): a principal's subordinates are created then,
            # not after its start, and may install before it starts.
            self._replace(entry, [
                {"unit": unit, "op": "hook", "hook": "install"},
                {"unit": unit, "op": "setup-relations"},
                {"unit": unit, "op": "enter-scopes"},
                {"unit": unit, "op": "leader"},
                {"unit": unit, "op": "hook", "hook": "config-changed"},
                {"unit": unit, "op": "hook", "hook": "start"},
            ])
        elif op == "setup-relations":
            m = self.model()
            new = [self._hook_entry(m, unit, rel, "created") for rel in m.unit_relations(unit)
                   if rel["life"] == "alive" and unit not in rel["created"]]
            self._replace(entry, new)
        elif op == "leader":
            m = self.model()
            leader = m.app(m.unit(unit)["app"])["leader"] == unit
            if leader or self.rules.leader_settings_changed:
                hook = "leader-elected" if leader else "leader-settings-changed"
                self._replace(entry, [{"unit": unit, "op": "hook", "hook": hook}])
            else:   # Juju 4: no leader settings, no leader-settings-changed
                self._drop(entry)
        elif op == "enter-scopes":
            with self.state.transaction() as data:
                m = Model(data)
                m.unit(unit)["phase"] = "done"
                rels = [r["id"] for r in m.unit_relations(unit)
                        if r["life"] == "alive" and unit in r["created"]]
            self._replace(entry, [{"unit": unit, "op": "enter-scope", "relation": rid}
                                  for rid in rels])
        elif op == "enter-scope":
            self._drop(entry)
            self._enter_scope(unit, entry["relation"])
        elif op == "deploy-charm":
            self._drop(entry)
            rec = self.unit(unit)
            app = self.model().app(rec["app"])
            self._manifests[unit] = self.agent.upgrade_charm(
                self.executor_for(unit), rec, app["charm-dir"], self._manifests.get(unit, []))
        elif op == "destroy":
            self._drop(entry)
            self._destroy(unit)
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
                if self.rules.seeds_private_address:   # (not Juju 4)
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
    def _begin_hook(self, entry: dict) -> dict | None:
        """Open the hook's context in the model (or drop a hook that has
        nothing left to tell); returns what the worker needs to run it."""
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
                    self._drop(entry)
                    return None
                members = rel["members"].setdefault(unit, [])
                if kind == "joined":
                    if remote not in rel["scope-units"]:
                        self._drop(entry)  # it left before we saw it join
                        return None
                    if remote not in members:
                        members.append(remote)
                elif kind == "changed" and remote is not None and remote not in members:
                    self._drop(entry)
                    return None
                elif kind == "departed" and remote in members:
                    members.remove(remote)
            data["contexts"][context_id] = {
                "unit": unit, "hook": hook, "relation-id": rid,
                "remote-unit": remote, "remote-app": entry.get("remote_app"),
                "departing-unit": entry.get("departing"),
                "writes": {}, "app-version": None, "ports": {"open": [], "close": []},
            }
            if hook == "install" and not rec["workload"].get("set-by-charm"):
                rec["workload"] = {"status": "maintenance", "message": "installing charm software",
                                   "set-by-charm": False, "since": _now()}
            rec["agent"] = {"status": "executing", "message": f"running {hook} hook",
                            "failed-hook": None, "since": _now()}
            app = m.app(rec["app"])
            rel_env = {}
            if rel is not None:
                ep = m.local_endpoint(rel, rec["app"])["name"]
                rel_env = {"JUJU_RELATION": ep, "JUJU_RELATION_ID": f"{ep}:{rid}",
                           "JUJU_REMOTE_UNIT": remote or "",
                           "JUJU_REMOTE_APP": entry.get("remote_app") or "",
                           "JUJU_DEPARTING_UNIT": entry.get("departing") or ""}
            machine = data["machines"].get(str(rec.get("machine")))
            return {"unit": unit, "hook": hook, "entry": dict(entry), "context": context_id,
                    "rel_env": rel_env,
                    "seq": next(self._seq), "lane": self._lane(data, unit),
                    "emulated": app["kind"] == "emulated",
                    "kill_after": self._kills.pop((unit, hook), None)
                    if app["kind"] != "emulated" else None,
                    "executor": self.executors.get(str(rec.get("machine"))),
                    "model": {"model": dict(data["model"])}, "record": dict(rec),
                    "machine": dict(machine) if machine else None,
                    "leader-settings": dict(app.get("leader-settings", {}))}

    def _run_job(self, job: dict) -> HookRun:
        """In a worker thread: run the hook, touching no controller state."""
        if job["emulated"]:
            return self._run_emulated(job)
        return self.agent.run_hook(job["executor"], job["model"], job["record"], job["hook"],
                                   job["context"], job["rel_env"], job["seq"], job["machine"],
                                   kill_after=job.get("kill_after"))

    def _finish_hook(self, entry: dict, job: dict, run: HookRun) -> None:
        """Close the hook's context: commit its writes (or put the unit in
        error), queue what they cause, log the run."""
        unit, hook = job["unit"], job["hook"]
        ok = run.exit_code in (0, None)
        with self.state.transaction() as data:
            m = Model(data)
            ctx = data["contexts"].pop(job["context"], None)
            rec = m.unit(unit)
            if ok:
                self._commit(m, unit, ctx)
                self._after_hook(m, entry, ok=True)
                rec["agent"] = {"status": "idle", "message": "", "failed-hook": None,
                                "since": _now()}
                self._retries.pop(unit, None)
                self._failed.pop(unit, None)
            else:
                rec["agent"] = {"status": "error", "message": f'hook failed: "{hook}"',
                                "failed-hook": hook, "since": _now()}
                self._failed[unit] = entry
                self._hook_failed(unit)
            app = m.app(rec["app"])
            # Only the leader writes leader settings: a change seen when another
            # unit's hook ends (hooks run concurrently) is not that unit's.
            if app.get("leader") == unit and \
                    app.get("leader-settings", {}) != job["leader-settings"]:
                for u in m.units_of(rec["app"]):
                    urec = m.unit(u)
                    if u != unit and urec["life"] == "alive" and urec["phase"] != "pending":
                        self._enqueue({"unit": u, "op": "hook", "hook": "leader-settings-changed"})
        if ok:
            self._drop(entry)
        self.hook_log.append(run)
        with open(self.hooks_log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(run.as_dict()) + "\n")

    def _run_emulated(self, job: dict) -> HookRun:
        from .apps import HookContext
        unit, hook, rel_env, seq = job["unit"], job["hook"], job["rel_env"], job["seq"]
        obj = self.emulated[job["record"]["app"]]
        ctx = HookContext(self, unit, hook, job["context"], job["entry"])
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
            if rel is None or self._leaving(ctx, unit, rel):
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

    @staticmethod
    def _leaving(ctx: dict, unit: str, rel: dict) -> bool:
        """Juju 3 does not publish what a unit writes to a relation in a
        -relation-departed hook of that relation when it is the one leaving
        (its own departure, or the relation going away)."""
        hook = ctx.get("hook") or ""
        return (hook.endswith("-relation-departed") and ctx.get("relation-id") == rel["id"]
                and (ctx.get("departing-unit") == unit or rel["life"] != "alive"))

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


def apply_changes(bag: dict, changes: dict) -> None:
    for k, v in changes.items():
        if v is None or v == "":
            bag.pop(k, None)
        else:
            bag[k] = v
