"""A simulated unit machine: a network namespace plus a mount namespace.

A :class:`Machine` is attached to a :class:`~sandbox.network.TestNetwork`
(namespace ``flsb-<tag>-<name>``, ``eth0`` with an address of the test
subnet, no default route) and owns a long-lived mount namespace, kept alive by
a small "holder" process (``unshare --mount --propagation slave``) that sits in
the machine's network namespace.  Every command the machine runs enters both
namespaces (``nsenter --mount=/proc/HOLDER/ns/mnt --net=/run/netns/NETNS``).

Inside the mount namespace these trees are overlayfs mounts whose lower layer
is the host's directory and whose upper layer is
``$FLANNEL_SANDBOX_STATE/<netns>/upper/<tree>`` (default state root
``/var/lib/flannel-sandbox``)::

    /etc /opt /run /var/lib /var/log /usr/local /usr/lib/systemd/system /root/.kube

so writes inside (``/opt/cni/bin``, ``/etc/cni/net.d``, ``/etc/ssl/flannel``,
``/etc/systemd/system``, ``/etc/nagios``, ``/run/flannel``,
``/run/systemd/system``, ``/var/lib/cni``, ``/var/lib/juju``,
``/usr/local/bin``, ``/lib/systemd/system``, ``/root/.kube``, systemctl's logs ...) are seen
neither by the host nor by other machines, while the host's files stay
readable.  Two host paths are bound back over their overlays so they stay
shared: ``/run/netns`` (a slave of the host's, so pod namespaces made later on
the host appear inside) and the state root itself.  ``/sys`` is the machine's
own sysfs (its network devices); ``/proc``, ``/tmp``, ``/home``, ``/work``,
``/usr`` (but ``/usr/local``) are the host's.

The machine has the identity of an Ubuntu release (``series``: 22.04
"jammy" by default, 24.04 "noble" or 26.04 "resolute"; ``/etc/os-release``,
``/etc/lsb-release``) and, where this host has it, that release's python3
first on PATH (``/usr/local/bin/python3``: 3.10, 3.12 or 3.14, the last built
by sandbox.cpython), which the charm's
hooks run with; a ``/run/systemd/system`` directory and a
``/usr/local/sbin/systemctl`` (the forwarding client to the machine's
systemctl server, sandbox/systemctl.py, started with the machine) that runs
docker-systemctl-replacement's ``systemctl3`` held to systemd 252's rules
(refuses ``daemon-reload UNIT`` and unknown verbs, restarts units per
``Restart=``/``RestartSec=``, no fixed waits): with those, charmhelpers'
``service_*`` calls ``systemctl``, and ``systemctl start flannel`` really
starts ``/lib/systemd/system/flannel.service`` inside the machine (the daemon outlives the command,
``stop`` ends it).

API::

    with TestNetwork() as net, Machine("m1", net) as m:   # start() / destroy()
        m.name, m.netns, m.address, m.iface ("eth0"), m.state_dir, m.holder_pid
        m.run(argv, env=None, input=None, check=True, timeout=120, cwd=None,
              inherit_env=False, text=None) -> CompletedProcess   # as root, inside;
              # env is merged over a clean base (PATH, HOME=/root, LANG=C.UTF-8,
              # USER=root) unless inherit_env; text unless input is bytes
        m.popen(argv, env=None, cwd=None, inherit_env=False, **popen_kwargs) -> Popen
        m.command(argv, cwd=None) -> list[str]       # the nsenter prefix + argv
        m.environment(env=None, inherit_env=False) -> dict   # env run() would use
        m.path_on_host(path) -> Path     # host path reaching the machine's file
        m.host_path(path) -> str         # the same, as a string
        m.upper_path(path) -> Path       # where the overlay keeps a written file
        m.read_file(path) -> bytes | None
        m.write_file(path, data, mode=0o644)     # creates parent directories
        m.ls(path) -> list[str] | None
        m.exists(path) -> bool
        m.pids() -> list[int]            # every process in its namespaces
        m.pids_of(name) -> list[int]     # by /proc/PID/comm or argv[0] basename
        m.links() -> list[str]           # link names in its netns
        m.ip_json(*args) -> list[dict]   # `ip -j ARGS` inside
        m.systemctl(*args, check=False) -> CompletedProcess
        m.reboot(start_enabled=True) -> list[str]   # a power cycle: see reboot()

``destroy()`` first calls ``m.on_destroy`` (callables, last first: a
containerd is stopped through its own API there), deletes the machine's pod
namespaces (``flsb-<tag>-pod-<name>-*``), kills every process in the
machine's namespaces (daemons started by systemctl included), lets the
mount namespace go with its holder, deletes the network namespace (and its
veth) and removes the state directory (unless ``keep_state=True``).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
from pathlib import Path

from . import systemctl, ubuntu
from .forwarding import build_client
from .network import (NETNS_DIR, TestNetwork, _ns_id, delete_netns, kill_pids,
                      list_netns, pids_in_namespaces, run, state_root)
from .waiting import wait_for

# The trees made private (overlayfs) in every machine.
OVERLAY_ROOTS = ("/etc", "/opt", "/run", "/var/lib", "/var/log", "/usr/local",
                 "/usr/lib/systemd/system", "/root/.kube")
# Of those, the trees a machine starts with empty, whatever the host has
# there (root's kubeconfig: the principals write the machine's own).
EMPTY_ROOTS = ("/root/.kube",)
START_TIMEOUT = 120.0  # seconds for the holder to set up the mounts (a bound for a hang)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The machine's journalctl: a unit's journal is what systemctl3 wrote of its
# output (/var/log/journal/<unit>.service.log, no timestamps of its own).
# `journalctl -u UNIT [-n N] [-o cat] [--no-pager]`: its last N lines (all
# without -n); any other option is refused, as a real journalctl would an
# unknown one.
JOURNALCTL = """#!/bin/sh
unit= lines=
while [ $# -gt 0 ]; do
  case "$1" in
    -u) unit=$2; shift 2 ;;
    -n) lines=$2; shift 2 ;;
    -o) [ "$2" = cat ] || { echo "journalctl (sandbox): only -o cat" >&2; exit 1; }; shift 2 ;;
    --no-pager|-q) shift ;;
    *) echo "journalctl (sandbox): unsupported option $1" >&2; exit 1 ;;
  esac
