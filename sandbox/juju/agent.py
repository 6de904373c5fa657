"""The unit agent: lays out a unit's files in its machine and runs its hooks.

In a machine (through its executor):
    /var/lib/juju/agents/unit-flannel-3/charm      the deployed charm (CHARM_DIR)
    /var/lib/juju/agents/unit-flannel-3/resources  resource-get's downloads
    /var/lib/juju/tools/unit-flannel-3/            jujuc + one symlink per hook tool
    /var/lib/juju/tools/machine-N/jujud            fake jujud (`jujud version`)

A hook runs as Juju runs it: $CHARM_DIR/dispatch if the charm has one
(JUJU_DISPATCH_PATH=hooks/<name>), else $CHARM_DIR/hooks/<name> with argv[0]
that path, cwd CHARM_DIR, stdin /dev/null, a clean environment.  A missing
hook is skipped.  stdout/stderr go to files (not pipes, so a daemon the hook
leaves running cannot hold the agent up) under the model's run/ directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import time

from . import model as _model
from .executors import DEFAULT_TIMEOUT

PKG_DIR = os.path.dirname(os.path.abspath(__file__))

API_ADDRESS = "10.0.0.1:17070"  # the emulated controller has no API: for show only
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/snap/bin"

MISSING_MARK = b"SANDBOX-JUJU-HOOK-MISSING"
NO_CHARM_MARK = b"SANDBOX-JUJU-NO-CHARM-DIR"

# $1 charm dir, $2 what Juju would dispatch (hooks/<hook>, actions/<action>),
# $3 stdout file, $4 stderr file. The hook writes to files (a daemon it starts
# may keep them open); the wrapper waits for it rather than exec it, holding
# the pipes the agent reads until the hook ends: with them closed at exec,
# subprocess's wait(timeout) polls every 50 ms, ~25 ms more per hook.
HOOK_WRAPPER = r'''
cd "$1" 2>/dev/null || { echo SANDBOX-JUJU-NO-CHARM-DIR; exit 0; }
charm=$1 path=$2 out=$3 err=$4
if [ -e "$charm/dispatch" ]; then
    "$charm/dispatch" </dev/null >"$out" 2>"$err"
    exit $?
fi
if [ -e "$charm/$path" ]; then
    "$charm/$path" </dev/null >"$out" 2>"$err"
    exit $?
fi
echo SANDBOX-JUJU-HOOK-MISSING
'''


@dataclasses.dataclass
class HookRun:
    """One dispatched hook, as the hook log records it."""
    seq: int
    unit: str
    hook: str
    exit_code: int | None          # None: hook missing (skipped)
    duration: float
    relation_id: str | None = None  # "cni:3"
    remote_unit: str | None = None
    remote_app: str | None = None
    departing_unit: str | None = None
    skipped: bool = False
    emulated: bool = False
    stdout_tail: str = ""
    stderr_tail: str = ""
    started_at: float = 0.0
    kill_after: float | None = None    # a kill was armed this many seconds in
    killed_after: float | None = None  # SIGKILLed this many seconds in
    kill_missed: bool = False           # a kill was armed, but the hook ended first

    @property
    def ok(self) -> bool:
        return self.exit_code in (0, None)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def tail(data: bytes | str, limit: int = 4000) -> str:
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    return data[-limit:]


class ToolsInstaller:
    """Builds the host-side staging copy of the hook tools once per model:
    the jujuc client (sandbox.forwarding, served by sandbox.juju.agent_socket)
    and one symlink to it per tool, as Juju lays out a unit's tools
    directory, plus the fake jujud."""

    def __init__(self, staging_dir: str, juju_version: str, series="ubuntu", arch="amd64",
                 removed=frozenset()):
        self.staging = staging_dir
        self.juju_version = juju_version
        self.removed = frozenset(removed)   # tools this Juju does not have (versions.py)
        self.jujud_version = f"{juju_version}-{series}-{arch}"
        self.jujud_path = os.path.join(os.path.dirname(staging_dir), "jujud")

    def build(self) -> None:
        from ..forwarding import build_client
        from .hooktools import TOOLS
        if os.path.isdir(self.staging):
            shutil.rmtree(self.staging)
        os.makedirs(self.staging)
        build_client(os.path.join(self.staging, "jujuc"))
        for name in TOOLS:
            if name not in self.removed:
                os.symlink("jujuc", os.path.join(self.staging, name))
        with open(self.jujud_path, "w", encoding="utf-8") as f:
            f.write("#!/bin/sh\n"
                    "# fake jujud: charmhelpers runs `jujud version` to learn Juju's version\n"
                    'case "$1" in\n'
                    f'  version|--version) echo "{self.jujud_version}" ;;\n'
                    '  *) echo "ERROR jujud is emulated by the sandbox:'
                    ' only `jujud version` works" >&2; exit 2 ;;\n'
                    "esac\n")
        os.chmod(self.jujud_path, 0o755)


class UnitAgent:
    """Runs file operations and hooks for units through their machine's executor."""

    def __init__(self, state: _model.StateFile, run_dir: str, tools: ToolsInstaller,
                 socket_path: str, timeout: float = DEFAULT_TIMEOUT,
                 extra_env: dict | None = None, metering_env: bool = True):
        self.state = state
        self.socket_path = socket_path
        self.run_dir = run_dir
        self.tools = tools
        self.timeout = timeout
        self.extra_env = dict(extra_env or {})
        self.metering_env = metering_env   # JUJU_SLA, JUJU_METER_* (gone in Juju 4)
        os.makedirs(run_dir, exist_ok=True)

    # -- file operations in the machine --------------------------------------------
    @staticmethod
    def _check(cp: subprocess.CompletedProcess, what: str) -> None:
        if cp.returncode != 0:
            raise RuntimeError(f"{what} failed ({cp.returncode}): "
                               f"{tail(cp.stderr or b'', 2000)}")

    def install_machine_tools(self, executor, machine_id: str) -> None:
        d = executor.machine_path(f"/var/lib/juju/tools/machine-{machine_id}")
        script = 'mkdir -p "$1" && cp -f "$2" "$1/jujud" && chmod 0755 "$1/jujud"'
        cp = executor.run(["/bin/sh", "-c", script, "sh", d, self.tools.jujud_path])
        self._check(cp, f"installing jujud in {d}")

    def deploy_charm(self, executor, unit: dict, charm_dir: str) -> list[str]:
        """Copy the charm into <agent dir>/charm and the tools into the
        unit's tools dir; returns the charm manifest (relative paths)."""
        cp = executor.run(["/bin/sh", "-c",
                           'set -e; mkdir -p "$1" "$2/charm" "$3"; cp -a "$4/." "$2/charm/"; '
                           'cp -a "$5/." "$3/"',
                           "sh", os.path.dirname(unit["agent-dir"]), unit["agent-dir"],
                           unit["tools-dir"], charm_dir, self.tools.staging])
        self._check(cp, f"deploying {charm_dir} to {unit['name']}")
        return manifest(charm_dir)

    def upgrade_charm(self, executor, unit: dict, new_charm_dir: str,
                      old_manifest: list[str]) -> list[str]:
        """Juju's charm upgrade: files of the old charm go, the new charm's
        files come; files the charm wrote itself (not in the manifest) stay."""
        new = manifest(new_charm_dir)
        gone = sorted(set(old_manifest) - set(new))
        if gone:
            cp = executor.run(["/bin/sh", "-c", 'cd "$1" && xargs -0 -r rm -f --', "sh",
                               unit["charm-dir"]],
                              input=b"\0".join(p.encode() for p in gone))
            self._check(cp, f"removing old charm files of {unit['name']}")
        script = 'set -e; mkdir -p "$1"; cp -a "$2/." "$1/"; cp -a "$4/." "$3/"'
        cp = executor.run(["/bin/sh", "-c", script, "sh", unit["charm-dir"], new_charm_dir,
                           unit["tools-dir"], self.tools.staging])
        self._check(cp, f"upgrading charm of {unit['name']}")
        return new

    def remove_unit_files(self, executor, unit: dict) -> None:
        cp = executor.run(["rm", "-rf", "--", unit["agent-dir"], unit["tools-dir"]])
        self._check(cp, f"removing {unit['agent-dir']}")

    def read_file(self, executor, path: str) -> bytes:
        cp = executor.run(["cat", "--", path])
        self._check(cp, f"reading {path}")
        return cp.stdout

    # -- hooks -----------------------------------------------------------------------
    def hook_env(self, data: dict, unit: dict, hook: str, context_id: str, rel_env: dict,
                 machine: dict | None = None) -> dict:
        """The variables Juju 3.x's unit agent sets for a hook: HookVars() in
        juju/juju worker/uniter/runner/context/context.go (3.x) plus
        ubuntuEnv() of its env.go (APT_LISTCHANGES_FRONTEND, DEBIAN_FRONTEND,
        LANG, TERM, PATH with the tools dir first) and JUJU_DISPATCH_PATH from
        the runner.  Relation hooks add JUJU_RELATION, JUJU_RELATION_ID,
        JUJU_REMOTE_UNIT (empty for app-data changes and -broken),
        JUJU_REMOTE_APP, and JUJU_DEPARTING_UNIT in -departed hooks."""
        m = data["model"]
        machine = machine or {}
        env = {
            "PATH": f"{unit['tools-dir'] or self.tools.staging}:{BASE_PATH}",
            "APT_LISTCHANGES_FRONTEND": "none",
            "DEBIAN_FRONTEND": "noninteractive",
            "LANG": "C.UTF-8",
            "TERM": "tmux-256color",
            "HOME": "/root",
            "CHARM_DIR": unit["charm-dir"] or "",
            "JUJU_CHARM_DIR": unit["charm-dir"] or "",
            "JUJU_CONTEXT_ID": context_id,
            "JUJU_HOOK_NAME": hook,
            "JUJU_DISPATCH_PATH": f"hooks/{hook}",
            # Juju's is abstract (@/var/lib/juju/agents/unit-x/agent.socket), which
            # a machine's own network namespace could not reach: a path instead
            "JUJU_AGENT_SOCKET_ADDRESS": self.socket_path,
            "JUJU_AGENT_SOCKET_NETWORK": "unix",
            "JUJU_UNIT_NAME": unit["name"],
            "JUJU_MODEL_NAME": m["name"],
            "JUJU_MODEL_UUID": m["uuid"],
            "JUJU_API_ADDRESSES": API_ADDRESS,
            "JUJU_SLA": "unsupported",
            "JUJU_MACHINE_ID": str(unit.get("machine") if unit.get("machine") is not None
                                   else ""),
            "JUJU_PRINCIPAL_UNIT": unit.get("principal") or "",
            "JUJU_AVAILABILITY_ZONE": machine.get("zone") or "",
            "JUJU_VERSION": m["juju-version"],
            "CLOUD_API_VERSION": "",
            "JUJU_CHARM_HTTP_PROXY": "",
            "JUJU_CHARM_HTTPS_PROXY": "",
            "JUJU_CHARM_FTP_PROXY": "",
            "JUJU_CHARM_NO_PROXY": "127.0.0.1,localhost,::1",
            "JUJU_METER_STATUS": "NOT SET",
            "JUJU_METER_INFO": "",
            _model.STATE_ENV: self.state.path,
        }
        if not self.metering_env:
            for k in ("JUJU_SLA", "JUJU_METER_STATUS", "JUJU_METER_INFO"):
                del env[k]
        if rel_env.get("JUJU_RELATION_ID"):
            for k in ("JUJU_RELATION", "JUJU_RELATION_ID", "JUJU_REMOTE_UNIT", "JUJU_REMOTE_APP"):
                env[k] = rel_env.get(k) or ""
            if rel_env.get("JUJU_DEPARTING_UNIT"):
                env["JUJU_DEPARTING_UNIT"] = rel_env["JUJU_DEPARTING_UNIT"]
        env.update(self.extra_env)
        return env

    def run_hook(self, executor, data: dict, unit: dict, hook: str, context_id: str,
                 rel_env: dict, seq: int, machine: dict | None = None,
                 kill_after: float | None = None) -> HookRun:
        """Run one hook; with kill_after, SIGKILL its whole process group
        that many seconds after it started (as a machine dying mid-hook
        would; daemons it started in sessions of their own live on)."""
        env = self.hook_env(data, unit, hook, context_id, rel_env, machine)
        argv, out, err = self._wrapper(unit, f"hooks/{hook}", context_id)
        started = time.time()
        t0 = time.monotonic()
        killed_after = None
        if kill_after is not None:
            rc, wrapper_out, wrapper_err, killed_after = self._run_killed(
                executor, argv, env, kill_after, t0)
        else:
            rc, wrapper_out, wrapper_err = self._run_grouped(executor, argv, env, "hook")
        duration = time.monotonic() - t0
        stdout = _read_and_remove(out)
        stderr = _read_and_remove(err) + wrapper_err
        run = HookRun(seq=seq, unit=unit["name"], hook=hook, exit_code=rc, duration=duration,
                      relation_id=rel_env.get("JUJU_RELATION_ID") or None,
                      remote_unit=rel_env.get("JUJU_REMOTE_UNIT") or None,
                      remote_app=rel_env.get("JUJU_REMOTE_APP") or None,
                      departing_unit=rel_env.get("JUJU_DEPARTING_UNIT") or None,
                      stdout_tail=tail(stdout), stderr_tail=tail(stderr), started_at=started,
                      kill_after=kill_after, killed_after=killed_after,
                      kill_missed=(kill_after is not None and killed_after is None
                                   and rc != -signal.SIGKILL))
        if NO_CHARM_MARK in wrapper_out:
            run.exit_code = 1
            missing = f"charm directory {unit['charm-dir']} is missing\n".encode()
            run.stderr_tail = tail(missing + stderr)
        elif MISSING_MARK in wrapper_out and rc == 0:
            run.exit_code = None
            run.skipped = True
        self._log_output(unit, hook, stdout, stderr, run)
        return run

    def run_action(self, executor, data: dict, unit: dict, action: str, context_id: str,
                   machine: dict | None = None) -> tuple[int | None, bytes, bytes]:
        """Run one action as Juju 3's uniter does: dispatch (or
        actions/<name>) with JUJU_DISPATCH_PATH=actions/<name> and the
        JUJU_ACTION_* variables, no JUJU_HOOK_NAME. Returns (exit code, None
        when the charm has no such action; stdout; stderr)."""
        env = self.hook_env(data, unit, "", context_id, {}, machine)
        del env["JUJU_HOOK_NAME"]
        action_id = context_id.rsplit("-", 1)[-1]
        env.update({"JUJU_DISPATCH_PATH": f"actions/{action}", "JUJU_ACTION_NAME": action,
                    "JUJU_ACTION_UUID": action_id, "JUJU_ACTION_TAG": f"action-{action_id}"})
        argv, out, err = self._wrapper(unit, f"actions/{action}", context_id)
        rc, wrapper_out, wrapper_err = self._run_grouped(executor, argv, env, "action")
        stdout, stderr = _read_and_remove(out), _read_and_remove(err) + wrapper_err
        if MISSING_MARK in wrapper_out or NO_CHARM_MARK in wrapper_out:
            rc = None
        return rc, stdout, stderr

    def _wrapper(self, unit: dict, path: str, context_id: str) -> tuple[list, str, str]:
        """(argv of HOOK_WRAPPER dispatching `path`, its stdout file, its
        stderr file)."""
        safe = os.path.join(self.run_dir, context_id.replace("/", "-"))
        argv = ["/bin/sh", "-c", HOOK_WRAPPER, "sh", unit["charm-dir"], path,
                safe + ".out", safe + ".err"]
        return argv, safe + ".out", safe + ".err"

    def _run_grouped(self, executor, argv, env, what: str) -> tuple[int, bytes, bytes]:
        """Run the wrapper in a process group of its own; past the agent's
        timeout SIGKILL the whole group, as Juju kills a hook that outlives
        its timeout (the wrapper waits for the hook: killing it alone would
        leave the hook running beside the next one). Returns (exit code,
        wrapper stdout, wrapper stderr)."""
        proc = executor.popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return -9, b"", f"{what} timed out after {self.timeout}s".encode()
        return proc.returncode, out or b"", err or b""

    def _run_killed(self, executor, argv, env, kill_after: float, t0: float):
        """Start the hook in a process group of its own, SIGKILL the group
        kill_after seconds after t0 (unless it ended before). Returns
        (exit code, wrapper stdout, wrapper stderr, seconds when killed, or
        None when the kill missed: the hook had ended)."""
        if not hasattr(executor, "popen"):
            raise TypeError(f"{executor!r} cannot run a hook to kill it (no popen)")
        proc = executor.popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True)
        killed_after = None
        try:
            wait = max(0.0, kill_after - (time.monotonic() - t0))
            out, err = proc.communicate(timeout=min(wait, self.timeout))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            when = time.monotonic() - t0
            out, err = proc.communicate()
            if kill_after > self.timeout:
                err = (err or b"") + f"hook timed out after {self.timeout}s".encode()
            elif proc.returncode == -signal.SIGKILL:
                # (the hook's shell is the process: nsenter and unshare exec it)
                killed_after = when
                err = (err or b"") + (f"sandbox: hook killed (SIGKILL to its process group) "
                                      f"after {killed_after:.3f}s\n").encode()
            # else the hook exited between the deadline and the kill: missed
        return proc.returncode, out or b"", err or b"", killed_after

    def _log_output(self, unit, hook, stdout: bytes, stderr: bytes, run: HookRun) -> None:
        path = unit.get("log-file")
        if not path:
            return
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        lines = []
        if run.skipped:
            lines.append(f'{stamp} INFO juju.worker.uniter.operation '
                         f'skipped "{hook}" hook (missing)')
        for stream in (stdout, stderr):
            for line in stream.decode("utf-8", "replace").splitlines():
                lines.append(f"{stamp} WARNING unit.{unit['name']}.{hook} {line}")
        if not run.skipped:
            if run.exit_code == 0:
                lines.append(f'{stamp} INFO juju.worker.uniter.operation ran "{hook}" hook '
                             f'(via hook dispatching script: {hook})')
            else:
                lines.append(f'{stamp} ERROR juju.worker.uniter.operation hook "{hook}" '
                             f'(via hook dispatching script: {hook}) failed: '
                             f'exit status {run.exit_code}')
        with open(path, "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))


def _read_and_remove(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return b""
    os.unlink(path)
    return data


def manifest(charm_dir: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(charm_dir):
        dirnames[:] = [d for d in dirnames if d not in (".git", "__pycache__")]
        for fn in filenames:
            out.append(os.path.relpath(os.path.join(dirpath, fn), charm_dir))
    return sorted(out)
