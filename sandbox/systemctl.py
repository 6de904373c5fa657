"""The sandbox machines' `systemctl`: docker-systemctl-replacement's systemctl3,
held to what systemd 252 does.

Installed in each machine as /usr/local/lib/sandbox-systemctl/systemctl.py (a
copy of this file run by the sandbox venv's Python, which has `systemctl2`),
beside a copy of sandbox/forwarding.py. /usr/local/sbin/systemctl is the
forwarding client (sandbox/forwarding_client.c): it hands each call to the
machine's systemctl server (:func:`serve`, started with the machine), a
process that loaded systemctl3 once and forks for each call, as systemctl
asks systemd; a call costs a fork, not an interpreter importing systemctl3
(50-90 ms of CPU before). Without the server (a machine just booted) the
client runs this file itself. On top of systemctl3 it:

- refuses what systemd 252's systemctl refuses, with its messages and exit
  code 1: an unknown verb ("Unknown command verb foo."), a verb given too
  many or too few arguments ("Too many arguments." for `daemon-reload
  flannel`, "Too few arguments." for `start` with no unit);
- does what systemd does with `Restart=`: a unit started with Restart=always
  (or on-failure/on-abnormal/on-abort/on-watchdog) gets a supervisor process
  in the machine that, when the unit's main process dies without `systemctl
  stop`, waits RestartSec= (default 100 ms) and starts the unit again;
- takes out systemctl3's fixed waits (0.5 s after every start, whole-second
  polls for a stopped process to vanish): systemd waits for the process, not
  for the clock;
- keeps what systemd loaded: a unit's definition is read from disk when it
  is first started (a copy under LOADED_DIR) and again only at
  `daemon-reload`; start, restart and stop use that copy, so a unit file
  rewritten without a reload runs its old command line, as under systemd,
  and `show -p NeedDaemonReload` says "yes" until the reload.

Not emulated: start rate limiting (StartLimitBurst=), Restart=on-success's
exit status distinction (the supervisor cannot see a non-child's exit
status: every death counts as a failure), socket activation.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import io
import os
import select
import subprocess
import sys
import time

# verb -> (min args, max args) counting the verb itself, as in systemd 252's
# systemctl.c verb table (None: any number)
VERBS = {
    "list-units": (1, None), "list-automounts": (1, None), "list-sockets": (1, None),
    "list-timers": (1, None), "list-jobs": (1, None), "list-machines": (1, None),
    "list-unit-files": (1, None), "list-dependencies": (1, None),
    "start": (2, None), "stop": (2, None), "condstop": (2, None), "reload": (2, None),
    "restart": (2, None), "try-restart": (2, None), "reload-or-restart": (2, None),
    "reload-or-try-restart": (2, None), "try-reload-or-restart": (2, None),
    "force-reload": (2, None), "condreload": (2, None), "condrestart": (2, None),
    "isolate": (2, 2), "kill": (2, None), "clean": (2, None), "freeze": (2, None),
    "thaw": (2, None), "is-active": (2, None), "check": (2, None), "is-failed": (2, None),
    "show": (1, None), "cat": (2, None), "status": (1, None), "help": (1, None),
    "daemon-reload": (1, 1), "daemon-reexec": (1, 1), "log-level": (1, 2),
    "log-target": (1, 2), "service-log-level": (2, 3), "service-log-target": (2, 3),
    "service-watchdogs": (1, 2), "show-environment": (1, 1),
    "set-environment": (2, None), "unset-environment": (2, None),
    "import-environment": (1, None), "halt": (1, 1), "poweroff": (1, 1), "reboot": (1, 1),
    "kexec": (1, 1), "suspend": (1, 1), "hibernate": (1, 1), "hybrid-sleep": (1, 1),
    "suspend-then-hibernate": (1, 1), "default": (1, 1), "rescue": (1, 1),
    "emergency": (1, 1), "exit": (1, 2), "switch-root": (2, None), "list-dependencies ": (1, 2),
    "enable": (2, None), "disable": (2, None), "is-enabled": (2, None),
    "reenable": (2, None), "preset": (2, None), "preset-all": (1, 1), "mask": (2, None),
    "unmask": (2, None), "link": (2, None), "revert": (2, None), "add-wants": (3, None),
    "add-requires": (3, None), "edit": (2, None), "get-default": (1, 1),
    "set-default": (2, 2), "set-property": (3, None), "is-system-running": (1, 1),
    "reset-failed": (1, None), "bind": (3, 4), "mount-image": (4, 5),
}
# options that take a separate value (`-p MainPID`, `--property MainPID`)
VALUE_OPTIONS = {"-t", "--type", "--state", "-p", "--property", "-P", "--job-mode",
                 "-s", "--signal", "--kill-whom", "--kill-who", "--what", "-n", "--lines",
                 "-o", "--output", "--root", "-H", "--host", "-M", "--machine",
                 "--timestamp", "--preset-mode", "--message", "--boot-loader-entry",
                 "--reboot-argument", "--check-inhibitors", "--image"}
RESTARTING = ("always", "on-failure", "on-abnormal", "on-abort", "on-watchdog")
STATE_DIR = "/run/sandbox-systemctl"
SUPERVISE = "__sandbox_supervise"
RESTART = "__sandbox_restart"   # the supervisor's start: leaves the markers alone
SERVE = "__sandbox_serve"
SERVER_SOCKET = os.path.join(STATE_DIR, "server.socket")
# the CPU seconds of each call the server answered, one line per call: the
# benchmark adds them to the hook that made the call
SERVED_CPU_LOG = os.path.join(STATE_DIR, "served.cpu")
# the unit definitions "systemd" has loaded (see the module doc)
LOADED_DIR = os.path.join(STATE_DIR, "loaded")
# where systemd 252 finds system units, in its order (the first one wins)
UNIT_FOLDERS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
                "/usr/lib/systemd/system", "/lib/systemd/system")
# verbs that run a unit with its loaded definition
LOADED_VERBS = ("start", "restart", "try-restart", "reload-or-restart", "stop", "kill", RESTART)
# where a machine holds this file and its forwarding module
INSTALL_DIR = "/usr/local/lib/sandbox-systemctl"
POLL = 0.05


def split_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(options, positional) the way systemctl's getopt permutes them."""
    options, positional = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            positional.extend(argv[i + 1:])
            break
        if arg.startswith("-") and arg != "-":
            options.append(arg)
            if arg in VALUE_OPTIONS and i + 1 < len(argv):
                options.append(argv[i + 1])
                i += 1
        else:
            positional.append(arg)
        i += 1
    return options, positional


