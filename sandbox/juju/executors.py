"""Where a unit's hooks and file operations run.

Every executor has one small protocol::

    run(argv, env=None, cwd=None, timeout=None, input=None) -> subprocess.CompletedProcess
    popen(argv, env=None, **popen_kwargs) -> subprocess.Popen   # the same command, not waited
                                 # for (the agent's kill_after: a hook killed mid-run)
    machine_path(path) -> str    # how a path of the machine (/var/lib/juju/..., /opt/cni/bin)
                                 # must be spelled in argv given to run()
    host_path(path) -> str | None   # the same file seen from the host, if it can be

run() never raises on a non-zero exit (check=False semantics); it captures
stdout/stderr as bytes.  The agent does all file operations in a machine
through run() with coreutils (mkdir, cp, rm), so an executor needs nothing
else.

- LocalExecutor: plain subprocesses on the host; machine paths are moved
  under a root directory (commands must spell them with machine_path()).  No
  namespaces: charmhelpers' jujud glob won't find the fake jujud there, and a
  hook writing /opt/... writes the host's.  For throwaway test charms only.
- UnshareExecutor: each command runs under `unshare --mount` with
  ROOT/var/lib/juju bind-mounted on /var/lib/juju and, optionally, an Ubuntu
  os-release over /etc/os-release: a throwaway "machine" good enough for
  charmhelpers and charms.reactive (needs root).
- MachineExecutor: adapts sandbox.machine.Machine (network + mount namespaces)
  whose run(argv, env=None, input=None, check=True, timeout=...) has no cwd.
"""

from __future__ import annotations

import inspect
import os
import subprocess
from typing import Protocol, runtime_checkable

from sandbox.machine import LSB_RELEASE, OS_RELEASE

DEFAULT_TIMEOUT = 600.0

# One Ubuntu identity for every sandbox machine (charmhelpers refuses Debian).
UBUNTU_OS_RELEASE, UBUNTU_LSB_RELEASE = OS_RELEASE, LSB_RELEASE


@runtime_checkable
class Executor(Protocol):
    def run(self, argv, env=None, cwd=None, timeout=None,
            input=None) -> subprocess.CompletedProcess: ...

    def machine_path(self, path: str) -> str: ...

    def host_path(self, path: str) -> str | None: ...


def _with_cwd(argv, cwd):
    """Wrap argv so it runs in cwd, keeping argv[0] as given."""
    if not cwd:
        return list(argv)
    return ["/bin/sh", "-c", 'cd "$0" || exit 126; exec "$@"', cwd, *argv]


class LocalExecutor:
    """Runs commands directly on the host; /var/lib/juju/... lives under root."""

    def __init__(self, root):
        self.root = os.path.abspath(os.fspath(root))
        os.makedirs(self.root, exist_ok=True)

    def machine_path(self, path: str) -> str:
        return self.root + path if path.startswith("/") else path

    def host_path(self, path: str) -> str | None:
        return path  # machine_path() already gave a host path

    def run(self, argv, env=None, cwd=None, timeout=None, input=None):
        return subprocess.run(list(argv), env=env, cwd=cwd, input=input,
                              capture_output=True, timeout=timeout or DEFAULT_TIMEOUT,
                              check=False)

    def popen(self, argv, env=None, **kwargs):
        return subprocess.Popen(list(argv), env=env, **kwargs)

    def __repr__(self):
        return f"LocalExecutor({self.root!r})"


