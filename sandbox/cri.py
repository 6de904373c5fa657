"""CRI pods: containerd inside a sandbox machine, pods made with crictl.

kubelet reaches the CNI through containerd's CRI plugin; this module runs the
same path without kubelet.  Per :class:`~sandbox.machine.Machine`, a
:class:`Containerd` (Debian's containerd and runc) runs *inside* the machine
(its network and mount namespaces), so its CNI ``bin_dir``/``conf_dir`` are
the machine's ``/opt/cni/bin`` and ``/etc/cni/net.d``, as the Charmed
Kubernetes containerd charm configures them, and the flannel plugin reads the
machine's ``/run/flannel/subnet.env``.  Its root, state, sockets, config.toml
and images live in ``<machine state dir>/containerd`` (the state root is the
host's directory inside every machine), and its pods' cgroups under
``/flsb-cri/<machine netns>`` of every cgroup hierarchy.

Traps passed (docs/reference/flanneld.md):

- The machine's ``/sys`` is its own sysfs, without the host's cgroup mounts,
  and runc needs them: :func:`mount_cgroups` replays the host's
  ``/sys/fs/cgroup`` mounts inside the machine before containerd starts.
- This VM refuses a negative ``oom_score_adj``: ``restrict_oom_score_adj``.
- No registry is reachable: the pause and busybox images are OCI layout
  archives built here from Debian's ``busybox-static`` (:func:`image_archives`,
  cached) and loaded with ``ctr images import``; ``sandbox_image`` is the
  local pause image.
- ``crictl exec`` talks to containerd's streaming server on 127.0.0.1 of the
  machine's netns, so crictl always runs inside the machine.

Started lazily: nothing here runs until a test or the demo asks for a CRI pod.

API::

    rt = Containerd(machine).start()        # or runtime_for(machine): one per machine
    rt.crictl("pods") -> CompletedProcess   # crictl against this containerd, inside
    rt.memory_kib() -> {"containerd": KiB, "shims": KiB}
    rt.started_seconds                      # time start() took (images included)
    rt.stop()                               # every pod removed through the runtime,
                                            # then containerd, shims, cgroups gone
    pod = CriPod.create(machine, "p1", timeout=60)   # runp + busybox container
        # raises PodFailed(containerd's message) after removing the half-made pod
    pod.name, pod.machine, pod.pod_id, pod.container_id, pod.address, pod.interface,
    pod.address6 (its IPv6 address on a dual-stack network, else None),
    pod.netns_path (/proc/PID/ns/net of the pause process, for host-side pings)
    pod.ping(address, count=3, wait=1.0) -> bool    # `crictl exec ... ping` in the container
    pod.exec(argv, check=True) -> CompletedProcess  # crictl exec in the container
    pod.delete() -> str                             # crictl stopp + rmp; "" or the error
    image_archives() -> {"pause": Path, "busybox": Path}
    cached_archives(out_dir, key, names, make) -> {name: Path}   # built once, locked
    archive_paths(out_dir, key, names) -> {name: Path}   # where, without building
    cri_leftovers() -> list[str]            # cgroups of dead machines, cni-* netns files
    cleanup_stale_cgroups() -> list[str]    # a killed run's pod cgroups (start() calls it)
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Callable

from .machine import Machine, resident_kib
from .network import _tag_of, kill_pids, owner_alive, state_root
from .pod import PodFailed
from .resource import binary_path, cache_root, crictl_path, host_arch

BUSYBOX = Path("/bin/busybox")          # Debian's busybox-static
PAUSE_IMAGE = "sandbox.local/pause:busybox"
BUSYBOX_IMAGE = "sandbox.local/busybox:busybox"
K8S_NAMESPACE = "k8s.io"                # the containerd namespace the CRI plugin uses
CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_PARENT = "flsb-cri"              # every CRI pod's cgroup is under /flsb-cri/<netns>
START_TIMEOUT = 120.0
# Applets the busybox image links in /bin (what a test runs in a container).
APPLETS = ("sh", "sleep", "ping", "ip", "cat", "ls", "hostname", "ifconfig", "route", "true",
           # a Service's backends and client (sandbox.kubernetes)
           # (Debian's static wget crashes in a bare image; nc does not)
           "httpd", "nc", "tail", "echo", "mkdir", "env")
# Bumped when the archives' layout changes (part of the cache key).
IMAGE_FORMAT = "3"
PRUNE_AFTER = 86400.0      # seconds an archive of another key is kept


# --- images ------------------------------------------------------------------
def _tar_member(tar: tarfile.TarFile, name: str, *, data: bytes | None = None,
                mode: int = 0o755, link: str | None = None, directory: bool = False) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = mode
    if directory:
        info.type = tarfile.DIRTYPE
    elif link is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = link
    else:
        info.size = len(data or b"")
    tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _layer() -> tuple[bytes, bytes]:
    """(uncompressed tar, gzip of it): /bin/busybox, its applet links, /etc
    and /tmp; reproducible (fixed mtimes and owners)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "etc", "tmp", "proc", "sys", "dev"):
            _tar_member(tar, d, directory=True, mode=0o1777 if d == "tmp" else 0o755)
        _tar_member(tar, "bin/busybox", data=BUSYBOX.read_bytes())
        for applet in APPLETS:
            _tar_member(tar, f"bin/{applet}", link="busybox", mode=0o777)
        _tar_member(tar, "etc/passwd", data=b"root:x:0:0:root:/:/bin/sh\n", mode=0o644)
        _tar_member(tar, "etc/group", data=b"root:x:0:\n", mode=0o644)
    tar_bytes = raw.getvalue()
    gz = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=gz, mtime=0) as f:
        f.write(tar_bytes)
    return tar_bytes, gz.getvalue()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def oci_archive(image: str, argv: list[str], layer: tuple[bytes, bytes], *,
                cmd: list[str] | None = None, path: str = "/bin") -> bytes:
    """An OCI image layout (index.json, oci-layout, blobs) as a tar, named
    `image` for containerd through the io.containerd.image.name annotation;
    `argv` its entrypoint (none if empty), `cmd` what a pod that gives no
    command runs (the entrypoint's arguments where it has one)."""
    tar_bytes, gz_bytes = layer
    arch = host_arch()
    config = json.dumps({
        "architecture": arch, "os": "linux",
        "config": {**({"Entrypoint": argv} if argv else {}), **({"Cmd": cmd} if cmd else {}),
                   "Env": [f"PATH={path}"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [_digest(tar_bytes)]},
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": _digest(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _digest(gz_bytes), "size": len(gz_bytes)}],
    }, sort_keys=True).encode()
    index = json.dumps({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": _digest(manifest), "size": len(manifest),
            "platform": {"architecture": arch, "os": "linux"},
            "annotations": {"io.containerd.image.name": image,
                            "org.opencontainers.image.ref.name": image.rsplit(":", 1)[1]},
        }],
    }, sort_keys=True).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _tar_member(tar, "oci-layout", data=b'{"imageLayoutVersion":"1.0.0"}', mode=0o644)
        _tar_member(tar, "index.json", data=index, mode=0o644)
        _tar_member(tar, "blobs", directory=True)
        _tar_member(tar, "blobs/sha256", directory=True)
        for blob in (config, manifest, gz_bytes):
            _tar_member(tar, f"blobs/sha256/{_digest(blob).split(':')[1]}", data=blob,
                        mode=0o644)
    return out.getvalue()