def refusal(argv: list[str]) -> str | None:
    """systemd 252's complaint about this command line, if it has one."""
    options, positional = split_args(argv)
    if not positional or any(o in ("-h", "--help", "--version") for o in options):
        return None  # `systemctl` alone lists units
    verb = positional[0]
    if verb not in VERBS:
        return f"Unknown command verb {verb}."
    low, high = VERBS[verb]
    if len(positional) < low:
        return "Too few arguments."
    if high is not None and len(positional) > high:
        return "Too many arguments."
    return None


# --------------------------------------------------------------------------
# systemctl3, without its clock waits
# --------------------------------------------------------------------------

def _systemctl3():
    from systemctl2 import systemctl3 as s3

    s3.MinimumYield = POLL
    s3.MinimumTimeoutStopSec = POLL
    # its runtime directory names the user, looked up in the passwd database
    # on every path it expands (dozens a call): root's, once per process
    if not hasattr(s3.os_getlogin, "cache_info"):
        s3.os_getlogin = functools.lru_cache(maxsize=None)(s3.os_getlogin)

    def wait_vanished_pid(self, pid, timeout):
        deadline = time.monotonic() + float(timeout)
        while pid and self.is_active_pid(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL)
        return True

    s3.Systemctl.wait_vanished_pid = wait_vanished_pid
    s3.Systemctl.pidlist_of = lambda self, pid: process_tree(pid)
    return s3


def process_tree(pid) -> list[int]:
    """pid and its descendants, from one pass over /proc (systemctl3 reads
    every /proc/N/status once per tree level, up to PROC_MAX_DEPTH times:
    seconds on a busy host)."""
    if not pid:
        return []
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [int(pid)]
    while todo:
        p = todo.pop(0)
        if p not in out:
            out.append(p)
            todo.extend(children.get(p, []))
    return out


class _FastPoll:
    """systemctl3's `time`, with sleeps of a second or more cut to a poll
    interval (its kill loop checks the clock against TimeoutStopSec)."""

    def __getattr__(self, name):
        return getattr(time, name)

    @staticmethod
    def sleep(seconds):
        time.sleep(min(seconds, POLL))


