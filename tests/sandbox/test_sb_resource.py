"""The resource tarball (release/resource.py, scripts/build-resource) and the
sandbox's tools, built with `go install` into the cache (release/go_build.py)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import struct
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest

from release import go_build
from sandbox import resource

PT_LOAD, PT_INTERP = 1, 3
# e_machine of each supported arch
EM = {"amd64": 62, "arm64": 183, "s390x": 22}


def _elf_program_headers(data: bytes) -> tuple[int, list[int]]:
    """(e_machine, [p_type of each program header]) of an ELF image; written
    here independently of sandbox.resource.elf_interpreter."""
    assert data[:4] == b"\x7fELF", "not an ELF file"
    is64, order = data[4] == 2, "<" if data[5] == 1 else ">"
    (machine,) = struct.unpack_from(order + "H", data, 0x12)
    if is64:
        (phoff,) = struct.unpack_from(order + "Q", data, 0x20)
        phentsize, phnum = struct.unpack_from(order + "HH", data, 0x36)
    else:
        (phoff,) = struct.unpack_from(order + "I", data, 0x1C)
        phentsize, phnum = struct.unpack_from(order + "HH", data, 0x2A)
    types = [struct.unpack_from(order + "I", data, phoff + i * phentsize)[0]
             for i in range(phnum)]
    return machine, types


def test_host_arch_and_pins():
    assert resource.host_arch() in resource.ARCHES
    # flanneld v0.28.9 is the first with /readyz and without the compaction loop
    version = tuple(int(n) for n in resource.FLANNEL_VERSION.lstrip("v").split("."))
    assert version >= (0, 28, 9)
    assert resource.BINARIES["flanneld"].cgo("amd64")
    assert not resource.BINARIES["flanneld"].cgo("arm64")
    assert not resource.BINARIES["flannel"].cgo("amd64")
    with pytest.raises(ValueError):
        resource.binary_path("flanneld", "mips")


def test_link_settings_and_stamp():
    flanneld = resource.BINARIES["flanneld"]
    # amd64 flanneld is cgo: linked externally and statically, no glibc NSS
    assert "-extldflags=-static" in flanneld.link_ldflags("amd64").split()
    assert "-linkmode=external" in flanneld.link_ldflags("amd64").split()
    assert set(flanneld.tags("amd64")) == {"netgo", "osusergo"}
    assert f"version.Version={resource.FLANNEL_VERSION}" in flanneld.link_ldflags("amd64")
    # pure-Go builds (cross-arch flanneld, the plugin, cnitool) are static anyway
    for name, arch in (("flanneld", "arm64"), ("flanneld", "s390x"), ("flannel", "amd64"),
                       ("cnitool", "amd64")):
        binary = resource.BINARIES[name]
        assert not binary.cgo(arch) and binary.tags(arch) == ()
        assert "-extldflags" not in binary.link_ldflags(arch)
    # the stamp carries the link mode and the exact flags, so a change rebuilds
    stamp = json.loads(go_build._stamp(flanneld, "amd64"))
    assert stamp["link"] == "static"
    assert stamp["ldflags"] == flanneld.link_ldflags("amd64")
    assert stamp["tags"] == ["netgo", "osusergo"]
    old_dynamic = {"arch": "amd64", "cgo": True, "ldflags": flanneld.ldflags,
                   "package": flanneld.package, "version": flanneld.version}
    assert go_build._stamp(flanneld, "amd64") != json.dumps(old_dynamic, sort_keys=True)


def test_elf_parsers_see_a_dynamic_binary(tmp_path):
    # /bin/sh is dynamically linked on Debian and Ubuntu: both parsers must say so
    sh = Path(os.path.realpath("/bin/sh"))
    machine, types = _elf_program_headers(sh.read_bytes())
    assert PT_LOAD in types and PT_INTERP in types
    assert machine == EM[resource.host_arch()]
    assert resource.elf_interpreter(sh).startswith("/lib")
    not_elf = tmp_path / "script"
    not_elf.write_text("#!/bin/sh\n")
    with pytest.raises(ValueError):
        resource.elf_interpreter(not_elf)


@pytest.mark.gobuild
def test_tarball_members_modes_and_version(resource_tarball, tmp_path):
    assert resource_tarball.name == "flannel-amd64.tar.gz"
    with tarfile.open(resource_tarball, "r:gz") as tar:
        files = {m.name: m for m in tar.getmembers() if m.isfile()}
        assert sorted(files) == ["cni-plugin/flannel", "flanneld"]
        assert all(m.mode == 0o755 for m in files.values())
        tar.extractall(tmp_path, filter="data")
    out = subprocess.run([tmp_path / "flanneld", "-version"], capture_output=True, text=True)
    assert (out.stdout + out.stderr).strip() == resource.FLANNEL_VERSION
    # the CNI plugin speaks CNI: with no command it reports its versions
    out = subprocess.run([tmp_path / "cni-plugin" / "flannel"], capture_output=True, text=True,
                         env={"CNI_COMMAND": "VERSION"})
    assert "0.3.1" in out.stdout


def test_the_wrapper_module_pins_the_released_flannel():
    """release/flanneld's go.mod builds the version the resource names, with
    only the refused Tencent SDK package replaced, and its stub compiles the
    way flannel's tencent-vpc backend calls it."""
    wrapper = resource.FLANNEL_WRAPPER
    go_mod = (wrapper / "go.mod").read_text()
    assert f"github.com/flannel-io/flannel {resource.FLANNEL_VERSION}" in go_mod
    assert "tool github.com/flannel-io/flannel" in go_mod
    replaces = [line for line in go_mod.splitlines() if line.startswith("replace")]
    assert replaces == ["replace github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc"
                        " => ./tencentvpc-stub"]
    assert resource.BINARIES["flanneld"].module_dir == str(wrapper)
    # the previous resource's flanneld still builds with a plain go install
    assert resource.BINARIES["flanneld-previous"].version == resource.FLANNEL_PREVIOUS_VERSION
    assert not resource.BINARIES["flanneld-previous"].module_dir


