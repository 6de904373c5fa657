"""The emulated Juju controller: one model, its operations, its hook queue, status.

Controller puts together the model operations (operations.py), the hook
queue and settle() (scheduler.py) and status (status.py); this module holds
its state and the read-only views of the model.

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
  upgrade-charm then config-changed, ahead of what each unit has queued (as
  Juju's uniter carries out a refresh first); leader-set: leader-settings-changed on
  the other units; update_status(): update-status on every started unit.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import uuid

from . import model as _model
from .agent import HookRun, ToolsInstaller, UnitAgent
from .agent_socket import AgentSocket
from .executors import DEFAULT_TIMEOUT
from .model import Model, ModelError
from .operations import (ModelOperations, coerce_config, endpoints_from_metadata,  # noqa: F401
                         split_endpoint)
from .scheduler import HookScheduler, SettleError, apply_changes  # noqa: F401
from .status import format_status as _format_status, model_status
from .versions import JUJU_3_6, rules_for

JUJU_VERSION = JUJU_3_6
PARALLEL_ENV = "SANDBOX_JUJU_PARALLEL"
DEFAULT_PARALLEL = 16
# Juju's uniter retries a failed hook after 5 s, doubling up to 5 min
RETRY_DELAYS = (5, 10, 20, 40, 80, 160, 300)
RELATION_HOOKS = ("created", "joined", "changed", "departed", "broken")


class Controller(ModelOperations, HookScheduler):
    """One emulated model.

    state_dir holds state.json (+ .lock), hooks.jsonl, tools.jsonl, logs/,
    run/ and the staging copy of the hook tools; it must be visible (same
    path) inside every machine whose executor runs hooks."""

    def __init__(self, state_dir, model_name="sandbox", *,
                 juju_version=JUJU_VERSION, hook_timeout=DEFAULT_TIMEOUT,
                 extra_env=None, arch="amd64", parallel=None, seed=None,
                 auto_retry=False, retry_delays=RETRY_DELAYS):
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
        # what this Juju does differently (versions.py): 3.x, or 4.0
        self.rules = rules_for(juju_version)
        self.tools = ToolsInstaller(os.path.join(self.state_dir, "tools"), juju_version,
                                    arch=arch, removed=self.rules.removed_tools)
        self.tools.build()
        # the hook tools' calls run here, in this process (until close())
        self.agent_socket = AgentSocket(os.path.join(self.state_dir, "agent.socket")).start()
        self.agent = UnitAgent(self.state, os.path.join(self.state_dir, "run"), self.tools,
                               self.agent_socket.path, timeout=hook_timeout,
                               extra_env=extra_env, metering_env=self.rules.metering_env)
        self.executors: dict[str, object] = {}
        self.emulated: dict[str, object] = {}
        self.queue: list[dict] = []
        # hooks of units on different machines run concurrently, up to this many
        # at once (1: one hook at a time, in queue order)
        self.parallel = int(parallel or os.environ.get(PARALLEL_ENV) or DEFAULT_PARALLEL)
        self.hook_log: list[HookRun] = []
        # the machine lock's order: None, queue order (the first unit queued
        # wins); a seed, a seeded choice among the units waiting for it
        self.seed = seed
        self._lock_order = random.Random(seed) if seed is not None else None
        # which of a unit's pending relation hooks goes next: Juju takes them
        # from a Go map; None, queue order
        self._relation_order = random.Random(f"{seed}-relations") if seed is not None else None
        # a failed hook: retried by the agent itself after a back-off
        # (auto_retry, Juju's own behaviour), or held until resolve()
        self.auto_retry = auto_retry
        self.retry_delays = tuple(retry_delays)
        self._retries: dict[str, tuple[float, int]] = {}   # unit -> (due, failures in a row)
        self._failed: dict[str, dict] = {}   # unit -> the queued entry whose hook failed
        self._seq = itertools.count(1)
        self._manifests: dict[str, list[str]] = {}
        self._machines_with_tools: set[str] = set()
        self._kills: dict[tuple[str, str], float] = {}  # kill_hook_after()

    # ======================================================================
    # faults
    # ======================================================================
    def kill_hook_after(self, unit: str, hook: str, seconds: float) -> None:
        """The next `hook` of `unit` is SIGKILLed (its whole process group,
        as a machine dying mid-hook would leave it) `seconds` after it
        started; used once. The killed hook fails like any failed hook (the
        unit in error, `hook failed: "<hook>"`) and resolve() re-runs it.
        If the hook ends sooner, nothing is killed (HookRun.killed_after is
        None) and the kill is used up all the same. The unit need not exist
        yet (a subordinate's install: units appear while settling)."""
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        if "/" not in unit:
            raise ModelError(f'"{unit}" is not a unit name')
        if self.model().app(unit.split("/", 1)[0])["kind"] == "emulated":  # or ModelError
            raise ValueError(f"{unit} is emulated: it runs no hook process to kill")
        self._kills[(unit, hook)] = float(seconds)

    def pending_kills(self) -> dict[tuple[str, str], float]:
        """Kills armed whose hook has not started yet."""
        return dict(self._kills)

    def cancel_kills(self) -> dict[tuple[str, str], float]:
        """Disarm every pending kill; returns what was pending."""
        pending, self._kills = self._kills, {}
        return pending

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
    # status
    # ======================================================================
    def status(self) -> dict:
        """A `juju status --format=yaml`-like structure."""
        return model_status(self.state.read())

    def format_status(self) -> str:
        """A `juju status`-like table."""
        return _format_status(self.status())

    def close(self) -> None:
        """Stop answering hook tools (the agent socket)."""
        self.agent_socket.close()

    def remove_state(self) -> None:
        shutil.rmtree(self.state_dir, ignore_errors=True)