def run_systemctl3(argv: list[str], stopping: bool = False) -> int:
    s3 = _systemctl3()
    if stopping:
        # its kill loop polls the stopped processes once a second (up to
        # TimeoutStopSec, which it measures with the clock): poll faster.  Only
        # when stopping: other loops count seconds by their sleeps.
        s3.time = _FastPoll()
    if "--value" not in argv:
        sys.argv = ["systemctl", *argv]
        return s3.main() or 0
    # `show --value` (systemctl3 lacks it): the values without their names
    sys.argv = ["systemctl", *[a for a in argv if a != "--value"]]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = s3.main() or 0
    for line in out.getvalue().splitlines():
        sys.stdout.write(line.partition("=")[2] + "\n")
    return rc


# --------------------------------------------------------------------------
# Restart=
# --------------------------------------------------------------------------

UNIT_TYPES = ("service", "socket", "device", "mount", "automount", "swap", "target", "path",
              "timer", "slice", "scope")


def _unit_name(name: str) -> str:
    """As systemd mangles a name given on the command line: ".service"
    unless it ends in a unit type (snap.kubelet.daemon is
    snap.kubelet.daemon.service)."""
    return name if name.rsplit(".", 1)[-1] in UNIT_TYPES and "." in name else name + ".service"


def _marker(unit: str, kind: str) -> str:
    return os.path.join(STATE_DIR, f"{unit}.{kind}")


@contextlib.contextmanager
def _unit_lock(*units: str):
    """Held by a start, stop or restart from beginning to end, and by the
    supervisor from its look at the unit to the end of its restart (or its
    exit), as systemd runs one job per unit at a time: a stop never lands
    between the supervisor's look and its restart (which would bring the
    unit back after the stop), and a start never finds the supervisor of a
    stopped unit still there but about to leave. Units in sorted order."""
    os.makedirs(STATE_DIR, exist_ok=True)
    fds = []
    try:
        for unit in sorted(set(units)):
            fd = os.open(_marker(unit, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in fds:
            os.close(fd)


def _systemctl3_value(prop: str, unit: str) -> str:
    cp = subprocess.run([sys.executable, os.path.abspath(__file__), "show", "-p", prop, unit],
                        capture_output=True, text=True, check=False)
    return cp.stdout.strip().partition("=")[2] if cp.returncode == 0 else ""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _restart_policy(unit: str) -> tuple[str, float]:
    """Restart= and RestartSec= of the unit's file."""
    s3 = _systemctl3()
    with _loaded_first():
        conf = s3.Systemctl().unitfiles.load_conf(unit)
    if conf is None:
        return "no", 0.1
    policy = (conf.get("Service", "Restart", "no") or "no").strip().lower()
    raw = (conf.get("Service", "RestartSec", "100ms") or "100ms").strip().lower()
    seconds = 0.1
    try:
        if raw.endswith("ms"):
            seconds = float(raw[:-2]) / 1000
        elif raw.endswith("s"):
            seconds = float(raw[:-1])
        elif raw.endswith("min"):
            seconds = float(raw[:-3]) * 60
        else:
            seconds = float(raw)
    except ValueError:
        seconds = 0.1
    return policy, seconds


def _spawn_supervisor(unit: str) -> None:
    os.makedirs(STATE_DIR, exist_ok=True)
    pidfile = _marker(unit, "supervisor")
    try:
        with open(pidfile, encoding="ascii") as f:
            if _alive(int(f.read().strip() or 0)):
                return
    except (OSError, ValueError):
        pass
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), SUPERVISE, unit],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    with open(pidfile, "w", encoding="ascii") as f:
        f.write(f"{proc.pid}\n")