class UnshareExecutor:
    """Each command in a fresh private mount namespace (needs root):
    ROOT/var/lib/juju on /var/lib/juju, plus extra binds, plus an Ubuntu
    /etc/os-release and /etc/lsb-release when ubuntu=True."""

    MOUNT_SCRIPT = ('while [ "$1" != "--" ]; do '
                    'mount --bind "$1" "$2" || exit 125; shift 2; done; shift; exec "$@"')

    def __init__(self, root, binds=None, ubuntu=True):
        self.root = os.path.abspath(os.fspath(root))
        os.makedirs(os.path.join(self.root, "var/lib/juju"), exist_ok=True)
        os.makedirs("/var/lib/juju", exist_ok=True)  # mount point on the host (stays empty)
        self.binds = [(os.path.join(self.root, "var/lib/juju"), "/var/lib/juju")]
        if ubuntu:
            etc = os.path.join(self.root, "etc")
            os.makedirs(etc, exist_ok=True)
            for name, text in (("os-release", UBUNTU_OS_RELEASE),
                               ("lsb-release", UBUNTU_LSB_RELEASE)):
                p = os.path.join(etc, name)
                with open(p, "w", encoding="utf-8") as f:
                    f.write(text)
                target = "/etc/" + name
                if not os.path.exists(target):
                    # nothing to mount over; create nothing on the host
                    continue
                self.binds.append((p, target))
        for src, dst in (binds or []):
            self.binds.append((os.fspath(src), os.fspath(dst)))

    def machine_path(self, path: str) -> str:
        """Bound paths (/var/lib/juju, /etc/os-release) are real inside; any
        other machine path lives under root (nothing else is private here)."""
        for _src, dst in self.binds:
            if path == dst or path.startswith(dst.rstrip("/") + "/"):
                return path
        return self.root + path if path.startswith("/") else path

    def host_path(self, path: str) -> str | None:
        for src, dst in self.binds:
            if path == dst or path.startswith(dst.rstrip("/") + "/"):
                return src + path[len(dst):]
        return path

    def _full(self, argv, cwd=None):
        pairs = [x for b in self.binds for x in b]
        return ["unshare", "--mount", "--propagation", "private", "--",
                "/bin/sh", "-c", self.MOUNT_SCRIPT, "sh", *pairs, "--",
                *_with_cwd(argv, cwd)]

    def run(self, argv, env=None, cwd=None, timeout=None, input=None):
        return subprocess.run(self._full(argv, cwd), env=env, input=input,
                              capture_output=True, timeout=timeout or DEFAULT_TIMEOUT,
                              check=False)

    def popen(self, argv, env=None, **kwargs):
        return subprocess.Popen(self._full(argv), env=env, **kwargs)

    def __repr__(self):
        return f"UnshareExecutor({self.root!r})"


class MachineExecutor:
    """Adapter for sandbox.machine.Machine: run(argv, env=None, input=None,
    check=True, timeout=...) -> CompletedProcess inside its namespaces."""

    def __init__(self, machine):
        self.machine = machine
        try:
            params = inspect.signature(machine.run).parameters
        except (TypeError, ValueError):
            params = {}
        self._has_cwd = "cwd" in params
        self._has_capture = "capture_output" in params
        self._has_text = "text" in params

    def machine_path(self, path: str) -> str:
        return path

    def host_path(self, path: str) -> str | None:
        fn = getattr(self.machine, "host_path", None)
        if callable(fn):
            return fn(path)
        return None

    def run(self, argv, env=None, cwd=None, timeout=None, input=None):
        kwargs = {"env": env, "input": input, "check": False,
                  "timeout": timeout or DEFAULT_TIMEOUT}
        if self._has_capture:
            kwargs["capture_output"] = True
        if self._has_text:
            kwargs["text"] = False
        if self._has_cwd:
            kwargs["cwd"] = cwd
            cp = self.machine.run(list(argv), **kwargs)
        else:
            cp = self.machine.run(_with_cwd(argv, cwd), **kwargs)
        out = cp.stdout if cp.stdout is not None else b""
        err = cp.stderr if cp.stderr is not None else b""
        if isinstance(out, str):
            out = out.encode()
        if isinstance(err, str):
            err = err.encode()
        return subprocess.CompletedProcess(cp.args, cp.returncode, out, err)

    def popen(self, argv, env=None, **kwargs):
        return self.machine.popen(list(argv), env=env, **kwargs)

    def __repr__(self):
        return f"MachineExecutor({self.machine!r})"


def as_executor(obj) -> Executor:
    """Accept an executor, or anything with a Machine-like run()."""
    if hasattr(obj, "machine_path") and hasattr(obj, "run"):
        return obj
    if hasattr(obj, "run"):
        return MachineExecutor(obj)
    raise TypeError(f"not an executor or machine: {obj!r}")
