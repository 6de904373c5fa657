"""CRI pods (sandbox.cri): the locally built images, containerd inside a
machine, pods made through it with crictl on a bridge network of Debian's
plugins (no flannel, no charm), and a teardown that leaves nothing."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from sandbox.cri import (BUSYBOX, BUSYBOX_IMAGE, CGROUP_PARENT, PAUSE_IMAGE, CriPod,
                         cleanup_stale_cgroups, cri_leftovers, image_archives, runtime_for)
from sandbox.machine import Machine
from sandbox.pod import PodFailed
from sandbox.resource import CONTAINERD2_VERSION, CRICTL_VERSION, crictl_path
from sandbox.network import process_alive

pytestmark = [pytest.mark.sandbox, pytest.mark.gobuild]

DEBIAN_CNI = Path("/usr/lib/cni")
BRIDGE_CONFLIST = {
    "name": "sbnet", "cniVersion": "0.3.1",
    "plugins": [{"type": "bridge", "bridge": "sb0", "isGateway": True,
                 "ipam": {"type": "host-local", "subnet": "10.77.0.0/24"}}],
}


@pytest.fixture(scope="module")
def have_runtime():
    for tool in ("containerd", "runc", "ctr"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool} (scripts/setup-host)")
    if not BUSYBOX.is_file():
        pytest.skip("needs busybox-static (scripts/setup-host)")
    if not DEBIAN_CNI.joinpath("bridge").exists():
        pytest.skip("needs containernetworking-plugins")


def _blobs(archive: Path) -> tuple[dict, dict[str, bytes]]:
    with tarfile.open(archive) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    return json.loads(files["index.json"]), files


@pytest.mark.parametrize("which, image", [("pause", PAUSE_IMAGE), ("busybox", BUSYBOX_IMAGE)])
def test_images_are_oci_layouts_of_debians_busybox(which, image):
    archive = image_archives()[which]
    index, files = _blobs(archive)
    [entry] = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == image

    def blob(descriptor: dict) -> bytes:
        data = files["blobs/sha256/" + descriptor["digest"].split(":")[1]]
        assert "sha256:" + hashlib.sha256(data).hexdigest() == descriptor["digest"]
        assert len(data) == descriptor["size"]
        return data

    manifest = json.loads(blob(entry))
    config = json.loads(blob(manifest["config"]))
    [layer] = manifest["layers"]
    with tarfile.open(fileobj=io.BytesIO(blob(layer)), mode="r:gz") as tar:
        assert tar.extractfile("bin/busybox").read() == BUSYBOX.read_bytes()
        assert tar.getmember("bin/ping").linkname == "busybox"
    assert config["config"]["Entrypoint"][0] == "/bin/sleep"
    # cached: a second call builds nothing
    mtime = archive.stat().st_mtime_ns
    assert image_archives()[which] == archive and archive.stat().st_mtime_ns == mtime


def test_crictl_is_the_pinned_version_from_the_cache():
    path = crictl_path()
    assert str(path).startswith(os.environ.get("FLANNEL_CACHE", "/var/cache/flannel-charm"))
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True).stdout
    assert CRICTL_VERSION.lstrip("v") in out, out


def _bridge_machine(machine: Machine) -> None:
    for plugin in ("bridge", "host-local", "loopback"):
        machine.write_file(f"/opt/cni/bin/{plugin}", (DEBIAN_CNI / plugin).read_bytes(), 0o755)
    machine.write_file("/etc/cni/net.d/10-sbnet.conflist", json.dumps(BRIDGE_CONFLIST))


@pytest.mark.parametrize("containerd, says", [("1.6", "1.6."), ("2", CONTAINERD2_VERSION)])
def test_cri_pods_get_addresses_ping_and_release_them_and_destroy_leaves_nothing(
        have_runtime, test_network, containerd, says):
    """On Debian's containerd 1.6 and on containerd 2 (from the Go module
    proxy), both with Debian's runc 1.1.5 on this host's cgroups."""
    machine = Machine("m1", test_network).start()
    machine.containerd = containerd
    try:
        _bridge_machine(machine)
        runtime = runtime_for(machine)
        assert runtime.running and runtime.started_seconds is not None
        assert runtime.version().lstrip("v").startswith(says.lstrip("v")), runtime.version()
        # containerd's CNI dirs are the machine's, not the host's
        assert 'conf_dir = "/etc/cni/net.d"' in (runtime.base / "config.toml").read_text()
        p1 = CriPod.create(machine, "p1")
        p2 = CriPod.create(machine, "p2")
        for pod in (p1, p2):
            assert pod.address.startswith("10.77.0."), pod
            assert pod.interface == pod.address + "/24"
            assert machine.exists(f"/var/lib/cni/networks/sbnet/{pod.address}")
        assert p1.ping(p2.address) and p2.ping(p1.address)
        # the container really is busybox in the pod's namespaces
        assert p1.exec(["hostname"]).stdout.strip() == "p1"
        pods = runtime.crictl("pods", "-q").stdout.split()
        assert len(pods) == 2 and p1.pod_id in pods

        assert p1.delete() == ""
        assert not machine.exists(f"/var/lib/cni/networks/sbnet/{p1.address}")
        assert runtime.crictl("pods", "-q").stdout.split() == [p2.pod_id]

        pids = [runtime.process.pid, *runtime.shim_pids(), p2.pause_pid]
        assert all(process_alive(p) for p in pids)
        memory = runtime.memory_kib()
        assert memory["containerd"] > 0 and memory["shims"] > 0
    finally:
        machine.destroy()
    assert not any(process_alive(p) for p in pids), [p for p in pids if process_alive(p)]
    assert not Path(f"/sys/fs/cgroup/pids/{CGROUP_PARENT}/{machine.netns}").exists()
    assert not machine.state_dir.exists()
    assert cri_leftovers() == []


def test_a_reboot_kills_containerd_its_shims_and_containers(have_runtime, test_network):
    """Machine.reboot(): containerd and everything it ran die with the power
    (before sandbox.cri hooked on_reboot, the pod's pause and busybox
    processes outlived the reboot); the next pod starts a new containerd."""
    machine = Machine("m1", test_network).start()
    try:
        _bridge_machine(machine)
        runtime = runtime_for(machine)
        pod = CriPod.create(machine, "p1")
        pids = [runtime.process.pid, *runtime.shim_pids(), pod.pause_pid]
        assert all(process_alive(p) for p in pids)
        machine.reboot()
        assert not any(process_alive(p) for p in pids), [p for p in pids if process_alive(p)]
        assert not runtime.running
        assert not Path(f"/sys/fs/cgroup/pids/{CGROUP_PARENT}/{machine.netns}").exists()
        again = CriPod.create(machine, "p2")
        assert runtime_for(machine).running and again.address.startswith("10.77.0.")
    finally:
        machine.destroy()
    assert cri_leftovers() == []


def test_a_killed_runs_pod_cgroups_go_and_a_live_runs_stay(test_network):
    """A run killed before it destroyed its machines (CI's own run once
    failed on another's) leaves pod cgroups; they go, with what still runs in
    them, before the next containerd starts; a live run's stay."""
    hierarchy = Path("/sys/fs/cgroup/pids")
    hierarchy = hierarchy if hierarchy.is_dir() else Path("/sys/fs/cgroup")
    dead_tag = next(t for t in (f"{n:04x}" for n in range(0xfff0, 0x10000))
                    if not (hierarchy / CGROUP_PARENT / f"flsb-{t}-m9").exists())
    dead = hierarchy / CGROUP_PARENT / f"flsb-{dead_tag}-m9" / "kubepods"
    live = hierarchy / CGROUP_PARENT / f"{test_network.prefix}m9"
    dead.mkdir(parents=True)
    live.mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        (dead / "cgroup.procs").write_text(str(sleeper.pid))
        assert f"cgroup {dead.parent}" in cri_leftovers()
        removed = cleanup_stale_cgroups()
        assert f"cgroup /{CGROUP_PARENT}/{dead.parent.name}" in removed
        assert sleeper.wait(timeout=10) is not None
        assert not dead.parent.exists()
        assert live.is_dir()
    finally:
        sleeper.kill()
        live.rmdir()


def test_without_a_conflist_runp_fails_with_containerds_words(have_runtime, test_network):
    with Machine("m1", test_network) as machine:
        with pytest.raises(PodFailed) as failed:
            CriPod.create(machine, "p1")
        assert "failed to setup network for sandbox" in str(failed.value)
        assert str(failed.value).endswith("cni plugin not initialized"), str(failed.value)