# The pause process only has to hold the pod's namespaces; containerd stops a
# sandbox with SIGKILL, so a plain sleep does.
_IMAGES = {
    "pause": (PAUSE_IMAGE, ["/bin/sleep", "2147483647"]),
    "busybox": (BUSYBOX_IMAGE, ["/bin/sleep", "2147483647"]),
}


def image_archives() -> dict[str, Path]:
    """The pause and busybox OCI archives, built into
    ``$FLANNEL_CACHE/images`` once per busybox binary."""
    if not BUSYBOX.is_file():
        raise FileNotFoundError(f"{BUSYBOX} missing: apt-get install busybox-static "
                                "(scripts/setup-host does)")
    st = BUSYBOX.stat()
    key = hashlib.sha256(f"{IMAGE_FORMAT}:{st.st_size}:{st.st_mtime_ns}:{host_arch()}:"
                         f"{json.dumps(_IMAGES, sort_keys=True)}".encode()).hexdigest()[:16]
    layers: list = []     # both images share one layer, made once

    def make(name: str) -> bytes:
        if not layers:
            layers.append(_layer())
        image, argv = _IMAGES[name]
        return oci_archive(image, argv, layers[0])
    return cached_archives(cache_root() / "images", key, list(_IMAGES), make)


def archive_paths(out_dir: Path, key: str, names) -> dict[str, Path]:
    """Where cached_archives keeps each of `names` for `key`."""
    return {name: out_dir / f"{name}-{key}.oci.tar" for name in names}