done
[ -n "$unit" ] || { echo "journalctl (sandbox): -u UNIT is needed" >&2; exit 1; }
case "$unit" in *.*) ;; *) unit=$unit.service ;; esac
log=/var/log/journal/$unit.log
[ -f "$log" ] || exit 0
if [ -n "$lines" ]; then tail -n "$lines" "$log"; else cat "$log"; fi
"""

OS_RELEASE = ubuntu.os_release("jammy")
LSB_RELEASE = ubuntu.lsb_release("jammy")

# Run as the holder: it sits in the machine's netns, inside a fresh mount
# namespace (unshare made every mount a slave), sets up the private trees, says
# "ready" and sleeps until killed.  Mounts go through mount(2) directly: the
# host paths kept (/run/netns, the state root) are re-bound from file
# descriptors opened before the overlays hid them (/proc/self/fd/N), which
# mount(8) would canonicalise back to the hidden path.
_HOLDER = r"""
import ctypes, json, os, signal, sys
with open(sys.argv[1]) as f:
    cfg = json.load(f)
libc = ctypes.CDLL(None, use_errno=True)
MS_BIND, MS_REC, MNT_DETACH = 4096, 16384, 2
def mount(src, dst, fstype, flags, data):
    if libc.mount(src.encode(), dst.encode(), fstype.encode() if fstype else None,
                  ctypes.c_ulong(flags), data.encode() if data else None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "mount %s on %s (%s): %s" % (src, dst, data, os.strerror(e)))
keep = [(p, os.open(p, os.O_PATH | os.O_DIRECTORY)) for p in cfg["keep"] if os.path.isdir(p)]
if libc.umount2(b"/sys", MNT_DETACH) != 0:
    raise OSError(ctypes.get_errno(), "umount /sys")
mount("sysfs", "/sys", "sysfs", 0, None)
for root, lower, upper, work in cfg["overlays"]:
    mount("overlay", root, "overlay", 0,
          "lowerdir=%s,upperdir=%s,workdir=%s" % (lower, upper, work))
    # Put back at once what this overlay hid: the next overlays' upper dirs
    # live in the state root, and an overlay cannot be an upper layer.
    for path, fd in keep:
        if path == root or path.startswith(root + "/"):
            mount("/proc/self/fd/%d" % fd, path, None, MS_BIND | MS_REC, None)