@pytest.mark.gobuild
def test_the_previous_resource_holds_the_previous_flanneld(sandbox_host, tmp_path):
    tarball = resource.previous_resource(tmp_path / "out")
    with tarfile.open(tarball, "r:gz") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    out = subprocess.run([tmp_path / "x" / "flanneld", "-version"], capture_output=True,
                         text=True, timeout=60)
    assert (out.stdout + out.stderr).strip() == resource.FLANNEL_PREVIOUS_VERSION


@pytest.mark.gobuild
def test_host_arch_tarball_is_static_and_versioned(sandbox_host, tmp_path):
    """Every binary in the host arch's tarball is statically linked (no
    PT_INTERP), so it runs on any Ubuntu's glibc, and flanneld has its pin."""
    if shutil.which("go") is None:
        pytest.skip("needs the Go toolchain")
    arch = resource.host_arch()
    tarball = resource.build_resource(arch, tmp_path / "out")
    assert tarball.name == f"flannel-{arch}.tar.gz"
    with tarfile.open(tarball, "r:gz") as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        assert sorted(m.name for m in members) == sorted(resource.TARBALL_MEMBERS)
        for member in members:
            machine, types = _elf_program_headers(tar.extractfile(member).read())
            assert machine == EM[arch], member.name
            assert PT_LOAD in types, member.name
            assert PT_INTERP not in types, f"{member.name} is dynamically linked"
        tar.extractall(tmp_path / "x", filter="data")
    # no environment at all: nothing from the host's loader setup can help it
    out = subprocess.run([tmp_path / "x" / "flanneld", "-version"], capture_output=True,
                         text=True, env={}, timeout=60)
    assert (out.stdout + out.stderr).strip() == resource.FLANNEL_VERSION


@pytest.mark.gobuild
def test_second_build_is_cached_and_identical(resource_tarball, tmp_path):
    said = []
    again = resource.build_resource("amd64", tmp_path, progress=said.append)
    assert [line for line in said if line.startswith("cached ")] and \
        not [line for line in said if line.startswith("building ")], said  # no go install
    assert again.read_bytes() == resource_tarball.read_bytes()


@pytest.mark.gobuild
def test_cnitool(sandbox_host):
    path = resource.cnitool_path()
    assert path.is_file()
    out = subprocess.run([path], capture_output=True, text=True)
    assert "cnitool" in out.stdout + out.stderr


