"""The resource tarball and cnitool, built with `go install` into the cache."""

from __future__ import annotations

import subprocess
import tarfile
import time

import pytest

from sandbox import resource


def test_host_arch_and_pins():
    assert resource.host_arch() in resource.ARCHES
    assert resource.FLANNEL_VERSION == "v0.27.4"
    assert resource.BINARIES["flanneld"].cgo("amd64")
    assert not resource.BINARIES["flanneld"].cgo("arm64")
    assert not resource.BINARIES["flannel"].cgo("amd64")
    with pytest.raises(ValueError):
        resource.binary_path("flanneld", "mips")


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


@pytest.mark.gobuild
def test_second_build_is_cached_and_identical(resource_tarball, tmp_path):
    start = time.monotonic()
    again = resource.build_resource("amd64", tmp_path)
    assert time.monotonic() - start < 5
    assert again.read_bytes() == resource_tarball.read_bytes()


@pytest.mark.gobuild
def test_cnitool(sandbox_host):
    path = resource.cnitool_path()
    assert path.is_file()
    out = subprocess.run([path], capture_output=True, text=True)
    assert "cnitool" in out.stdout + out.stderr
