"""Fixtures for the emulated Juju's tests (helpers in jujukit.py)."""

from __future__ import annotations

import pytest
from jujukit import World

from sandbox.juju import EtcdApp, KubernetesWorkerApp


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "sandbox: needs root, network/mount namespaces and real daemons")


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    yield w
    w.ctl.close()   # its agent socket


@pytest.fixture
def cluster(world):
    """etcd (emulated, no machine), kubernetes-worker (emulated) on one
    machine, the throwaway subordinate deployed as "flannel" and related to
    etcd; nothing related to the worker yet.  Settled."""
    m0 = world.add_machine()
    etcd = EtcdApp("https://10.99.0.2:2379", version="3.4.22", client_ca="CA PEM",
                   client_cert="CERT PEM", client_key="KEY PEM", address="10.99.0.2")
    worker = KubernetesWorkerApp(plugin_dir=str(world.tmp / "fake-cni"))
    (world.tmp / "fake-cni").mkdir()
    for p in worker.plugins:
        (world.tmp / "fake-cni" / p).write_text(f"#!/bin/sh\necho {p}\n")
    world.ctl.deploy(etcd)
    world.ctl.deploy(worker, to=[m0])
    charm = world.charm()
    world.ctl.deploy("flannel", charm)
    world.ctl.add_relation("flannel:etcd", "etcd:db")
    world.ctl.settle()
    world.etcd = etcd
    world.worker = worker
    world.m0 = m0
    return world