for path, fd in keep:
    os.close(fd)
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
os.chdir("/")
print("ready", flush=True)
sys.stdout.close()
while True:
    signal.pause()
"""


SYSTEMCTL_SOURCE = Path(__file__).with_name("systemctl.py")
FORWARDING_SOURCE = Path(__file__).with_name("forwarding.py")
# what a boot resets (the bridge plugin turns them on for its pods' families)
FORWARDING_SYSCTLS = ("/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding")


def find_systemctl3() -> str:
    """docker-systemctl-replacement's systemctl3 from the current venv, the
    project's cache venv, /tmp/venv, or PATH."""
    candidates = [Path(sys.prefix) / "bin" / "systemctl3",
                  Path(os.environ.get("FLANNEL_CACHE", "/var/cache/flannel-charm"))
                  / "venv/bin/systemctl3",
                  Path("/tmp/venv/bin/systemctl3")]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("systemctl3")
    if found:
        return found
    raise FileNotFoundError("systemctl3 (PyPI docker-systemctl-replacement) is not installed")


def command_line(pid: int) -> list[str]:
    """The argv of process `pid`; [] once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode() for a in raw.split(b"\0") if a]


def resident_kib(pids) -> int:
    """Resident memory (VmRSS) of the processes `pids`, summed, KiB; a
    process gone meanwhile counts 0."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
                    break
    return total


class MachineError(RuntimeError):
    pass


