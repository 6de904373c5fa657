"""The flannel-<arch> resource: every way it can be unusable has its own
blocked status, naming the resource and the problem."""
import gzip
import io
import os
import subprocess
import tarfile

import pytest

from charms.flannel.adapters.install_record import InstallRecord
from charms.flannel.adapters.resource import (ResourceProblem, install_members,
                                              read_resource, resource_name)

NAME = "flannel-amd64"
FLANNELD = b"\x7fELF flanneld " + os.urandom(64 * 1024)
PLUGIN = b"\x7fELF flannel plugin " + os.urandom(32 * 1024)


def tarball(path, members, compress=True):
    """Build a real tarball: members is [(name, bytes | "dir" | ("symlink", target))]."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if compress else "w") as archive:
        for name, content in members:
            info = tarfile.TarInfo(name)
            if content == "dir":
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            elif isinstance(content, tuple):
                info.type, info.linkname = tarfile.SYMTYPE, content[1]
                archive.addfile(info)
            else:
                info.size, info.mode = len(content), 0o755
                archive.addfile(info, io.BytesIO(content))
    path.write_bytes(buffer.getvalue())
    return path


def problem(path) -> str:
    with pytest.raises(ResourceProblem) as caught:
        read_resource(path, NAME)
    assert str(caught.value) == caught.value.message
    return caught.value.message


GOOD = [("flanneld", FLANNELD), ("etcdctl", b"etcdctl"), ("cni-plugin", "dir"),
        ("cni-plugin/flannel", PLUGIN)]


def test_a_good_resource_gives_both_binaries(tmp_path):
    members = read_resource(tarball(tmp_path / "r.tar.gz", GOOD), NAME)
    assert members == {"flanneld": FLANNELD, "cni-plugin/flannel": PLUGIN}


def test_members_with_a_leading_dot_slash_are_accepted(tmp_path):
    path = tarball(tmp_path / "r.tar.gz", [("./flanneld", FLANNELD), ("./cni-plugin", "dir"),
                                           ("./cni-plugin/flannel", PLUGIN)])
    assert read_resource(str(path), NAME) == {"flanneld": FLANNELD, "cni-plugin/flannel": PLUGIN}


@pytest.mark.parametrize("path", [None, "", False])
def test_no_resource_attached(path):
    assert problem(path) == "Missing resource flannel-amd64: attach it with juju attach-resource"


def test_a_path_that_does_not_exist_is_missing(tmp_path):
    assert problem(tmp_path / "absent.tar.gz") == (
        "Missing resource flannel-amd64: attach it with juju attach-resource")


def test_a_zero_size_resource(tmp_path):
    (tmp_path / "r.tar.gz").write_bytes(b"")
    assert problem(tmp_path / "r.tar.gz") == (
        "Resource flannel-amd64 is empty (0 bytes): attach the flannel tarball "
        "with juju attach-resource")


@pytest.mark.parametrize("content", [
    b"#!/bin/sh\necho not a tarball\n",
    # mtime=0: the same bytes (and test id) in every collection, as
    # pytest-xdist requires of its workers
    gzip.compress(b"gzip, but of plain text " * 100, mtime=0),
], ids=["a shell script", "gzip of plain text"])
def test_something_else_than_a_gzip_tar(tmp_path, content):
    (tmp_path / "r.tar.gz").write_bytes(content)
    assert problem(tmp_path / "r.tar.gz") == (
        "Resource flannel-amd64 is not a gzip-compressed tar archive")


def test_an_uncompressed_tar_is_not_accepted(tmp_path):
    path = tarball(tmp_path / "r.tar", GOOD, compress=False)
    assert problem(path) == "Resource flannel-amd64 is not a gzip-compressed tar archive"


@pytest.mark.parametrize("keep", [0.05, 0.5, 0.9, -20, -4, -1])
def test_a_truncated_resource(tmp_path, keep):
    data = tarball(tmp_path / "whole.tar.gz", GOOD).read_bytes()
    cut = int(len(data) * keep) if keep > 0 else len(data) + keep
    (tmp_path / "r.tar.gz").write_bytes(data[:cut])
    assert problem(tmp_path / "r.tar.gz") == "Resource flannel-amd64 is truncated: attach it again"


def test_damaged_bytes_are_reported_as_corrupt(tmp_path):
    data = bytearray(tarball(tmp_path / "whole.tar.gz", GOOD).read_bytes())
    data[-6] ^= 0xFF  # inside the gzip trailer's CRC
    (tmp_path / "r.tar.gz").write_bytes(bytes(data))
    message = problem(tmp_path / "r.tar.gz")
    assert message.startswith("Resource flannel-amd64 is corrupt (")
    assert message.endswith("): attach it again")


@pytest.mark.parametrize("members, missing", [
    ([("flanneld", FLANNELD)], "cni-plugin/flannel"),
    ([("cni-plugin/flannel", PLUGIN), ("etcdctl", b"x")], "flanneld"),
    ([("flannel", PLUGIN), ("README", b"x")], "flanneld and cni-plugin/flannel"),
    ([("bin/flanneld", FLANNELD), ("cni-plugin/flannel", PLUGIN)], "flanneld"),
])
def test_a_missing_member_is_named(tmp_path, members, missing):
    path = tarball(tmp_path / "r.tar.gz", members)
    assert problem(path) == f"Resource flannel-amd64 lacks {missing}"


@pytest.mark.parametrize("member, kind", [("dir", "a directory"),
                                          (("symlink", "/usr/bin/true"), "a symbolic link")])
def test_a_member_that_is_not_a_regular_file(tmp_path, member, kind):
    path = tarball(tmp_path / "r.tar.gz", [("flanneld", member), ("cni-plugin/flannel", PLUGIN)])
    assert problem(path) == f"Resource flannel-amd64: flanneld is {kind}, not a regular file"


def test_an_empty_member(tmp_path):
    path = tarball(tmp_path / "r.tar.gz", [("flanneld", FLANNELD), ("cni-plugin/flannel", b"")])
    assert problem(path) == "Resource flannel-amd64: cni-plugin/flannel is empty (0 bytes)"


def test_a_directory_instead_of_a_file(tmp_path):
    assert problem(tmp_path) == (
        "Resource flannel-amd64 is not a file: attach a .tar.gz with flannel")


@pytest.mark.parametrize("machine, name", [("x86_64", "flannel-amd64"),
                                           ("aarch64", "flannel-arm64"),
                                           ("s390x", "flannel-s390x")])
def test_resource_name_per_architecture(machine, name):
    assert resource_name(machine) == name


def test_resource_name_defaults_to_this_machine():
    assert resource_name() == resource_name(os.uname().machine)


@pytest.mark.parametrize("machine", ["ppc64le", "riscv64", ""])
def test_other_architectures_have_no_resource(machine):
    with pytest.raises(ResourceProblem) as caught:
        resource_name(machine)
    assert caught.value.message == (
        f"Unsupported architecture {machine or 'unknown'}: "
        "flannel resources exist for amd64, arm64, s390x")


# -- installing the members -------------------------------------------------------

def test_the_members_are_installed_executable_through_the_record(tmp_path):
    record = InstallRecord(tmp_path / "record")
    targets = ((tmp_path / "bin" / "flanneld", "flanneld"),
               (tmp_path / "cni" / "flannel", "cni-plugin/flannel"))
    assert install_members(record, {"flanneld": FLANNELD, "cni-plugin/flannel": PLUGIN},
                           targets) is None
    for path, member in targets:
        assert record.holds(path) and path.stat().st_mode & 0o777 == 0o755


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root)")
def test_a_full_disk_is_a_blocked_message_naming_the_file(tmp_path):
    """The operator sees which file did not fit and how big it is, and the
    hook does not fail (any later hook installs once there is room)."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)], check=True)
    try:
        record = InstallRecord(tmp_path / "record")
        targets = ((small / "flanneld", "flanneld"), (small / "flannel", "cni-plugin/flannel"))
        full = install_members(record, {"flanneld": b"x" * 1_000_000, "cni-plugin/flannel": PLUGIN},
                               targets)
        assert full == f"Cannot install {small}/flanneld (1.0 MB): No space left on device"
        assert not (small / "flannel").exists()
    finally:
        subprocess.run(["umount", str(small)], check=True)
