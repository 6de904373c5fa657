"""The sandbox's stand-in for charm-flannel (sandbox.old_flannel): a charm the
sandbox's Juju can refresh to this one, with the old resource's members."""
import gzip
import io
import os
import subprocess
import tarfile

import pytest
import yaml

from sandbox.old_flannel import (OLD_BUILD_MARK, REVISIONS, old_charm_dir, old_resource,
                                 workers_flannel)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tarball(path, members):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    path.write_bytes(gzip.compress(buffer.getvalue()))
    return path


@pytest.mark.parametrize("revision", REVISIONS)
def test_the_stand_in_has_this_charms_endpoints_and_resources(tmp_path, revision):
    charm = old_charm_dir(tmp_path / revision, revision)
    old = yaml.safe_load((charm / "metadata.yaml").read_text())
    new = yaml.safe_load(open(os.path.join(ROOT, "metadata.yaml")).read())
    assert old["name"] == new["name"] and old["subordinate"] is True
    # cos-agent is this charm's own (the old one never had it): a refresh that
    # adds an endpoint is one Juju takes
    assert old["requires"] == new["requires"]
    assert old["provides"] == {k: v for k, v in new["provides"].items() if k != "cos-agent"}
    assert set(old["resources"]) == set(new["resources"])
    assert os.access(charm / "dispatch", os.X_OK)
    compiled = subprocess.run(["python3", "-m", "py_compile", str(charm / "dispatch")],
                              capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr


def test_an_unknown_revision_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown charm-flannel revision"):
        old_charm_dir(tmp_path, "0000000")


def members_of(path):
    with tarfile.open(path, "r:gz") as archive:
        return {m.name: archive.extractfile(m).read() for m in archive}


def test_the_latest_revisions_resource_is_an_older_build_with_etcdctl(tmp_path):
    new = tarball(tmp_path / "flannel-amd64.tar.gz",
                  {"./flanneld": b"flanneld", "./cni-plugin/flannel": b"plugin"})
    members = members_of(old_resource(new, tmp_path / "old", "a69755c"))
    assert members["flanneld"] == b"flanneld" + OLD_BUILD_MARK
    assert members["cni-plugin/flannel"] == b"plugin" + OLD_BUILD_MARK
    assert "etcdctl" in members
    assert workers_flannel(new) not in (b"plugin", members["cni-plugin/flannel"])


def test_the_seeds_resource_is_flannel_v011_and_etcdctl_without_a_plugin(tmp_path):
    """charm-flannel f79f180's build-flannel-resources.sh packed flanneld
    v0.11.0 and etcdctl v2.3.7: the flannel plugin was the worker's."""
    new = tarball(tmp_path / "flannel-amd64.tar.gz",
                  {"./flanneld": b"flanneld", "./cni-plugin/flannel": b"plugin"})
    members = members_of(old_resource(new, tmp_path / "old", "f79f180",
                                      flanneld_v011=b"flanneld v0.11.0"))
    assert set(members) == {"flanneld", "etcdctl"}
    assert members["flanneld"] == b"flanneld v0.11.0"