@pytest.mark.gobuild
def test_the_bug_reports_flanneld_is_v0_11_0_built_from_the_proxy(sandbox_host):
    """flannel v0.11.0 predates Go modules: built in GOPATH mode from the
    proxy's zips (sandbox.flanneld_v011), static, and the version the old
    charm reported."""
    path = resource.binary_path("flanneld-v0.11.0", resource.host_arch())
    assert resource.elf_interpreter(path) is None
    out = subprocess.run([path, "-version"], capture_output=True, text=True, env={}, timeout=60)
    assert (out.stdout + out.stderr).strip() == "v0.11.0"
    # the kube subnet manager is compiled out, not its flags: main.go is v0.11.0's
    usage = subprocess.run([path, "-help"], capture_output=True, text=True, timeout=60)
    assert "-kube-subnet-mgr" in usage.stderr and "-ip-masq" in usage.stderr


@pytest.mark.gobuild
def test_the_e2e_suite_is_the_sandboxs_release_with_its_network_conformance_specs(
        sandbox_host, tmp_path):
    """Kubernetes' e2e tests (sandbox/e2e-module) are those of the release
    the sandbox runs, and select the 47 [sig-network] [Conformance] specs of
    v1.37.2 (43 in test/e2e/network, the 4 granular checks of
    test/e2e/common/network), static like every binary here."""
    from sandbox.conformance import CONFORMANCE_FOCUS
    path = resource.binary_path("e2e-network.test", resource.host_arch())
    assert resource.elf_interpreter(path) is None
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == resource.KUBERNETES_VERSION
    listing = subprocess.run([path, "--ginkgo.dry-run", "--ginkgo.v", "--ginkgo.no-color",
                              f"--ginkgo.focus={CONFORMANCE_FOCUS}"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    specs = [line for line in listing.stdout.splitlines() if line.startswith("[sig-network]")]
    assert len(specs) == 47 and "Will run 47 of" in listing.stdout, listing.stdout[-2000:]
    assert sum("Networking Granular Checks: Pods" in s for s in specs) == 4


def test_a_long_build_says_it_is_still_going_and_stops_saying_so_when_done(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("FLANNEL_CACHE", str(tmp_path))
    (tmp_path / "go" / "build").mkdir(parents=True)
    (tmp_path / "go" / "build" / "object").write_bytes(b"x" * (3 << 20))
    said = []
    with go_build.heartbeat(said.append, "building kube-apiserver", every=0.05):
        deadline = time.monotonic() + 10
        while len(said) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    count = len(said)
    time.sleep(0.2)
    assert count >= 2 and len(said) == count, said   # nothing once the block is done
    assert said[0].startswith("   ... building kube-apiserver: 0m00s so far;"), said
    assert "build cache 3 MiB" in said[0], said
    quiet = []
    with go_build.heartbeat(None, "building nothing", every=0.01):
        time.sleep(0.05)
    assert quiet == []


@pytest.mark.gobuild
def test_a_build_waiting_for_another_says_what_it_waits_for(sandbox_host, tmp_path,
                                                            monkeypatch):
    """scripts/setup-host's background build holds a binary's lock while the
    demo wants the binary: the demo says it waits, and for what, then finds
    it cached."""
    cnitool = resource.BINARIES["cnitool"]
    arch = resource.host_arch()
    real = go_build._install_dir(cnitool, arch)
    resource.cnitool_path()
    monkeypatch.setenv("FLANNEL_CACHE", str(tmp_path))
    copy = go_build._install_dir(cnitool, arch)
    shutil.copytree(real, copy)
    stamp = (copy / "stamp.json").read_text()
    (copy / "stamp.json").unlink()          # not cached: "another build" is under way
    said = []
    with open(copy.parent / f".{copy.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        waiting = threading.Thread(target=lambda: said.append(
            go_build.build(cnitool, arch, said.append)))
        waiting.start()
        deadline = time.monotonic() + 10
        while not said and time.monotonic() < deadline:
            time.sleep(0.01)
        (copy / "stamp.json").write_text(stamp)   # the other build is done
    waiting.join(30)
    assert said[0].startswith(f"waiting  cnitool {cnitool.version} ({arch}): another process "
                              "is building it"), said
    assert said[1].startswith("cached   cnitool"), said
    assert said[-1] == go_build._built_path(cnitool, arch), said
