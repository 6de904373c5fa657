"""The charm `charmcraft pack` makes, as users get it from Charmhub.

Packed here by charmcraft itself (4.5.0 from PyPI, destructive mode, in a
mount namespace with an Ubuntu 26.04 identity: sandbox.charmcraft_pack; the
reactive plugin is experimental on 26.04 in charmcraft 4.5.0),
from charmcraft.yaml as it stands, and unpacked as Juju unpacks a `.charm` on
deploy. It must hold what scripts/build-charm's charm holds (the pure-Python
wheelhouse and the remove hook included, both scripts/finish-charm's), and
pass the README's main job: sandbox.demo, the user's scenario through
kubectl on Kubernetes itself (a control plane and two workers): busybox.yaml
Running, a pod made while the relation is away waiting in ContainerCreating
(kubectl describe says why) and run, the same pod, by kubelet's retries after
add-relation, a new pod Running, the pods from before still reaching each
other, the workers' CNI plugins untouched; every check the demo prints is
asserted."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from sandbox import charmcraft_pack, demo
from sandbox.juju.charm_archive import unpack

pytestmark = [pytest.mark.functional, pytest.mark.xdist_group("the_charmcraft_packed_charm")]
# its demo runs Kubernetes itself (`-m "not kubernetes"` skips it)
kubernetes = pytest.mark.kubernetes

# charmcraft writes its own manifest.yaml (per platform) and primes no
# .build.manifest (charm-build's file signatures).
CHARMCRAFTS_OWN = {"manifest.yaml", ".build.manifest"}


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("charmcraft")
    archive = charmcraft_pack.pack(out, "ubuntu-26.04-amd64")
    # beside the unpacked charm, as scripts/build-charm leaves its own: what
    # the demo's Juju 4.0 deploys
    return unpack(archive.rename(out / "flannel.charm"), out / "flannel")


def files_of(charm: Path) -> dict[str, tuple[str, bool]]:
    """relative path -> (sha256, executable once deployed) of every file in a
    charm dir; Juju makes every file under hooks/ executable when it unpacks."""
    def executable(path: Path, rel: str) -> bool:
        return bool(path.stat().st_mode & 0o100) or rel.startswith("hooks/")
    files = {}
    for path in sorted(charm.rglob("*")):
        rel = str(path.relative_to(charm))
        if path.is_file() and rel not in CHARMCRAFTS_OWN:
            files[rel] = (hashlib.sha256(path.read_bytes()).hexdigest(), executable(path, rel))
    return files


def test_charmcraft_packs_what_build_charm_builds(packed, built_charm):
    got, want = files_of(packed), files_of(built_charm)
    assert sorted(set(got) ^ set(want)) == [], "files only in one of the two charms"
    assert [p for p in got if got[p] != want[p]] == [], "files that differ"
    assert all((packed / "hooks" / h).stat().st_mode & 0o100 for h in ("install", "remove")), \
        "hooks not executable"
    wheels = [p for p in got if p.startswith("wheelhouse/")]
    assert wheels and all(p.endswith("-none-any.whl") for p in wheels), wheels
    assert "analysis" in (packed / "manifest.yaml").read_text()


@kubernetes
def test_the_packed_charm_passes_the_demo(packed, resource):
    lines: list[str] = []

    def say(text: str) -> None:
        lines.append(text)
        print(f"[charmcraft demo] {text}", flush=True)

    # charmcraft packed it for 26.04
    platform = demo.Platform(base="ubuntu@26.04")
    assert demo.play(packed, resource, say=say, platform=platform), \
        "the demo failed:\n" + "\n".join(line for line in lines if "[FAILED]" in line)
