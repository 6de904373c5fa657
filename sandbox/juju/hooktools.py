"""The emulated Juju hook tools ("jujuc" commands).

One entry point, dispatching on the basename of argv[0]; each unit's tools
directory holds a `jujuc` script plus one symlink per tool name (config-get,
relation-get, ...), the way Juju lays out /var/lib/juju/tools/unit-X.

The tools find the model through $JUJU_SANDBOX_STATE (the JSON state file)
and the standard JUJU_* variables the unit agent sets for the hook.  Behaviour
follows Juju's documented hook tools: --format json|yaml|smart (smart by
default), -r/--relation accepting "cni:3" or "3", usage errors exit 2 with
"ERROR ..." on stderr, other failures exit 1.

Only the standard library and PyYAML are used, so the tools run under any
Python that has PyYAML (the interpreter is chosen by the controller).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import shutil
import sys

try:  # inside the sandbox package
    from . import model as _model
except ImportError:  # copied into a unit's tools dir beside _sandbox_juju_model.py
    import _sandbox_juju_model as _model  # type: ignore[no-redef]

Model = _model.Model
ModelError = _model.ModelError

TOOLS = (
    "config-get", "relation-ids", "relation-list", "relation-get", "relation-set",
    "status-set", "status-get", "juju-log", "resource-get", "network-get",
    "application-version-set", "unit-get", "is-leader", "leader-get", "leader-set",
    "goal-state", "open-port", "close-port", "opened-ports", "action-get",
    "action-set", "action-fail", "action-log", "juju-reboot",
)

CONTROLLER_URL = "https://10.0.0.1:17070"  # only used to shape error messages


class Usage(Exception):
    """Bad invocation: exit code 2, like Juju's cmd package."""


class Failure(Exception):
    """The command ran but failed: exit code 1."""


class HelpRequested(Exception):
    pass


# --------------------------------------------------------------------------
# argument parsing, gnuflag style
# --------------------------------------------------------------------------

class Flag:
    def __init__(self, names, dest, takes_value=False, default=None, help_text=""):
        self.names = names
        self.dest = dest
        self.takes_value = takes_value
        self.default = default
        self.help_text = help_text


def parse_args(argv, flags):
    """Parse like Juju's gnuflag: flags may be interspersed with positional
    arguments, `--x=v` and `--x v` (or `-r v`, `-r=v`), `--` ends flags."""
    by_name = {}
    for fl in flags:
        for n in fl.names:
            by_name[n] = fl
    opts = {fl.dest: fl.default for fl in flags}
    positional = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            positional.extend(argv[i + 1:])
            break
        if arg in ("-h", "--help"):
            raise HelpRequested()
        if arg.startswith("-") and arg != "-":
            name, eq, value = arg.partition("=")
            fl = by_name.get(name)
            if fl is None:
                raise Usage(f"option provided but not defined: {name}")
            if fl.takes_value:
                if not eq:
                    i += 1
                    if i >= len(argv):
                        raise Usage(f"option needs an argument: {name}")
                    value = argv[i]
                opts[fl.dest] = value
            else:
                if eq:
                    if value.lower() in ("true", "1"):
                        opts[fl.dest] = True
                    elif value.lower() in ("false", "0"):
                        opts[fl.dest] = False
                    else:
                        raise Usage(f'invalid value "{value}" for flag {name}: parse error')
                else:
                    opts[fl.dest] = True
        else:
            positional.append(arg)
        i += 1
    return opts, positional


FORMAT = Flag(["--format"], "format", True, "smart", "Specify output format (json|smart|yaml)")
OUTPUT = Flag(["-o", "--output"], "output", True, None, "Specify an output file")


def relation_flag():
    return Flag(["-r", "--relation"], "relation", True, None,
                "Specify a relation by id")


# --------------------------------------------------------------------------
# output formatting (juju/cmd's json, yaml and smart formatters)
# --------------------------------------------------------------------------

def _yaml():
    import yaml  # noqa: PLC0415  (only needed by some commands)
    return yaml


