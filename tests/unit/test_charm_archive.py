"""A packed charm unpacks as Juju unpacks it: modes kept, nothing outside."""
from __future__ import annotations

import zipfile

import pytest

from sandbox.juju.charm_archive import BadCharmArchive, unpack


def archive(path, members):
    with zipfile.ZipFile(path, "w") as z:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100000 | mode) << 16
            z.writestr(info, data)
    return path


def test_hooks_stay_executable_and_files_keep_their_bytes(tmp_path):
    charm = unpack(archive(tmp_path / "x.charm", [
        ("metadata.yaml", b"name: flannel\n", 0o644),
        ("hooks/install", b"#!/bin/sh\n", 0o755)]), tmp_path / "flannel")
    assert (charm / "hooks/install").stat().st_mode & 0o777 == 0o755
    assert (charm / "metadata.yaml").read_bytes() == b"name: flannel\n"


def test_a_member_outside_the_charm_dir_is_refused(tmp_path):
    bad = archive(tmp_path / "x.charm", [("metadata.yaml", b"", 0o644),
                                         ("../escaped", b"", 0o644)])
    with pytest.raises(BadCharmArchive, match="outside the charm"):
        unpack(bad, tmp_path / "flannel")
    assert not (tmp_path / "escaped").exists()


def test_an_archive_without_metadata_is_not_a_charm(tmp_path):
    with pytest.raises(BadCharmArchive, match="not a charm"):
        unpack(archive(tmp_path / "x.zip", [("README", b"", 0o644)]), tmp_path / "flannel")


def test_a_symlink_out_of_the_charm_is_refused(tmp_path):
    path = tmp_path / "x.charm"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.yaml", "")
        info = zipfile.ZipInfo("lib/passwd")
        info.external_attr = (0o120777) << 16
        z.writestr(info, "../../../etc/passwd")
    with pytest.raises(BadCharmArchive, match="links out of the charm"):
        unpack(path, tmp_path / "flannel")


def test_a_hook_packed_without_modes_is_made_executable(tmp_path):
    charm = unpack(archive(tmp_path / "x.charm", [("metadata.yaml", b"", 0o644),
                                                  ("hooks/stop", b"#!/bin/sh\n", 0)]),
                   tmp_path / "flannel")
    assert (charm / "hooks/stop").stat().st_mode & 0o100