class Machine:
    def __init__(self, name: str, network: TestNetwork, address: str | None = None,
                 keep_state: bool = False, segment: str = "main", series: str = "jammy"):
        self.name = name
        # the Ubuntu release it claims (os-release), whose python3 runs its
        # hooks where this host has it (ubuntu.python_for), else the host's
        self.series = series
        self.python = ubuntu.python_for(series)
        self.network = network
        self.segment = segment   # which of the network's segments eth0 is on
        self.netns = network.prefix + name
        self.state_dir = state_root() / self.netns
        self._want_address = address
        self.address: str | None = None
        self.address6: str | None = None   # eth0's IPv6 twin (network.ipv6_twin)
        self.iface = "eth0"
        self.keep_state = keep_state
        self.holder: subprocess.Popen | None = None
        self._mnt_ns = None
        # an open reference to the machine's mount namespace: while it is
        # held, the namespace's inode number (what _mnt_ns matches processes
        # by) cannot be given to another machine's new namespace
        self._mnt_ns_fd: int | None = None
        # called first by destroy(), last registered first: what runs inside
        # and must be stopped in order (sandbox.cri's containerd)
        self.on_destroy: list = []
        # called first by reboot(): what runs inside and dies with the power
        # (sandbox.cri's containerd, its shims and containers)
        self.on_reboot: list = []
        # called by reboot() once the machine is up again, before the units
        # it enabled start: what its systemd would have started first (a
        # containerd the kubelet unit needs)
        self.on_boot: list = []
        # the network state the machine booted with (routes, ip_forward):
        # what a reboot returns it to
        self._boot_routes: list[dict] = []
        self._boot_forwarding = "0 0"
        self._boot_mounts: set[str] = set()
        self._systemctl_server: subprocess.Popen | None = None

    def __repr__(self) -> str:
        return f"Machine({self.name!r}, netns={self.netns!r}, address={self.address!r})"

    @property
    def subnet(self):
        """The subnet of the segment eth0 is on."""
        return self.network.segments[self.segment].subnet

    # --- lifecycle ----------------------------------------------------------
    @property
    def holder_pid(self) -> int:
        if self.holder is None:
            raise MachineError(f"machine {self.name} is not started")
        return self.holder.pid

    @property
    def pod_prefix(self) -> str:
        return f"{self.network.prefix}pod-{self.name}-"

    def _prepare_state(self) -> list[list[str]]:
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        overlays = []
        # (root's kubeconfig, which the principals write and CNIs read: the
        # host's /root is every machine's, its .kube each machine's own)
        os.makedirs("/root/.kube", mode=0o750, exist_ok=True)
        for root in OVERLAY_ROOTS:
            upper = self.state_dir / "upper" / root.lstrip("/")
            work = self.state_dir / "work" / root.lstrip("/")
            lower = self.state_dir / "empty" / root.lstrip("/") if root in EMPTY_ROOTS else root
            for made in (upper, work) + ((lower,) if root in EMPTY_ROOTS else ()):
                made.mkdir(parents=True)
            shutil.copystat(root, upper)   # the tree's root keeps the host's mode
            overlays.append([root, str(lower), str(upper), str(work)])
        (self.state_dir / "machine.json").write_text(json.dumps(
            {"name": self.name, "netns": self.netns, "network": self.network.tag}))
        # Ubuntu identity (charmhelpers refuses Debian) and systemd's marks.
        u = self.state_dir / "upper"
        (u / "etc/os-release").write_text(ubuntu.os_release(self.series))
        (u / "etc/lsb-release").write_text(ubuntu.lsb_release(self.series))
        (u / "etc/hostname").write_text(self.name + "\n")
        (u / "run/systemd/system").mkdir(parents=True)
        # systemctl3 held to systemd 252's rules, run by the Python that has
        # it, reached through the forwarding client (sandbox/systemctl.py)
        lib = u / systemctl.INSTALL_DIR.lstrip("/")
        lib.mkdir(parents=True)
        script = lib / "systemctl.py"
        script.write_text(f"#!{self._systemctl_python()}\n" + SYSTEMCTL_SOURCE.read_text())
        script.chmod(0o755)
        shutil.copy2(FORWARDING_SOURCE, lib / "forwarding.py")
        sbin = u / "usr/local/sbin"
        sbin.mkdir(parents=True, exist_ok=True)
        build_client(str(sbin / "systemctl"), server_socket=systemctl.SERVER_SOCKET,
                     fallback=f"{systemctl.INSTALL_DIR}/systemctl.py")
        (sbin / "journalctl").write_text(JOURNALCTL)
        (sbin / "journalctl").chmod(0o755)
        if self.python:
            # the release's python3 first on PATH: hooks' `#!/usr/bin/env python3`
            bin_dir = u / "usr/local/bin"
            bin_dir.mkdir(parents=True, exist_ok=True)
            (bin_dir / "python3").symlink_to(self.python)
        return overlays

    @staticmethod
    def _systemctl_python() -> str:
        return Path(find_systemctl3()).read_text().splitlines()[0][2:].strip()

    def _start_systemctl_server(self) -> None:
        """The machine's systemctl server (sandbox.systemctl.serve): until it
        listens, and after it is gone, systemctl runs without it."""
        if self._systemctl_server is not None:
            self._systemctl_server.wait()
        self._systemctl_server = self.popen(
            [self._systemctl_python(), f"{systemctl.INSTALL_DIR}/systemctl.py", systemctl.SERVE],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)

    def start(self) -> "Machine":
        if self.holder is not None:
            return self
        overlays = self._prepare_state()
        att = self.network.attach(self.name, self._want_address, kind="machine",
                                  segment=self.segment)
        self.address = att.address
        self.address6 = att.address6
        self.iface = att.ifname
        cfg = {"overlays": overlays, "keep": ["/run/netns", str(state_root())]}
        (self.state_dir / "holder.json").write_text(json.dumps(cfg, indent=1))
        (self.state_dir / "holder.py").write_text(_HOLDER)
        try:
            self.holder = subprocess.Popen(
                ["nsenter", f"--net={NETNS_DIR / self.netns}", "--",
                 "unshare", "--mount", "--propagation", "slave", "--",
                 sys.executable, str(self.state_dir / "holder.py"),
                 str(self.state_dir / "holder.json"), f"flsb-holder:{self.netns}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd="/", start_new_session=True)
            ready, _, _ = select.select([self.holder.stdout], [], [], START_TIMEOUT)
            line = self.holder.stdout.readline().decode().strip() if ready else "(timeout)"
            if line != "ready":
                err = self.holder.stderr.read().decode() if self.holder.poll() is not None else ""
                raise MachineError(f"machine {self.name}: holder failed: {line} {err}".strip())
            self.holder.stdout.close()
            self._mnt_ns_fd = os.open(f"/proc/{self.holder.pid}/ns/mnt", os.O_RDONLY)
            self._mnt_ns = _ns_id(f"/proc/{self.holder.pid}/ns/mnt")
            self._boot_routes = self._routes()
            self._boot_mounts = set(self._mount_points())
            self._boot_forwarding = self._forwarding()
            self._start_systemctl_server()
        except Exception:
            self.destroy()
            raise
        return self

    def destroy(self) -> None:
        while self.on_destroy:
            try:
                self.on_destroy.pop()()
            except Exception as error:   # the kill below still cleans up
                print(f"machine {self.name}: teardown step failed: {error}", file=sys.stderr)
        for n in list_netns():
            if n.startswith(self.pod_prefix):
                delete_netns(n)
        ids = {i for i in (_ns_id(NETNS_DIR / self.netns), self._mnt_ns) if i}
        if ids:
            # Matched by namespace inode while the namespace is held open
            # (_mnt_ns_fd): released first, the number could pass to a
            # machine another test is starting meanwhile, and kill_pids's
            # SIGKILL round would kill that machine's hooks and flanneld.
            kill_pids(lambda: pids_in_namespaces(ids))
        if self._mnt_ns_fd is not None:
            os.close(self._mnt_ns_fd)
            self._mnt_ns_fd = None
        if self.holder is not None:
            try:
                self.holder.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.holder.kill()
                self.holder.wait()
            for f in (self.holder.stdout, self.holder.stderr):
                if f:
                    f.close()
            self.holder = None
        if self._systemctl_server is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._systemctl_server.wait(timeout=5)
            self._systemctl_server = None
        self.network.detach(self.name)
        if not self.keep_state and self.state_dir.exists():
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> "Machine":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.destroy()

    # --- running things inside ----------------------------------------------
    def command(self, argv, cwd: str | None = None) -> list[str]:
        prefix = ["nsenter", f"--mount=/proc/{self.holder_pid}/ns/mnt",
                  f"--net={NETNS_DIR / self.netns}", "--"]
        argv = [str(a) for a in argv]
        if cwd:
            # nsenter's --wd opens the directory before entering the mount
            # namespace (the host's path): change directory inside instead
            argv = ["/bin/sh", "-c", 'cd "$0" || exit 126; exec "$@"', str(cwd), *argv]
        return prefix + argv

    def environment(self, env=None, inherit_env: bool = False) -> dict:
        base = dict(os.environ) if inherit_env else {
            "PATH": DEFAULT_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root"}
        base.update(env or {})
        return base

    def run(self, argv, env=None, input=None, check: bool = True, timeout: float = 120,
            cwd: str | None = None, inherit_env: bool = False,
            text: bool | None = None) -> subprocess.CompletedProcess:
        """Run `argv` as root inside the machine, output captured: text in
        and out, unless `input` is bytes or text=False.  With check=True a
        non-zero exit raises CommandFailed (a CalledProcessError whose str()
        has the stderr)."""
        return run(self.command(argv, cwd), check=check, input=input, timeout=timeout,
                   env=self.environment(env, inherit_env), text=text)

    def popen(self, argv, env=None, cwd: str | None = None, inherit_env: bool = False,
              **kwargs) -> subprocess.Popen:
        return subprocess.Popen(self.command(argv, cwd), env=self.environment(env, inherit_env),
                                **kwargs)

    def systemctl(self, *args, check: bool = False) -> subprocess.CompletedProcess:
        return self.run(["systemctl", *args], check=check)

    # --- reboot ------------------------------------------------------------------
    def _routes(self) -> list[dict]:
        """Routes of both families, each with "family": "-4" or "-6"."""
        return [dict(route, family=family) for family in ("-4", "-6")
                for route in self.ip_json(family, "route", "show")]

    def _forwarding(self) -> str:
        """net.ipv4.ip_forward and net.ipv6.conf.all.forwarding, as "0 0"."""
        return run(["ip", "netns", "exec", self.netns, "cat", *FORWARDING_SYSCTLS]
                   ).stdout.replace("\n", " ").strip()

    def reboot(self, start_enabled: bool = True) -> list[str]:
        """The machine loses power and boots again; returns what went, as
        lines ("process 123 flanneld", "link cni0", "/run/flannel", "pod ...").

        Like a power cycle: every process of the machine is SIGKILLed (the
        holder, which *is* the machine's mount namespace, stays), its pods'
        network namespaces go (sandbox pods live in host-side namespaces named
        after the machine), every link but lo and its NIC goes (flannel.*,
        cni0, veths), routes and ip_forward return to what the machine booted
        with, its nftables/iptables rules are flushed, and /run is emptied as
        a fresh tmpfs would be: everything the machine wrote under /run is
        removed (the host's own /run entries, the overlay's lower layer, stay
        visible: they stand for what a booting system recreates; /run/netns
        and the state root stay bound). Disks keep their files (/etc, /opt,
        /var/lib, /usr/local: the install record, /var/lib/cni, the unit
        agents' state). Then "systemd" boots: with start_enabled, every unit
        enabled in /etc/systemd/system/*.target.wants is started, as
        systemd does before Juju's agent runs `start`."""
        gone: list[str] = []
        for hook in list(self.on_reboot):
            try:
                hook()
            except Exception as error:   # the kill below still happens
                print(f"machine {self.name}: reboot step failed: {error}", file=sys.stderr)
        for pid in self.pids():
            if pid == self.holder_pid:
                continue
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
                os.kill(pid, 9)
                gone.append(f"process {pid} {comm}")
            except OSError:
                pass
        kill_pids(lambda: [p for p in self.pids() if p != self.holder_pid], timeout=0.5)
        for n in list_netns():
            if n.startswith(self.pod_prefix):
                delete_netns(n)
                gone.append(f"pod namespace {n}")
        for link in self.ip_json("link", "show"):
            name = link["ifname"]
            if name in ("lo", self.iface):
                continue
            if run(["ip", "-n", self.netns, "link", "del", name], check=False).returncode == 0:
                gone.append(f"link {name}")
        boot = {(r.get("dst"), r.get("dev"), r.get("gateway")) for r in self._boot_routes}
        for route in self._routes():
            if (route.get("dst"), route.get("dev"), route.get("gateway")) not in boot:
                argv = ["ip", "-n", self.netns, route["family"], "route", "del", route["dst"]]
                if route.get("dev"):
                    argv += ["dev", route["dev"]]
                run(argv, check=False)
                gone.append(f"route {route['dst']}")
        run(["ip", "netns", "exec", self.netns, "nft", "flush", "ruleset"], check=False)
        for path, value in zip(FORWARDING_SYSCTLS, self._boot_forwarding.split()):
            run(["ip", "netns", "exec", self.netns, "sh", "-c", f"echo {value} > {path}"],
                check=False)
        gone += self._empty_run()
        (self.path_on_host("/run") / "systemd" / "system").mkdir(parents=True, exist_ok=True)
        self._start_systemctl_server()
        for hook in list(self.on_boot):
            try:
                hook()
            except Exception as error:   # the units still start
                print(f"machine {self.name}: boot step failed: {error}", file=sys.stderr)
        if start_enabled:
            for unit in self.enabled_units():
                self.run(["systemctl", "start", unit], check=False, timeout=60)
        return gone

    def _mount_points(self) -> list[str]:
        return [line.split()[4] for line in
                Path(f"/proc/{self.holder_pid}/mountinfo").read_text().splitlines()]

    def enabled_units(self) -> list[str]:
        """Units the machine enabled (`systemctl enable`) for a boot target:
        links in its own /etc/systemd/system/*.target.wants (the overlay's
        upper layer; the host's enabled units are not the machine's)."""
        etc = self.state_dir / "upper" / "etc" / "systemd" / "system"
        found = []
        for wants in etc.glob("*.target.wants"):
            found += [p.name for p in wants.iterdir() if os.path.lexists(p)]
        return sorted(set(found))

    def _empty_run(self) -> list[str]:
        """Remove what the machine wrote under /run (the overlay's upper
        layer), through the machine's own view; unmount what was mounted
        there first. Kept: /run/netns and the state root (bound from the host)."""
        keep = [Path(p) for p in ("/run/netns", str(state_root()))]
        for point in map(Path, reversed(self._mount_points())):
            if str(point) in self._boot_mounts or Path("/run") not in point.parents:
                continue
            if not any(point == k or k in point.parents or point in k.parents for k in keep):
                self.run(["umount", "-l", str(point)], check=False)
        root = Path(f"/proc/{self.holder_pid}/root")
        upper = self.state_dir / "upper"
        gone = []

        def empty(directory: Path) -> None:
            try:
                names = sorted(os.listdir(upper / directory.relative_to("/")))
            except OSError:
                return
            for name in names:
                path = directory / name
                view = root / path.relative_to("/")
                if any(path == k for k in keep):
                    continue
                lower_dir = Path(path).is_dir() and not Path(path).is_symlink()
                if any(path in k.parents for k in keep) or (
                        lower_dir and view.is_dir() and not view.is_symlink()):
                    empty(path)   # holds something kept, or merged with the host's
                    continue
                try:
                    if view.is_dir() and not view.is_symlink():
                        shutil.rmtree(view)
                    else:
                        view.unlink()
                    gone.append(str(path))
                except FileNotFoundError:
                    pass
        empty(Path("/run"))
        return gone

    # --- files ----------------------------------------------------------------
    def path_on_host(self, path: str) -> Path:
        """A host path that reaches `path` as the machine sees it (through the
        holder's /proc/PID/root), with the machine's symlinks resolved inside
        the machine (an absolute link would otherwise escape to the host)."""
        root = f"/proc/{self.holder_pid}/root"
        parts = [p for p in Path(path).parts if p != "/"]
        resolved: list[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = root + "/" + "/".join(resolved + [part])
            if os.path.islink(candidate):
                hops += 1
                if hops > 40:
                    raise OSError(40, "too many levels of symbolic links", path)
                target = os.readlink(candidate)
                if target.startswith("/"):
                    resolved = []
                parts = [p for p in Path(target).parts if p != "/"] + parts
                continue
            resolved.append(part)
        return Path(root + "/" + "/".join(resolved))

    def host_path(self, path: str) -> str:
        """str(path_on_host(path)), for callers that want a string."""
        return str(self.path_on_host(path))

    def upper_path(self, path: str) -> Path:
        """Where the overlay keeps `path` once written inside the machine."""
        real = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        for root in OVERLAY_ROOTS:
            if real == root or real.startswith(root + "/"):
                return self.state_dir / "upper" / real.lstrip("/")
        raise ValueError(f"{path} is not in a private tree of the machine")

    def read_file(self, path: str) -> bytes | None:
        try:
            return self.path_on_host(path).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        target = self.path_on_host(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            data = data.encode()
        tmp = target.with_name(f".{target.name}.flsb-tmp")
        tmp.write_bytes(data)
        tmp.chmod(mode)
        os.replace(tmp, target)

    def run_kernel(self, release: str) -> None:
        """The machine says it runs kernel `release` ("5.4.0-216-generic")
        where a program asks (/proc/sys/kernel/osrelease, bound over in its
        own mount namespace); the kernel itself stays the host's."""
        self.write_file("/etc/flannel-sandbox-osrelease", release + "\n")
        self.run(["mount", "--bind", "/etc/flannel-sandbox-osrelease",
                  "/proc/sys/kernel/osrelease"])

    def ls(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(self.path_on_host(path)))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def exists(self, path: str) -> bool:
        return os.path.lexists(self.path_on_host(path))

    # --- processes and links --------------------------------------------------
    def pids(self) -> list[int]:
        ids = {i for i in (_ns_id(NETNS_DIR / self.netns), self._mnt_ns) if i}
        return pids_in_namespaces(ids)

    def pids_of(self, name: str) -> list[int]:
        """Processes in the machine named `name` (comm, or argv[0]'s basename).
        A child forked by one of them that has not exec'd yet (flanneld runs
        iptables every few seconds) bears the same name for a moment: it is
        not a process of its own and is left out."""
        found = {}
        for pid in self.pids():
            if pid == self.holder_pid:
                continue
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
                argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            if name in (comm, os.path.basename(argv0)):
                ppid = next((int(line.split()[1]) for line in status.splitlines()
                             if line.startswith("PPid:")), 0)
                found[pid] = ppid
        return [pid for pid, ppid in found.items() if ppid not in found]

    def command_lines(self, name: str) -> list[list[str]]:
        """The argv of each process in the machine named `name` (pids_of)."""
        return [argv for argv in map(command_line, self.pids_of(name)) if argv]

    def ip_json(self, *args) -> list[dict]:
        out = run(["ip", "-n", self.netns, "-j", *args]).stdout
        return json.loads(out) if out.strip() else []

    def links(self) -> list[str]:
        return [link["ifname"] for link in self.ip_json("link", "show")]

    def wait_for_file(self, path: str, timeout: float = 30.0, interval: float = 0.2) -> bytes:
        data = wait_for(lambda: self.read_file(path), timeout, interval)
        if not data:
            raise TimeoutError(f"{self.name}: {path} did not appear within {timeout}s")
        return data