def format_value(value, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(value)
    if fmt == "yaml":
        text = _yaml().safe_dump(value, default_flow_style=False)
        if text.endswith("\n...\n"):  # PyYAML's document end marker for scalars
            text = text[: -len("...\n")]
        return text
    if fmt == "smart":
        if value is None:
            return ""
        if isinstance(value, bool):
            return "True" if value else "False"
        if isinstance(value, (int, float, str)):
            return str(value)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return "\n".join(value)
        return format_value(value, "yaml")
    raise Usage(f'invalid value "{fmt}" for option --format: unknown format "{fmt}"')


def check_format(fmt: str) -> None:
    if fmt not in ("json", "yaml", "smart"):
        raise Usage(f'invalid value "{fmt}" for option --format: unknown format "{fmt}"')


def write_output(ctx, value, opts) -> None:
    text = format_value(value, opts.get("format") or "smart")
    if text and not text.endswith("\n"):
        text += "\n"
    if opts.get("output"):
        with open(ctx.caller.path(opts["output"]), "w", encoding="utf-8") as f:
            f.write(text)
    else:
        ctx.caller.stdout.write(text)


# --------------------------------------------------------------------------
# the hook context
# --------------------------------------------------------------------------

class Caller:
    """The process that ran the tool: its standard streams, and its view of
    the filesystem. In a tool's own process that is this process; behind the
    agent socket (sandbox.juju.agent_socket) it is the client, whose files
    the server reaches through /proc/PID/root and /proc/PID/cwd (it may sit in
    a machine's mount namespace)."""

    def __init__(self, stdin=None, stdout=None, stderr=None, pid: int | None = None):
        self.stdin = stdin if stdin is not None else sys.stdin
        self.stdout = stdout if stdout is not None else sys.stdout
        self.stderr = stderr if stderr is not None else sys.stderr
        self.pid = pid

    def path(self, path: str) -> str:
        """`path` as the caller means it, reachable from here. (An absolute
        symlink met below /proc/PID/root resolves in this process's root,
        not the caller's: the sandbox's tools name no such path.)"""
        if self.pid is None:
            return path
        if os.path.isabs(path):
            return f"/proc/{self.pid}/root{path}"
        return f"/proc/{self.pid}/cwd/{path}"


class Context:
    def __init__(self, env, caller: Caller):
        self.env = env
        self.caller = caller
        state_path = env.get(_model.STATE_ENV)
        if not state_path:
            raise Failure(f"{_model.STATE_ENV} is not set: not running inside a sandbox hook")
        self.state = _model.StateFile(state_path)
        self.unit_name = env.get("JUJU_UNIT_NAME")
        if not self.unit_name:
            raise Failure("JUJU_UNIT_NAME is not set")
        self.context_id = env.get(_model.CONTEXT_ENV)
        self.app_name = self.unit_name.split("/")[0]

    def read(self) -> Model:
        return Model(self.state.read())

    @contextlib.contextmanager
    def transaction(self):
        """The state, to change under the writers' lock. A call from a hook
        that has ended (killed while the call was on its way) changes
        nothing: its context is gone, as in Juju."""
        with self.state.transaction() as data:
            if self.context_id and self.context_id not in data.get("contexts", {}):
                raise Failure(f"hook context {self.context_id!r} has ended")
            yield data

    def hook_context(self, data: dict) -> dict | None:
        if not self.context_id:
            return None
        return data.get("contexts", {}).get(self.context_id)

    def require_hook_context(self, data: dict) -> dict:
        ctx = self.hook_context(data)
        if ctx is None:
            raise Failure("not running in a hook context (no such context "
                          f"{self.context_id!r})")
        return ctx

    # relation helpers -------------------------------------------------------
    def resolve_relation(self, m: Model, value: str | None) -> dict:
        """The relation given by -r, else the hook's own relation."""
        if value is None or value == "":
            value = self.env.get("JUJU_RELATION_ID") or ""
            if not value:
                raise Usage("no relation id specified")
        try:
            rid = _model.parse_relation_id(value)
        except ValueError:
            raise Usage(f'invalid value "{value}" for option -r: invalid relation id') from None
        rel = m.data["relations"].get(str(rid))
        if rel is None or not m.participates(rel, self.unit_name):
            raise Usage(f'invalid value "{value}" for option -r: relation not found')
        return rel


# --------------------------------------------------------------------------
# commands
# --------------------------------------------------------------------------

COMMANDS = {}
SUMMARIES = {}
USAGES = {}


def command(name, flags, usage, summary):
    def deco(fn):
        COMMANDS[name] = (fn, flags)
        USAGES[name] = usage
        SUMMARIES[name] = summary
        return fn
    return deco


def help_text(name: str, flags) -> str:
    lines = [f"Usage: {name} [options] {USAGES[name]}".rstrip(), "", "Summary:",
             SUMMARIES[name], "", "Options:"]
    for fl in flags:
        names = ", ".join(fl.names)
        default = "" if fl.default is None else fl.default
        if not fl.takes_value:
            default = "false"
        lines.append(f"{names}  (= {default})")
        lines.append(f"    {fl.help_text}")
    return "\n".join(lines) + "\n"


# -- config-get ---------------------------------------------------------------
@command("config-get",
         [FORMAT, OUTPUT, Flag(["-a", "--all"], "all", help_text="print all keys")],
         "[<key>]", "Print application configuration.")
def cmd_config_get(ctx, opts, args):
    if len(args) > 1:
        raise Usage(f"unrecognized args: {json.dumps(args[1:])}")
    if args and opts["all"]:
        raise Usage("cannot use argument --all together with key " + json.dumps(args[0]))
    m = ctx.read()
    if args:
        write_output(ctx, m.config(ctx.app_name).get(args[0]), opts)
    else:
        write_output(ctx, m.config(ctx.app_name, include_unset=opts["all"]), opts)


# -- relation-ids -------------------------------------------------------------
@command("relation-ids", [FORMAT, OUTPUT], "<name>",
         "List all relation ids for the given endpoint.")
def cmd_relation_ids(ctx, opts, args):
    if len(args) > 1:
        raise Usage(f"unrecognized args: {json.dumps(args[1:])}")
    endpoint = args[0] if args else ctx.env.get("JUJU_RELATION") or ""
    if not endpoint:
        raise Usage("no endpoint name specified")
    m = ctx.read()
    rels = _model.hook_relations(m, ctx.unit_name, endpoint, ctx.hook_context(m.data))
    write_output(ctx, [m.relation_key(r, ctx.unit_name) for r in rels], opts)


# -- relation-list ------------------------------------------------------------
@command("relation-list",
         [relation_flag(), FORMAT, OUTPUT,
          Flag(["--app"], "app",
               help_text="List remote application instead of participating units")],
         "", "List relation units.")
def cmd_relation_list(ctx, opts, args):
    if args:
        raise Usage(f"unrecognized args: {json.dumps(args)}")
    m = ctx.read()
    rel = ctx.resolve_relation(m, opts["relation"])
    if opts["app"]:
        write_output(ctx, m.remote_endpoint(rel, ctx.app_name)["app"], opts)
        return
    write_output(ctx, m.members(rel, ctx.unit_name), opts)


# -- relation-get -------------------------------------------------------------
def pending_writes(ctx_rec, rid) -> dict:
    if not ctx_rec:
        return {"unit": {}, "app": {}}
    return ctx_rec.get("writes", {}).get(str(rid), {"unit": {}, "app": {}})


def merged(current: dict, changes: dict) -> dict:
    out = dict(current)
    for k, v in changes.items():
        if v is None or v == "":
            out.pop(k, None)
        else:
            out[k] = v
    return out


@command("relation-get",
         [relation_flag(), FORMAT, OUTPUT,
          Flag(["--app"], "app",
               help_text="Get the relation data for the overall application, not just a unit")],
         "<key> <unit id>", "Get relation settings.")
def cmd_relation_get(ctx, opts, args):
    if len(args) > 2:
        raise Usage(f"unrecognized args: {json.dumps(args[2:])}")
    key = args[0] if args else ""
    if key == "-":
        key = ""
    m = ctx.read()
    rel = ctx.resolve_relation(m, opts["relation"])
    rkey = m.relation_key(rel, ctx.unit_name)
    remote_app = m.remote_endpoint(rel, ctx.app_name)["app"]
    ctx_rec = ctx.hook_context(m.data)
    if opts["app"]:
        name = args[1] if len(args) > 1 else ctx.env.get("JUJU_REMOTE_APP") or ""
        if not name:
            raise Usage("no unit or application specified")
        name = name.split("/")[0]
        if name == ctx.app_name:
            if m.app(ctx.app_name).get("leader") != ctx.unit_name:
                raise Failure(f'cannot read application settings for "{name}" in '
                              f'relation "{rkey}": permission denied')
            data = merged(rel["app-data"].get(name, {}),
                          pending_writes(ctx_rec, rel["id"])["app"])
        elif name == remote_app:
            data = rel["app-data"].get(name, {})
        else:
            raise Failure(f'cannot read application settings for "{name}" in '
                          f'relation "{rkey}": application "{name}" not in relation')
    else:
        unit = args[1] if len(args) > 1 else ctx.env.get("JUJU_REMOTE_UNIT") or ""
        if not unit:
            raise Usage("no unit id specified")
        if unit == ctx.unit_name:
            data = merged(rel["unit-data"].get(unit, {}),
                          pending_writes(ctx_rec, rel["id"])["unit"])
        elif unit.split("/")[0] == remote_app and unit in rel["unit-data"]:
            data = rel["unit-data"][unit]
        else:
            raise Failure(f'cannot read settings for unit "{unit}" in relation '
                          f'"{rkey}": unit "{unit}": settings not found')
    if key:
        write_output(ctx, data.get(key), opts)
    else:
        write_output(ctx, data, opts)


# -- relation-set -------------------------------------------------------------
def parse_kv(args) -> dict:
    out = {}
    for arg in args:
        key, eq, value = arg.partition("=")
        if not eq or not key:
            raise Usage(f'expected "key=value", got "{arg}"')
        out[key] = value
    return out


@command("relation-set",
         [relation_flag(), Flag(["--file"], "file", True, None, "file containing key-value pairs"),
          Flag(["--format"], "format", True, "", "deprecated format flag"),
          Flag(["--app"], "app",
               help_text='pick whether you are setting "application" settings or "unit" settings')],
         "key=value [key=value ...]", "Set relation settings.")
def cmd_relation_set(ctx, opts, args):
    settings = {}
    if opts["file"]:
        if opts["file"] == "-":
            text = ctx.caller.stdin.read()
        else:
            try:
                with open(ctx.caller.path(opts["file"]), encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise Failure(f"cannot read settings file: {e}") from None
        try:
            loaded = _yaml().safe_load(text) if text.strip() else {}
        except Exception as e:  # noqa: BLE001
            raise Failure(f"cannot parse settings file: {e}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise Failure("cannot parse settings file: expected a map of strings")
        for k, v in loaded.items():
            settings[str(k)] = None if v is None else (
                ("true" if v else "false") if isinstance(v, bool) else str(v))
    settings.update(parse_kv(args))  # an empty relation-set is a no-op, as in Juju
    with ctx.transaction() as data:
        m = Model(data)
        rel = ctx.resolve_relation(m, opts["relation"])
        ctx_rec = ctx.require_hook_context(data)
        if opts["app"] and m.app(ctx.app_name).get("leader") != ctx.unit_name:
            raise Failure("cannot write relation settings: permission denied "
                          "(this unit is not the leader)")
        bag = ctx_rec.setdefault("writes", {}).setdefault(
            str(rel["id"]), {"unit": {}, "app": {}})["app" if opts["app"] else "unit"]
        for k, v in settings.items():
            bag[k] = None if v in (None, "") else v


# -- status-set / status-get ---------------------------------------------------
@command("status-set",
         [Flag(["--application"], "application",
               help_text="set this status for the application to which the unit belongs "
                         "if the unit is the leader")],
         "<maintenance | blocked | waiting | active> [message]",
         "Set status information.")
def cmd_status_set(ctx, opts, args):
    if not args:
        raise Usage("invalid args, require <status> [message] [data]")
    state = args[0]
    if state not in _model.WORKLOAD_SETTABLE:
        raise Usage(f'invalid status "{state}", expected one of '
                    f'[{" ".join(_model.WORKLOAD_SETTABLE)}]')
    if len(args) > 2:
        raise Usage(f"unrecognized args: {json.dumps(args[2:])}")
    message = args[1] if len(args) > 1 else ""
    with ctx.transaction() as data:
        m = Model(data)
        if opts["application"]:
            if m.app(ctx.app_name).get("leader") != ctx.unit_name:
                raise Failure("setting application status: this unit is not the leader")
            m.app(ctx.app_name)["status"] = {"status": state, "message": message,
                                             "since": now()}
        else:
            m.unit(ctx.unit_name)["workload"] = {"status": state, "message": message,
                                                 "set-by-charm": True, "since": now()}


@command("status-get",
         [FORMAT, OUTPUT,
          Flag(["--include-data"], "include_data", help_text="print all status data"),
          Flag(["--application"], "application",
               help_text="print status for all units of this application if this unit "
                         "is the leader")],
         "[--include-data] [--application] [<key>]", "Print status information.")
def cmd_status_get(ctx, opts, args):
    if len(args) > 1:
        raise Usage(f"unrecognized args: {json.dumps(args[1:])}")
    m = ctx.read()
    unit = m.unit(ctx.unit_name)

    def one(w):
        return {"message": w.get("message", ""), "status": w.get("status", "unknown"),
                "status-data": {}}

    if opts["application"]:
        app = m.app(ctx.app_name)
        if app.get("leader") != ctx.unit_name:
            raise Failure("finding application status: this unit is not the leader")
        app_status = app.get("status") or derive_app_status(m, ctx.app_name)
        value = {"application-status": dict(one(app_status), units={
            u: one(m.unit(u)["workload"]) for u in m.units_of(ctx.app_name)})}
    else:
        value = one(unit["workload"])
    if args:
        value = value.get(args[0]) if not opts["application"] else \
            value["application-status"].get(args[0])
    elif not opts["include_data"] and not opts["application"]:
        value = value["status"]
    write_output(ctx, value, opts)


def derive_app_status(m: Model, app: str) -> dict:
    best = {"status": "unknown", "message": ""}
    for u in m.units_of(app):
        w = m.unit(u)["workload"]
        if _model.SEVERITY.get(w.get("status"), 0) > _model.SEVERITY.get(best["status"], 0):
            best = {"status": w.get("status"), "message": w.get("message", "")}
    return best


# -- juju-log -----------------------------------------------------------------
LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@command("juju-log",
         [Flag(["--debug"], "debug", help_text="log at debug level"),
          Flag(["-l", "--log-level"], "level", True, "INFO", "Send log message at the given level"),
          Flag(["--format"], "format", True, "", "deprecated format flag")],
         "<message>", "Write a message to the juju log.")
def cmd_juju_log(ctx, opts, args):
    if not args:
        raise Usage("no message specified")
    level = "DEBUG" if opts["debug"] else (opts["level"] or "INFO").upper()
    if level == "WARN":
        level = "WARNING"
    if level not in LOG_LEVELS:
        raise Usage(f'Specified log level of "{opts["level"]}" is not valid')
    message = " ".join(args)
    prefix = ""
    if ctx.env.get("JUJU_RELATION_ID"):
        prefix = ctx.env["JUJU_RELATION_ID"] + ": "
    m = ctx.read()
    append_unit_log(m, ctx.unit_name, f"{level} unit.{ctx.unit_name}.juju-log {prefix}{message}")


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def append_unit_log(m: Model, unit: str, line: str) -> None:
    path = m.unit(unit).get("log-file")
    if not path:
        return
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{stamp} {line}\n")


# -- resource-get -------------------------------------------------------------
@command("resource-get", [], "<resource name>", "Get the path to the locally cached resource file.")
def cmd_resource_get(ctx, opts, args):
    if not args:
        raise Usage("missing required resource name")
    if len(args) > 1:
        raise Usage(f"unrecognized args: {json.dumps(args[1:])}")
    name = args[0]
    m = ctx.read()
    app = m.app(ctx.app_name)
    unit = m.unit(ctx.unit_name)
    url = (f"{CONTROLLER_URL}/model/{m.data['model']['uuid']}/units/"
           f"{_model.unit_tag(ctx.unit_name)}/resources/{name}")
    meta = app.get("resource-meta", {}).get(name)
    if meta is None:
        raise Failure(f"could not download resource: HTTP request failed: Get {url}: "
                      f'resource "{name}" not found')
    attached = app.get("resources", {}).get(name)
    if not attached or not attached.get("path"):
        raise Failure(f"could not download resource: HTTP request failed: Get {url}: "
                      f"resource#{ctx.app_name}/{name} not found")
    filename = meta.get("filename") or os.path.basename(attached["path"])
    dest_dir = os.path.join(unit["agent-dir"], "resources", name)
    dest = os.path.join(dest_dir, filename)
    try:
        os.makedirs(ctx.caller.path(dest_dir), exist_ok=True)
        tmp = ctx.caller.path(dest + ".part")
        shutil.copyfile(attached["path"], tmp)
        os.replace(tmp, ctx.caller.path(dest))
    except OSError as e:
        raise Failure(f"could not download resource: {e}") from None
    ctx.caller.stdout.write(dest)  # Juju prints the path without a newline


# -- network-get --------------------------------------------------------------
@command("network-get",
         [relation_flag(), FORMAT, OUTPUT,
          Flag(["--primary-address"], "primary",
               help_text="(deprecated) get the primary address for the binding"),
          Flag(["--bind-address"], "bind",
               help_text="get the address for the binding on which the unit should listen"),
          Flag(["--ingress-address"], "ingress",
               help_text="get the ingress address for the binding"),
          Flag(["--egress-subnets"], "egress", help_text="get the egress subnets for the binding")],
         "<binding-name> [--ingress-address] [--bind-address] [--egress-subnets]",
         "Get network config.")
def cmd_network_get(ctx, opts, args):
    m = ctx.read()
    binding = args[0] if args else ""
    if len(args) > 1:
        raise Usage(f"unrecognized args: {json.dumps(args[1:])}")
    if opts["relation"]:
        rel = ctx.resolve_relation(m, opts["relation"])
        if not binding:
            binding = m.local_endpoint(rel, ctx.app_name)["name"]
    if not binding:
        raise Usage("no arguments specified")
    app = m.app(ctx.app_name)
    known = set(app.get("endpoints", {})) | set(app.get("extra-bindings", []))
    if binding not in known:
        raise Failure(f'no network config found for binding "{binding}"')
    info = m.network_info(ctx.unit_name)
    if opts["primary"]:
        addrs = info["bind-addresses"][0]["addresses"]
        write_output(ctx, addrs[0]["address"] if addrs else "", opts)
        return
    picked = {}
    if opts["bind"]:
        addrs = info["bind-addresses"][0]["addresses"]
        picked["bind-address"] = addrs[0]["address"] if addrs else ""
    if opts["ingress"]:
        ing = info["ingress-addresses"]
        picked["ingress-address"] = ing[0] if ing else ""
    if opts["egress"]:
        picked["egress-subnets"] = ",".join(info["egress-subnets"])
    if len(picked) == 1:
        write_output(ctx, next(iter(picked.values())), opts)
    elif picked:
        write_output(ctx, picked, opts)
    elif opts.get("format") == "json":
        write_output(ctx, network_info_json(info), opts)
    else:
        write_output(ctx, info, opts)


# the spellings Juju's network-get prints in YAML only, beside the new ones
# (`json:"-"` in its display struct): JSON has mac-address, interface-name
# and each address's value alone
YAML_ONLY_BINDING_KEYS = ("macaddress", "interfacename")
YAML_ONLY_ADDRESS_KEYS = ("address",)


def network_info_json(info: dict) -> dict:
    return {**info, "bind-addresses": [
        {**{k: v for k, v in binding.items() if k not in YAML_ONLY_BINDING_KEYS},
         "addresses": [{k: v for k, v in address.items() if k not in YAML_ONLY_ADDRESS_KEYS}
                       for address in binding.get("addresses", [])]}
        for binding in info.get("bind-addresses", [])]}


# -- unit-get -----------------------------------------------------------------
@command("unit-get", [FORMAT, OUTPUT], "<setting>", "Print public-address or private-address.")
def cmd_unit_get(ctx, opts, args):
    if not args:
        raise Usage("no setting specified")
    if len(args) > 1:
        raise Usage(f"unrecognized args: {json.dumps(args[1:])}")
    if args[0] not in ("private-address", "public-address"):
        raise Usage(f'unknown setting "{args[0]}"')
    write_output(ctx, ctx.read().unit_address(ctx.unit_name) or "", opts)


# -- application-version-set -----------------------------------------------------
@command("application-version-set", [], "<new-version>",
         "Specify which version of the application is deployed.")
def cmd_application_version_set(ctx, opts, args):
    if len(args) != 1:
        raise Usage("no version specified" if not args else
                    f"unrecognized args: {json.dumps(args[1:])}")
    with ctx.transaction() as data:
        ctx.require_hook_context(data)["app-version"] = args[0]


# -- leadership ----------------------------------------------------------------
@command("is-leader", [FORMAT, OUTPUT], "", "Print application leadership status.")
def cmd_is_leader(ctx, opts, args):
    if args:
        raise Usage(f"unrecognized args: {json.dumps(args)}")
    m = ctx.read()
    write_output(ctx, m.app(ctx.app_name).get("leader") == ctx.unit_name, opts)


@command("leader-get", [FORMAT, OUTPUT], "[<key>]", "Print application leadership settings.")
def cmd_leader_get(ctx, opts, args):
    if len(args) > 1:
        raise Usage(f"unrecognized args: {json.dumps(args[1:])}")
    settings = ctx.read().app(ctx.app_name).get("leader-settings", {})
    if args and args[0] != "-":
        write_output(ctx, settings.get(args[0]), opts)
    else:
        write_output(ctx, settings, opts)


@command("leader-set", [], "<key>=<value> [...]", "Write application leadership settings.")
def cmd_leader_set(ctx, opts, args):
    values = parse_kv(args)
    with ctx.transaction() as data:
        app = Model(data).app(ctx.app_name)
        if app.get("leader") != ctx.unit_name:
            raise Failure("cannot write leadership settings: cannot write settings: not the leader")
        settings = app.setdefault("leader-settings", {})
        for k, v in values.items():
            if v == "":
                settings.pop(k, None)
            else:
                settings[k] = v


# -- goal-state ----------------------------------------------------------------
@command("goal-state", [FORMAT, OUTPUT], "",
         "Print the status of the charm's peers and related units.")
def cmd_goal_state(ctx, opts, args):
    if args:
        raise Usage(f"unrecognized args: {json.dumps(args)}")
    m = ctx.read()

    def st(u):
        rec = m.data["units"].get(u)
        if rec is None:
            return {"status": "dying", "since": now()}
        status = "active" if rec.get("started") else "waiting"
        if rec.get("life") == "dying":
            status = "dying"
        return {"status": status, "since": rec.get("since", now())}

    value = {"units": {u: st(u) for u in m.units_of(ctx.app_name)}, "relations": {}}
    for rel in m.unit_relations(ctx.unit_name):
        ep = m.local_endpoint(rel, ctx.app_name)["name"]
        remote_app = m.remote_endpoint(rel, ctx.app_name)["app"]
        entry = value["relations"].setdefault(ep, {})
        entry[remote_app] = {"status": "joined" if rel["life"] == "alive" else "dying",
                             "since": now()}
        for u in m.counterparts(rel, ctx.unit_name):
            entry[u] = st(u)
    write_output(ctx, value, opts)


# -- ports ---------------------------------------------------------------------
def parse_port_range(spec: str) -> str:
    text = spec.lower()
    if text == "icmp":
        return "icmp"
    ports, _, proto = text.partition("/")
    proto = proto or "tcp"
    if proto not in ("tcp", "udp"):
        raise Usage(f'invalid port range "{spec}": invalid protocol "{proto}"')
    lo, dash, hi = ports.partition("-")
    try:
        a = int(lo)
        b = int(hi) if dash else a
    except ValueError:
        raise Usage(f'invalid port range "{spec}"') from None
    if not (1 <= a <= b <= 65535):
        raise Usage(f'invalid port range "{spec}"')
    return f"{a}/{proto}" if a == b else f"{a}-{b}/{proto}"


def _port_command(ctx, opts, args, action):
    if len(args) != 1:
        raise Usage("no port or range specified" if not args else
                    f"unrecognized args: {json.dumps(args[1:])}")
    port = parse_port_range(args[0])
    with ctx.transaction() as data:
        rec = ctx.require_hook_context(data)
        ports = rec.setdefault("ports", {"open": [], "close": []})
        other = "close" if action == "open" else "open"
        if port in ports[other]:
            ports[other].remove(port)
        if port not in ports[action]:
            ports[action].append(port)


ENDPOINTS = Flag(["--endpoints"], "endpoints", True, "",
                 "a comma-delimited list of application endpoints")
PORT_USAGE = "<port>[/<protocol>] or <from>-<to>[/<protocol>] or icmp"
DEPRECATED_FORMAT = Flag(["--format"], "format", True, "", "deprecated format flag")


@command("open-port", [ENDPOINTS, DEPRECATED_FORMAT], PORT_USAGE,
         "Register a request to open a port or port range.")
def cmd_open_port(ctx, opts, args):
    _port_command(ctx, opts, args, "open")


@command("close-port", [ENDPOINTS, DEPRECATED_FORMAT], PORT_USAGE,
         "Register a request to close a port or port range.")
def cmd_close_port(ctx, opts, args):
    _port_command(ctx, opts, args, "close")


@command("opened-ports",
         [FORMAT, OUTPUT,
          Flag(["--endpoints"], "show_endpoints",
               help_text="display the list of target application endpoints for each port range")],
         "", "List all ports or port ranges opened by the unit.")
def cmd_opened_ports(ctx, opts, args):
    if args:
        raise Usage(f"unrecognized args: {json.dumps(args)}")
    m = ctx.read()
    ports = list(m.unit(ctx.unit_name).get("opened-ports", []))
    rec = ctx.hook_context(m.data)
    if rec:
        for p in rec.get("ports", {}).get("open", []):
            if p not in ports:
                ports.append(p)
        ports = [p for p in ports if p not in rec.get("ports", {}).get("close", [])]
    write_output(ctx, ports, opts)


# -- actions (Juju 3's jujuc action-get/set/fail/log) -------------------------
# action-set's keys: lowercase letters, digits and dashes, dotted for nesting
# (juju/worker/uniter/runner/jujuc/action-set.go); Juju itself sets these.
ACTION_KEY = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$")
RESERVED_ACTION_KEYS = ("stdout", "stdout-encoding", "stderr", "stderr-encoding")


def _action(ctx, data: dict) -> dict:
    action = (ctx.hook_context(data) or {}).get("action")
    if action is None:
        raise Failure("not running an action")
    return action


@command("action-get", [FORMAT, OUTPUT], "[<key>[.<key>.]*]", "Get action parameters.")
def cmd_action_get(ctx, opts, args):
    if len(args) > 1:
        raise Usage(f"unrecognized args: {json.dumps(args[1:])}")
    value = _action(ctx, ctx.state.read())["params"]
    for key in args[0].split(".") if args else ():
        value = value.get(key) if isinstance(value, dict) else None
    write_output(ctx, value, opts)


@command("action-set", [], "<key>=<value> [<key>=<value> ...]", "Set action results.")
def cmd_action_set(ctx, opts, args):
    if not args:
        raise Usage("no key=value pairs specified")
    pairs = []
    for arg in args:
        key, eq, value = arg.partition("=")
        if not eq:
            raise Usage(f'argument "{arg}" must be of the form key...=value')
        parts = key.split(".")
        for part in parts:
            if not ACTION_KEY.match(part):
                raise Usage(f'key "{part}" must start and end with lowercase alphanumeric, '
                            "and contain only lowercase alphanumeric, hyphens and periods")
        if parts[0] in RESERVED_ACTION_KEYS:
            raise Usage(f'cannot set reserved action key "{parts[0]}"')
        pairs.append((parts, value))
    with ctx.transaction() as data:
        results = _action(ctx, data)["results"]
        for parts, value in pairs:
            bag = results
            for part in parts[:-1]:
                if not isinstance(bag.get(part), dict):
                    bag[part] = {}
                bag = bag[part]
            bag[parts[-1]] = value


@command("action-fail", [], "[\"<failure message>\"]", "Set action fail status with message.")
def cmd_action_fail(ctx, opts, args):
    if len(args) > 1:
        raise Usage(f"unrecognized args: {json.dumps(args[1:])}")
    with ctx.transaction() as data:
        _action(ctx, data)["failed"] = args[0] if args else \
            "action failed without reason given"


@command("action-log", [], "<message>", "Record a progress message for the current action.")
def cmd_action_log(ctx, opts, args):
    if not args:
        raise Usage("no message specified")
    with ctx.transaction() as data:
        _action(ctx, data)["log"].append(" ".join(args))


@command("juju-reboot",
         [Flag(["--now"], "now", help_text="reboot immediately, killing the invoking process")],
         "", "Reboot the host machine.")
def cmd_juju_reboot(ctx, opts, args):
    raise Failure("juju-reboot is not supported in the sandbox: "
                  "the machine cannot be rebooted")


# --------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------

REDACT_VALUES = ("relation-set", "leader-set", "action-set")


def _log_invocation(env, name, argv, rc):
    """One JSON line per tool call, for tests (values of key=value args are
    replaced by their length, so keys and certificates never land in it)."""
    state_path = env.get(_model.STATE_ENV)
    if not state_path:
        return
    log_path = os.path.join(os.path.dirname(state_path), "tools.jsonl")
    shown = list(argv)
    if name in REDACT_VALUES:
        shown = [a if "=" not in a or a.startswith("-") else
                 f"{a.split('=', 1)[0]}=<{len(a.split('=', 1)[1])} chars>" for a in argv]
    if name == "juju-log":
        shown = [a if a.startswith("-") else "<message>" for a in argv]
    entry = {"unit": env.get("JUJU_UNIT_NAME"), "hook": env.get("JUJU_HOOK_NAME"),
             "context": env.get(_model.CONTEXT_ENV), "tool": name, "args": shown, "rc": rc}
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
    except OSError:
        pass


def run(name: str, argv: list[str], env=None, caller: Caller | None = None) -> int:
    """Run hook tool `name` with `argv` for the hook whose environment is
    `env`; its output goes to `caller`'s streams. Returns the exit code."""
    env = os.environ if env is None else env
    caller = caller or Caller()
    if name not in COMMANDS:
        caller.stderr.write(f'ERROR unknown command "{name}"\n')
        return 2
    fn, flags = COMMANDS[name]
    rc = 0
    try:
        try:
            opts, args = parse_args(argv, flags)
        except HelpRequested:
            caller.stdout.write(help_text(name, flags))
            return 0
        if "format" in opts and fn not in (cmd_relation_set, cmd_juju_log,
                                           cmd_open_port, cmd_close_port):
            check_format(opts["format"])
        ctx = Context(env, caller)
        fn(ctx, opts, args)
    except Usage as e:
        caller.stderr.write(f"ERROR {e}\n")
        rc = 2
    except (Failure, ModelError) as e:
        caller.stderr.write(f"ERROR {e}\n")
        rc = 1
    finally:
        _log_invocation(env, name, argv, rc)
        for stream in (caller.stdout, caller.stderr):
            try:
                stream.flush()
            except OSError:   # the hook closed its end (`relation-get ... | head -c1`)
                pass
    return rc


def dispatch(argv: list[str]) -> tuple[str, list[str]]:
    """(tool name, its arguments) from a command line: the tool is argv[0]'s
    basename (a symlink to jujuc), or `jujuc TOOL ...`."""
    name = os.path.basename(argv[0])
    if name in ("jujuc", "hooktools.py") and len(argv) > 1:
        return argv[1], list(argv[2:])
    return name, list(argv[1:])


def main(argv=None) -> int:
    name, args = dispatch(sys.argv if argv is None else argv)
    return run(name, args)


if __name__ == "__main__":
    sys.exit(main())