def cached_archives(out_dir: Path, key: str, names: list[str],
                    make: Callable[[str], bytes]) -> dict[str, Path]:
    """{name: out_dir/<name>-<key>.oci.tar}, each missing one written from
    make(name), one builder at a time (machines start side by side, tests
    run in several processes: the others find them made). An archive of
    another key goes a day after it was made: another checkout's may be in
    use now."""
    paths = archive_paths(out_dir, key, names)
    if all(p.is_file() for p in paths.values()):
        return paths
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name, path in paths.items():
            if path.is_file():
                continue
            data = make(name)
            for old in out_dir.glob(f"{name}-*.oci.tar"):
                with contextlib.suppress(OSError):
                    if time.time() - old.stat().st_mtime > PRUNE_AFTER:
                        old.unlink()
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
    return paths
    out_dir.mkdir(parents=True, exist_ok=True)
    # one builder at a time (machines start side by side, tests in several
    # processes); the others find the archives made
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all(p.is_file() for p in paths.values()):
            return paths
        layer = _layer()
        for name, (image, argv) in _IMAGES.items():
            for old in out_dir.glob(f"{name}-*.oci.tar"):
                old.unlink(missing_ok=True)
            tmp = paths[name].with_name(paths[name].name + ".tmp")
            tmp.write_bytes(oci_archive(image, argv, layer))
            os.replace(tmp, paths[name])
    return paths


# --- cgroups ---------------------------------------------------------------------
def _host_cgroup_mounts() -> list[tuple[str, str, str]]:
    """(mount point, fstype, super options) of the host's cgroup mounts, in
    mount order: the tmpfs at /sys/fs/cgroup first (cgroup v1) or one cgroup2."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, right = line.split(" - ", 1)
        point = left.split()[4]
        fstype, _source, options = right.split()[:3]
        if point == CGROUP_ROOT or point.startswith(CGROUP_ROOT + "/"):
            found.append((point, fstype, options))
    return found


def mount_cgroups(machine: Machine) -> None:
    """Make the host's cgroup hierarchies visible at /sys/fs/cgroup inside
    `machine` (its holder mounted a fresh sysfs, which has none): runc finds
    them through /proc/self/mountinfo.  Idempotent."""
    script = ["set -e", f"mountpoint -q {CGROUP_ROOT}/.flsb 2>/dev/null && exit 0 || true"]
    for point, fstype, options in _host_cgroup_mounts():
        opts = ",".join(o for o in options.split(",") if o not in ("rw", "ro"))
        if fstype == "tmpfs":
            opts = "mode=755"
        script.append(f"mkdir -p {point}")
        script.append(f"mount -t {fstype} -o {opts or 'defaults'} {fstype} {point}")
    # a mark that the mounts are done (a later start skips them)
    script += [f"mkdir -p {CGROUP_ROOT}/.flsb",
               f"mount -t tmpfs -o size=4k flsb {CGROUP_ROOT}/.flsb"]
    machine.run(["sh", "-c", "\n".join(script)])


def _cgroup_dirs(relative: str) -> list[Path]:
    """Every hierarchy's directory for `relative` (under /sys/fs/cgroup/*/ on
    cgroup v1, /sys/fs/cgroup/ on v2) that exists on the host."""
    root = Path(CGROUP_ROOT)
    relative = relative.lstrip("/")
    candidates = [root / relative] + [p / relative for p in root.iterdir() if p.is_dir()]
    return [c for c in candidates if c.is_dir()]


def _cgroup_pids(relative: str) -> list[int]:
    pids = set()
    for top in _cgroup_dirs(relative):
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in procs.read_text().split())
    return sorted(pids)


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, IndexError):
        return False


def _remove_cgroups(relative: str) -> None:
    for top in _cgroup_dirs(relative):
        for d in sorted((p for p in top.rglob("*") if p.is_dir()),
                        key=lambda p: len(p.parts), reverse=True) + [top]:
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):   # the shared parent, once empty
            top.parent.rmdir()


# --- containerd --------------------------------------------------------------------
def _config_toml(base: Path) -> str:
    return f"""\
