"""Tests of the sandbox's real parts: resource build, test network, machines,
pods.  Marked `sandbox` (they need root, namespaces, overlayfs and the Go
toolchain); select with `-m sandbox`, leave out with `-m "not sandbox"`."""

from __future__ import annotations

import os
import shutil

import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "sandbox: needs root, network/mount namespaces and real daemons "
        "(the sandbox's machines, etcd, flanneld)")
    config.addinivalue_line(
        "markers", "gobuild: builds Go binaries into the cache (slow when the cache is cold)")


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("ip", "nsenter", "unshare", "iptables"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    return None


@pytest.fixture(scope="session")
def sandbox_host():
    why = _missing()
    if why:
        pytest.skip(why)
    from sandbox.network import cleanup_stale
    cleanup_stale()
    yield
    cleanup_stale()


@pytest.fixture(scope="session")
def resource_tarball(sandbox_host, tmp_path_factory):
    if shutil.which("go") is None:
        pytest.skip("needs the Go toolchain")
    from sandbox.resource import build_resource
    return build_resource("amd64", tmp_path_factory.mktemp("resource"))


@pytest.fixture
def test_network(sandbox_host):
    from sandbox.network import TestNetwork
    with TestNetwork() as net:
        yield net
