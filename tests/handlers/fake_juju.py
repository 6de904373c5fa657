"""Juju's side of one unit, in this process: the hook tools charmhelpers
and the charm call (config-get, relation-*, status-set, juju-log,
network-get, resource-get, ...) answered from a small model, as Juju's
unit agent would.
Juju is the one thing no machine here runs (tests/sandbox_juju proves the
sandbox's fuller emulation against Juju's behaviour; this one is for the
handler tier's in-process hooks)."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml


@dataclass
class Relation:
    endpoint: str
    remote_app: str
    units: dict = field(default_factory=dict)     # remote unit -> its data
    local: dict = field(default_factory=dict)     # this unit's data
    # remote units departing: relation-get still reads their data in the
    # -departed hook, relation-list no longer names them
    departing: dict = field(default_factory=dict)


class FakeJuju:
    def __init__(self, unit: str, config: dict):
        self.unit = unit
        self.config = dict(config)
        self.relations: dict[str, Relation] = {}
        self.statuses: list[tuple[str, str]] = []
        self.logs: list[tuple[str, str]] = []
        self.bind_addresses = [{"interface-name": "eth0",
                                "addresses": [{"value": "172.31.254.11",
                                               "cidr": "172.31.254.0/24"}]}]
        self.resources: dict[str, str] = {}
        self.version: Optional[str] = None
        self.calls: list[tuple] = []    # (tool, *args), as the unit made them
        self._next_id = 0

    # --- the model ------------------------------------------------------------------
    def relate(self, endpoint: str, remote_app: str, units: dict) -> str:
        self._next_id += 1
        rid = f"{endpoint}:{self._next_id}"
        self.relations[rid] = Relation(endpoint, remote_app, dict(units))
        return rid

    def unrelate(self, rid: str) -> None:
        del self.relations[rid]

    def relation(self, endpoint: str) -> Relation:
        return next(r for r in self.relations.values() if r.endpoint == endpoint)

    @property
    def status(self) -> tuple[str, str]:
        return self.statuses[-1] if self.statuses else ("unknown", "")

    # --- the tools ----------------------------------------------------------------------
    def tool(self, argv: list, input_file: Optional[str] = None) -> str:
        """One tool call: its stdout; CalledProcessError as the tool fails."""
        name, args = Path(argv[0]).name, [str(a) for a in argv[1:]]
        self.calls.append((name, *args))
        handler = getattr(self, "_" + name.replace("-", "_"), None)
        if handler is None:
            raise subprocess.CalledProcessError(2, argv, b"", f"unknown tool {name}".encode())
        out = handler(args)
        return out if out is not None else ""

    def _config_get(self, args):
        return json.dumps(self.config)

    def _relation_ids(self, args):
        endpoint = [a for a in args if not a.startswith("--")][0]
        return json.dumps([rid for rid, r in self.relations.items() if r.endpoint == endpoint])

    def _relation_list(self, args):
        rid = args[args.index("-r") + 1]
        relation = self.relations.get(rid)
        return json.dumps(sorted(relation.units) if relation else [])

    def _relation_get(self, args):
        rid = args[args.index("-r") + 1]
        rest = [a for a in args if not a.startswith("--") and a not in ("-r", rid)]
        key, unit = (rest + ["-", self.unit])[:2]
        relation = self.relations.get(rid)
        if relation is None:
            raise subprocess.CalledProcessError(1, ["relation-get"], b"", b"no such relation")
        data = relation.local if unit == self.unit else \
            relation.units.get(unit, relation.departing.get(unit, {}))
        return json.dumps(data if key == "-" else data.get(key))

    def _relation_set(self, args):
        if args == ["--help"]:
            return "usage: relation-set [options] key=value ...\n--file  file containing settings"
        rid = args[args.index("-r") + 1]
        settings = {}
        if "--file" in args:
            settings = yaml.safe_load(Path(args[args.index("--file") + 1]).read_text()) or {}
        for pair in args:
            if "=" in pair:
                key, _, value = pair.partition("=")
                settings[key] = value
        local = self.relations[rid].local
        for key, value in settings.items():
            if value in (None, ""):
                local.pop(key, None)
            else:
                local[key] = str(value)

    def _status_set(self, args):
        self.statuses.append((args[0], args[1] if len(args) > 1 else ""))

    def _status_get(self, args):
        return json.dumps(self.status[0])

    def _juju_log(self, args):
        level = args[args.index("-l") + 1] if "-l" in args else "INFO"
        self.logs.append((level, args[-1]))

    def _network_get(self, args):
        shown = {"bind-addresses": self.bind_addresses}
        as_json = "json" in args or "--format=json" in args
        return json.dumps(shown) if as_json else yaml.safe_dump(shown)

    def _resource_get(self, args):
        path = self.resources.get(args[0])
        if path is None:
            raise subprocess.CalledProcessError(1, ["resource-get"], b"", b"no resource")
        return path

    def _application_version_set(self, args):
        self.version = args[0]

    def _is_leader(self, args):
        return json.dumps(self.unit.endswith("/0"))

    def _leader_get(self, args):
        return json.dumps({})

    def _goal_state(self, args):
        return json.dumps({"units": {}, "relations": {}})

    def _open_port(self, args):
        return ""


class ToolRunner:
    """What charmhelpers' hookenv sees as its `subprocess` module, and
    subprocess.check_output for the charm's own tool calls: hook tools go
    to the FakeJuju, anything else runs for real."""

    CalledProcessError = subprocess.CalledProcessError
    STDOUT = subprocess.STDOUT
    PIPE = subprocess.PIPE

    def __init__(self, juju: FakeJuju, check_output=subprocess.check_output):
        self.juju = juju
        self._check_output = check_output   # the real one, while a hook replaces it

    def _tool(self, cmd) -> Optional[str]:
        if isinstance(cmd, (list, tuple)) and cmd and hasattr(
                self.juju, "_" + Path(str(cmd[0])).name.replace("-", "_")):
            return self.juju.tool(list(cmd))
        return None

    def check_output(self, cmd, *args, **kwargs):
        out = self._tool(cmd)
        if out is None:
            return self._check_output(cmd, *args, **kwargs)
        text = kwargs.get("universal_newlines") or kwargs.get("text")
        return out if text else out.encode()

    def check_call(self, cmd, *args, **kwargs):
        out = self._tool(cmd)
        return 0 if out is not None else subprocess.check_call(cmd, *args, **kwargs)

    def call(self, cmd, *args, **kwargs):
        try:
            return self.check_call(cmd, *args, **kwargs)
        except subprocess.CalledProcessError as failed:
            return failed.returncode

    def __getattr__(self, name):
        return getattr(subprocess, name)


def log_to_stderr(juju: FakeJuju) -> None:   # for a failing test's eyes
    for level, message in juju.logs:
        print(f"{level}: {message}", file=sys.stderr)