def _wait_for_exit(pid: int, timeout: float) -> None:
    """Return once `pid` has exited, or after `timeout` seconds. A pidfd
    costs no CPU while it waits (polling /proc, or a new systemctl3 process,
    every few hundred ms took a quarter of a core per running unit)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd: poll /proc
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(POLL * 4)
        return
    try:
        if _alive(pid):  # a zombie's pidfd is readable at once too
            select.select([fd], [], [], timeout)
    finally:
        os.close(fd)


def supervise(unit: str) -> int:
    """Restart the unit when its main process dies, until `systemctl stop`."""
    stopped = _marker(unit, "stopped")
    pid = 0
    while True:
        if os.path.exists(stopped) and _leave(unit, stopped):
            return 0
        # Wait on the known main process; ask systemctl3 (a new Python
        # process) only once it is gone: restarted by someone, or dead.
        if pid and _alive(pid):
            _wait_for_exit(pid, timeout=5.0)
            continue
        pid = int(_systemctl3_value("MainPID", unit) or 0)
        if pid and _alive(pid):
            continue
        policy, delay = _restart_policy(unit)
        if policy not in RESTARTING and _leave(unit, None):
            return 0
        time.sleep(delay)
        with _unit_lock(unit):
            if os.path.exists(stopped):
                continue   # stopped meanwhile: leave (above)
            pid = int(_systemctl3_value("MainPID", unit) or 0)
            if pid and _alive(pid):
                continue  # restarted meanwhile (`systemctl restart`)
            subprocess.run([sys.executable, os.path.abspath(__file__), RESTART, unit],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
            pid = 0
        time.sleep(POLL * 4)


def _leave(unit: str, stopped: str | None) -> bool:
    """Whether the supervisor ends now: the unit is still stopped (or, with
    stopped=None, just no longer restarting), checked and its pid file
    removed under the unit's lock, so that a start either sees it gone (and
    spawns a new one) or has already unmarked the unit (and it stays)."""
    with _unit_lock(unit):
        if stopped is not None and not os.path.exists(stopped):
            return False   # started again meanwhile: go on watching
        with contextlib.suppress(OSError):
            os.unlink(_marker(unit, "supervisor"))
        return True


# --------------------------------------------------------------------------
# what systemd loaded
# --------------------------------------------------------------------------

def unit_on_disk(unit: str) -> bytes | None:
    """The unit's file as systemd would load it now (None: none, or masked)."""
    for folder in UNIT_FOLDERS:
        path = os.path.join(folder, unit)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                return f.read()
        if os.path.lexists(path):
            return None   # a link to /dev/null: masked
    return None


def _loaded_path(unit: str) -> str:
    return os.path.join(LOADED_DIR, unit)


def loaded_definition(unit: str) -> bytes | None:
    try:
        with open(_loaded_path(unit), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def load_unit(unit: str) -> None:
    """systemd loads a unit it holds no definition of when it is first used."""
    if loaded_definition(unit) is None:
        _keep_loaded(unit, unit_on_disk(unit))


def _keep_loaded(unit: str, content: bytes | None) -> None:
    if content is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_loaded_path(unit))
        return
    os.makedirs(LOADED_DIR, exist_ok=True)
    pending = f"{_loaded_path(unit)}.{os.getpid()}"
    with open(pending, "wb") as f:
        f.write(content)
    os.replace(pending, _loaded_path(unit))


def reload_units() -> None:
    """daemon-reload: every loaded unit read again from disk; one whose file
    is gone is no longer loaded."""
    with contextlib.suppress(FileNotFoundError):
        for unit in os.listdir(LOADED_DIR):
            if "." in unit and not unit.rsplit(".", 1)[1].isdigit():   # not a pending copy
                _keep_loaded(unit, unit_on_disk(unit))


def need_daemon_reload(unit: str) -> bool:
    loaded = loaded_definition(unit)
    return loaded is not None and loaded != unit_on_disk(unit)


def _show_need_daemon_reload(argv: list[str]) -> int | None:
    """`show -p NeedDaemonReload UNIT [--value]`, which systemctl3 lacks;
    None for any other show."""
    options, positional = split_args(argv)
    props = [options[i + 1] for i, o in enumerate(options[:-1]) if o in ("-p", "--property")]
    if props != ["NeedDaemonReload"] or len(positional) != 2:
        return None
    value = "yes" if need_daemon_reload(_unit_name(positional[1])) else "no"
    sys.stdout.write((value if "--value" in options else f"NeedDaemonReload={value}") + "\n")
    return 0


@contextlib.contextmanager
def _loaded_first():
    """systemctl3 finds the loaded definitions before the files on disk."""
    os.environ["SYSTEMD_UNIT_PATH"] = LOADED_DIR + ":"
    try:
        yield
    finally:
        os.environ.pop("SYSTEMD_UNIT_PATH", None)