version = 2
root = "{base}/root"
state = "{base}/state"
# the overlay snapshotter cannot stack on the machine's overlays; images are tiny
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{base}/containerd.sock"

[ttrpc]
  address = "{base}/containerd.sock.ttrpc"

[debug]
  address = ""
  # the conf syncer says at debug level which conf_dir events it ignores
  # ("ignore event from cni conf dir") and which reload ("receiving change
  # event ..."): what tests wait for instead of the clock
  level = "debug"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # this VM refuses a negative oom_score_adj (EIO): without this, runc create
  # fails with "can't get final child's PID from pipe: EOF"
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # pod network namespaces in the state dir, not the host's shared /run/netns
  netns_mounts_under_state_dir = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

  # as the Charmed Kubernetes containerd charm configures it
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
"""


class RuntimeFailed(RuntimeError):
    pass


class Containerd:
    """Debian's containerd 1.6 (generation "1.6"), or containerd 2 ("2":
    CONTAINERD2_VERSION from the Go module proxy, with its own shim and
    Debian's runc), as the machine's `containerd` attribute says. Both read
    the same version = 2 config: containerd 2 migrates it as it starts (its
    RELEASES.md: versions 2 and 3 are migrated, `bin_dir` to `bin_dirs`),
    as it would an operator's config left as it was."""

    def __init__(self, machine: Machine):
        self.machine = machine
        self.generation = getattr(machine, "containerd", "1.6")
        self.base = machine.state_dir / "containerd"
        self.socket = self.base / "containerd.sock"
        self.cgroup = f"/{CGROUP_PARENT}/{machine.netns}"
        self.process: subprocess.Popen | None = None
        self.started_seconds: float | None = None
        self._log = None

    def __repr__(self) -> str:
        return f"Containerd(on {self.machine.name}, socket={self.socket})"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> "Containerd":
        if self.running:
            return self
        started = time.monotonic()
        cleanup_stale_cgroups()
        crictl = crictl_path()
        images = image_archives()
        self.base.mkdir(parents=True, exist_ok=True)
        (self.base / "config.toml").write_text(_config_toml(self.base))
        (self.base / "crictl.yaml").write_text(
            f"runtime-endpoint: unix://{self.socket}\nimage-endpoint: unix://{self.socket}\n"
            "timeout: 60\n")
        mount_cgroups(self.machine)
        self._log = open(self.base / "containerd.log", "ab")
        self.process = self.machine.popen(
            [*self.command(), "--config", str(self.base / "config.toml")],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeFailed(f"containerd on {self.machine.name} exited "
                                    f"{self.process.returncode}: {self.log_tail()}")
            if (self.socket.exists()
                    and self.crictl("info", check=False, crictl=crictl).returncode == 0):
                break
            if time.monotonic() > deadline:
                raise RuntimeFailed(f"containerd on {self.machine.name} not ready after "
                                    f"{START_TIMEOUT:.0f}s: {self.log_tail()}")
            time.sleep(0.1)
        for archive in images.values():
            self.ctr("images", "import", "--snapshotter", "native", str(archive))
        self.started_seconds = time.monotonic() - started
        return self

    def command(self) -> list[str]:
        """containerd as this generation runs: Debian's on PATH, or
        containerd 2 with its shim's directory first on PATH (containerd
        finds the shim there)."""
        if self.generation == "1.6":
            return ["containerd"]
        containerd = binary_path("containerd-2", host_arch())
        shim = binary_path("containerd-shim-runc-v2-2", host_arch())
        path = f"{shim.parent}:{containerd.parent}:/usr/sbin:/usr/bin:/sbin:/bin"
        return ["env", f"PATH={path}", str(containerd)]

    def version(self) -> str:
        """What this containerd says it is ("v2.4.2", "1.6.20~ds1")."""
        return self.crictl("version").stdout.split("RuntimeVersion:")[1].split()[0]

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_since(0)[-chars:]

    def log_size(self) -> int:
        """A mark in containerd's log, for log_since()."""
        try:
            return (self.base / "containerd.log").stat().st_size
        except OSError:
            return 0

    def log_since(self, mark: int) -> str:
        """What containerd logged after `mark` (a log_size())."""
        try:
            with open(self.base / "containerd.log", "rb") as f:
                f.seek(mark)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def crictl(self, *args: str, check: bool = True, timeout: float = 90,
               crictl: Path | None = None) -> subprocess.CompletedProcess:
        """crictl against this containerd, run inside the machine (crictl
        exec reaches the streaming server on the machine's 127.0.0.1)."""
        return self.machine.run([str(crictl or crictl_path()), "--config",
                                 str(self.base / "crictl.yaml"), *args],
                                check=check, timeout=timeout)

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.machine.run(["ctr", "--address", str(self.socket),
                                 "--namespace", K8S_NAMESPACE, *args], check=check)

    def shim_pids(self) -> list[int]:
        return [p for p in self.machine.pids_of("containerd-shim-runc-v2")]

    def memory_kib(self) -> dict[str, int]:
        """Resident memory (VmRSS) of containerd and of its shims, in KiB."""
        # the Popen is nsenter, which execs containerd: same pid
        main = resident_kib([self.process.pid]) if self.running else 0
        return {"containerd": main, "shims": resident_kib(self.shim_pids())}

    def crash(self) -> None:
        """The power goes (Machine.reboot): containerd, its shims and every
        container die at once, with no CNI DEL; the kernel's cgroups go.
        What containerd keeps on disk (its root under the state dir) stays."""
        doomed = set(_cgroup_pids(self.cgroup))
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.machine.holder is not None:
            doomed.update(self.shim_pids())
            kill_pids(self.shim_pids, timeout=0)
        kill_pids(lambda: _cgroup_pids(self.cgroup), timeout=0)
        deadline = time.monotonic() + 10
        while any(_running(p) for p in doomed) and time.monotonic() < deadline:
            time.sleep(0.05)   # a killed process takes a moment to be gone
        _remove_cgroups(self.cgroup)
        if self._log is not None:
            self._log.close()
            self._log = None
        self.process = None

    def stop(self) -> None:
        """Remove every pod through the runtime (CNI DEL included), stop
        containerd, then kill whatever the shims left in the pods' cgroups
        and remove those cgroups."""
        if self.running:
            with contextlib.suppress(Exception):
                self.crictl("rmp", "--force", "--all", check=False, timeout=60)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.machine.holder is not None:
            kill_pids(self.shim_pids)
        kill_pids(lambda: _cgroup_pids(self.cgroup))
        _remove_cgroups(self.cgroup)
        if self._log is not None:
            self._log.close()
            self._log = None
        self.process = None


_RUNTIMES: dict[str, Containerd] = {}


def runtime_for(machine: Machine) -> Containerd:
    """The machine's containerd, started on first use (one per machine)."""
    rt = _RUNTIMES.get(machine.netns)
    if rt is None or rt.machine is not machine:
        rt = _RUNTIMES[machine.netns] = Containerd(machine)
        machine.on_destroy.append(lambda: stop_runtime(machine))
        machine.on_reboot.append(lambda: crash_runtime(machine))
    return rt.start()


def crash_runtime(machine: Machine) -> None:
    """The machine's containerd dies with the power (Machine.reboot() does
    this first); the next runtime_for() starts a new one."""
    rt = _RUNTIMES.get(machine.netns)
    if rt is not None and rt.machine is machine:
        rt.crash()


def stop_runtime(machine: Machine) -> None:
    """Stop the machine's containerd if one was started (Machine.destroy()
    does, first)."""
    rt = _RUNTIMES.pop(machine.netns, None)
    if rt is not None:
        rt.stop()


# --- pods ---------------------------------------------------------------------------
class CriPod:
    """A pod sandbox (crictl runp) with one busybox container in it."""

    def __init__(self, runtime: Containerd, name: str):
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
            raise ValueError(f"bad pod name {name!r}")
        self.runtime = runtime
        self.machine = runtime.machine
        self.name = name
        self.pod_id: str | None = None
        self.container_id: str | None = None
        self.interface: str | None = None
        self.address: str | None = None
        self.address6: str | None = None
        self.pause_pid: int | None = None
        self.dir = runtime.base / "pods" / name

    def __repr__(self) -> str:
        return f"CriPod({self.name!r} on {self.machine.name}, address={self.address!r})"

    @property
    def netns_path(self) -> str:
        """The pod's network namespace as the host can enter it."""
        return f"/proc/{self.pause_pid}/ns/net"

    @property
    def netns(self) -> str:
        """What sandbox.network's ping_from_netns and Cluster.pinging take
        (they join it to /run/netns; an absolute path stays itself)."""
        return self.netns_path

    @classmethod
    def create(cls, machine: Machine, name: str, timeout: float = 60) -> "CriPod":
        runtime = runtime_for(machine)
        pod = cls(runtime, name)
        pod.dir.mkdir(parents=True, exist_ok=True)
        (pod.dir / "pod.json").write_text(json.dumps({
            "metadata": {"name": name, "namespace": "default", "uid": f"{machine.name}-{name}",
                         "attempt": 0},
            "hostname": name,
            "log_directory": str(pod.dir / "logs"),
            "linux": {"cgroup_parent": runtime.cgroup},
        }))
        (pod.dir / "container.json").write_text(json.dumps({
            "metadata": {"name": "busybox"},
            "image": {"image": BUSYBOX_IMAGE},
            "log_path": "busybox.log",
            "linux": {},
        }))
        try:
            proc = runtime.crictl("runp", str(pod.dir / "pod.json"), check=False,
                                  timeout=timeout)
            if proc.returncode != 0:
                raise PodFailed(_cri_message(proc), proc.stderr)
            pod.pod_id = proc.stdout.strip().splitlines()[-1]
            proc = runtime.crictl("create", "--no-pull", pod.pod_id,
                                  str(pod.dir / "container.json"), str(pod.dir / "pod.json"),
                                  check=False, timeout=timeout)
            if proc.returncode != 0:
                raise PodFailed(_cri_message(proc), proc.stderr)
            pod.container_id = proc.stdout.strip().splitlines()[-1]
            proc = runtime.crictl("start", pod.container_id, check=False, timeout=timeout)
            if proc.returncode != 0:
                raise PodFailed(_cri_message(proc), proc.stderr)
            status = pod.inspect()
            pod.address = status["status"]["network"]["ip"]
            # a dual-stack network's IPv6 address (CRI's additionalIps)
            pod.address6 = next((extra["ip"] for extra in
                                 status["status"]["network"].get("additionalIps") or []
                                 if ":" in extra.get("ip", "")), None)
            pod.pause_pid = int(status["info"]["pid"])
            if not pod.address:
                raise PodFailed(f"crictl inspectp {pod.pod_id}: no address")
            # the CNI result's prefix length: the pod's eth0 as the kernel has it
            pod.interface = pod.address
            out = runtime.crictl("exec", pod.container_id, "ip", "-o", "-4", "addr", "show",
                                 "eth0", check=False).stdout
            found = re.search(r"inet (\S+)", out)
            if found:
                pod.interface = found.group(1)
        except BaseException:
            pod.delete()
            raise
        return pod

    def inspect(self) -> dict:
        return json.loads(self.runtime.crictl("inspectp", "-o", "json", self.pod_id).stdout)

    def exec(self, argv, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run `argv` in the busybox container (crictl exec --sync)."""
        return self.runtime.crictl("exec", self.container_id, *map(str, argv), check=check,
                                   timeout=timeout)

    def ping(self, address: str, count: int = 3, wait: float = 1.0) -> bool:
        """True if at least one of `count` echoes from inside the container
        (busybox ping; -A: the next as soon as one is answered) is answered."""
        proc = self.exec(["ping", "-A", "-c", count, "-W", max(1, int(wait)), address],
                         check=False,
                         timeout=count * wait + 30)
        return proc.returncode == 0

    def delete(self) -> str:
        """Stop and remove the pod through the runtime (CNI DEL releases the
        address).  Never raises; returns containerd's error ("" on success)."""
        if self.pod_id is None or not self.runtime.running:
            return ""
        err = ""
        for verb in ("stopp", "rmp"):
            proc = self.runtime.crictl(verb, self.pod_id, check=False)
            if proc.returncode != 0:
                err = err or _cri_message(proc)
        if not err:
            self.pod_id = None
        return err

    def __enter__(self) -> "CriPod":
        return self

    def __exit__(self, *exc) -> None:
        self.delete()


def _cri_message(proc: subprocess.CompletedProcess) -> str:
    """containerd's words from a failed crictl: the rpc error's desc, out of
    crictl's log line (msg="... desc = <message>") and unquoted."""
    text = (proc.stderr.strip() or proc.stdout.strip() or f"crictl exited {proc.returncode}")
    descs = [m.group(1) for m in re.finditer(r'desc = (.*?)"?$', text, re.M)]
    if not descs:
        return text
    return descs[-1].replace('\\"', '"')


def cleanup_stale_cgroups() -> list[str]:
    """Pod cgroups of sandbox networks whose owning run is dead (killed
    before its machines were destroyed): their processes killed, the cgroups
    removed, as network.cleanup_stale does for namespaces. A live run's
    (another xdist worker's) are spared. Returns what it removed."""
    machines = {d.name for top in _cgroup_dirs(CGROUP_PARENT) for d in top.iterdir()
                if d.is_dir() and _tag_of(d.name)}
    removed = []
    for netns in sorted(machines):
        if owner_alive(_tag_of(netns)):
            continue
        relative = f"{CGROUP_PARENT}/{netns}"
        kill_pids(lambda: _cgroup_pids(relative))
        _remove_cgroups(relative)
        removed.append(f"cgroup /{relative}")
    return removed


def cri_leftovers() -> list[str]:
    """CRI state the sandbox left on the host: pod cgroups (under
    /flsb-cri/ of every hierarchy) whose machine's state directory is gone."""
    found = []
    live = {p.name for p in state_root().iterdir()} if state_root().is_dir() else set()
    for top in _cgroup_dirs(CGROUP_PARENT):
        for d in top.iterdir():
            if d.is_dir() and d.name not in live:
                found.append(f"cgroup {d}")
    return found