def _run_loaded(argv: list[str], units: list[str], stopping: bool) -> int:
    """systemctl3 run with what systemd loaded (a unit started for the
    first time is loaded now)."""
    if not stopping:
        for unit in units:
            load_unit(unit)
    with _loaded_first():
        return run_systemctl3(argv, stopping=stopping)


# --------------------------------------------------------------------------
# the server
# --------------------------------------------------------------------------

def serve() -> int:
    """Answer the machine's systemctl calls on SERVER_SOCKET until killed:
    each call in a child forked from this process, which has systemctl3
    loaded, with the caller's arguments, environment, working directory and
    standard streams. A call outlives a caller killed mid-way, as a job
    systemd took does."""
    import signal
    import socket

    try:
        from sandbox import forwarding
    except ImportError:   # the machine's copy: forwarding.py lies beside it
        import forwarding
    _systemctl3()
    os.makedirs(STATE_DIR, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    # bound and listening under another name first: a client finds either
    # no socket (and runs systemctl itself) or one that answers
    pending = f"{SERVER_SOCKET}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(pending)
    listener.bind(pending)
    os.chmod(pending, 0o600)
    listener.listen(64)
    os.rename(pending, SERVER_SOCKET)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # the calls reap themselves
    while True:
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)   # systemctl3 waits for its children
            code = 1
            try:
                code = _answer_call(conn, forwarding)
            finally:
                os._exit(code)
        conn.close()


def _answer_call(conn, forwarding) -> int:
    request = forwarding.read_request(conn)
    try:
        cwd = os.readlink(f"/proc/{request.pid}/cwd")
    except OSError:
        cwd = "/"
    for target, fd in enumerate(request.fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request.env)
    with contextlib.suppress(OSError):
        os.chdir(cwd)
    try:
        code = main(request.argv[1:])
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            code = done.code or 0
        else:
            sys.stderr.write(f"{done.code}\n")
            code = 1
    except Exception:  # noqa: BLE001 - a bug here: the caller sees it
        import traceback
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    spent = os.times()   # this child's, from its fork
    cpu = spent.user + spent.system + spent.children_user + spent.children_system
    with contextlib.suppress(OSError), open(SERVED_CPU_LOG, "a", encoding="ascii") as log:
        log.write(f"{cpu:.6f}\n")
    forwarding.answer(conn, code)
    return code


def served_cpu(log_text: str) -> float:
    """The CPU seconds of the calls in a SERVED_CPU_LOG's text."""
    return sum(float(line) for line in log_text.split() if line)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [SERVE]:
        return serve()
    if argv[:1] == [SUPERVISE]:
        return supervise(argv[1])
    if argv[:1] == [RESTART]:
        return _run_loaded(["start", argv[1]], [_unit_name(argv[1])], stopping=False)
    problem = refusal(argv)
    if problem:
        sys.stderr.write(problem + "\n")
        return 1
    _, positional = split_args(argv)
    verb = positional[0] if positional else ""
    units = [_unit_name(u) for u in positional[1:]]
    options = split_args(argv)[0]
    stopping = verb == "stop" or (verb in ("disable", "mask") and "--now" in options)
    starting = verb in ("start", "restart", "reload-or-restart", "try-restart") or \
        (verb in ("enable",) and "--now" in options)
    quick = verb not in ("stop", "kill", "restart", "try-restart", "reload-or-restart",
                         "disable", "mask")
    if verb == "show":
        shown = _show_need_daemon_reload(argv)
        if shown is not None:
            return shown
    if not (stopping or starting):
        rc = run_systemctl3(argv, stopping=not quick)
        if verb == "daemon-reload" and rc == 0:
            reload_units()
        return rc
    with _unit_lock(*units):
        for unit in units:
            if stopping:
                open(_marker(unit, "stopped"), "w").close()
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(_marker(unit, "stopped"))
        if verb in LOADED_VERBS:
            rc = _run_loaded(argv, units, stopping=verb in ("stop", "kill"))
        else:
            rc = run_systemctl3(argv, stopping=not quick)
        if starting and rc == 0:
            for unit in units:
                if _restart_policy(unit)[0] in RESTARTING:
                    _spawn_supervisor(unit)
    return rc


if __name__ == "__main__":
    sys.exit(main())
