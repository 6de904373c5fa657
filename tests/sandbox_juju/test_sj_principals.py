"""The ops principals (sandbox.juju.principals), hook by hook: what the ops
kubernetes-worker and kubernetes-control-plane write on their machine and
publish on `cni`, and when. Local machines (LocalExecutor), a small
cni-plugins set, an emulated CNI subordinate that publishes what a test tells
it to; the reactive worker of the bug report is the contrast."""

from __future__ import annotations

import hashlib
import os

import pytest

from sandbox.juju import (EmulatedApp, EtcdApp, KubernetesWorkerApp,
                          OpsKubernetesControlPlaneApp, OpsKubernetesWorkerApp)
from sandbox.juju.principals import CLUSTER_ARGS, KUBECONFIG

JUJU_KEYS = ("egress-subnets", "ingress-address", "private-address")
PLUGINS = ("bandwidth", "bridge", "host-local", "loopback", "portmap", "tuning", "vrf")


class FakeCni(EmulatedApp):
    """A CNI subordinate: publishes `data` on its cni unit databag."""

    subordinate = True
    endpoints = {"cni": {"interface": "kubernetes-cni", "role": "requires",
                         "scope": "container"}}

    def __init__(self, name="flannel", **data):
        super().__init__(name)
        self.data = data

    def on_cni_relation_joined(self, ctx):
        ctx.relation_set(**self.data)

    def on_config_changed(self, ctx):
        for rid in ctx.relation_ids("cni"):
            ctx.relation_set(rid=rid, **self.data)

    def publish(self, **data):
        self.data.update(data)
        self.fire("config-changed")


@pytest.fixture
def plugin_dir(tmp_path):
    d = tmp_path / "cni-plugins"
    d.mkdir()
    for name in PLUGINS:
        (d / name).write_text(f"#!/bin/sh\necho {name} v1.2.0\n")
        (d / name).chmod(0o755)
    (d / "README").write_text("not a plugin\n")   # not executable: not shipped
    return d


def host(world, mid, path):
    return world.tmp / f"machine{mid}" / path.lstrip("/")


def cni_bin(world, mid):
    d = host(world, mid, "/opt/cni/bin")
    return {p.name: p.read_bytes() for p in d.iterdir()} if d.is_dir() else {}


def hooks_that_extracted(app, unit):
    return [hook for u, hook in app.extractions if u == unit]


def published(world, principal_unit, sub="flannel"):
    """What the principal unit wrote on the cni relation (Juju's own address
    keys left out)."""
    rid = world.ctl.relation_id(f"{sub}:cni", principal_unit.split("/")[0] + ":cni")
    return {k: v for k, v in world.ctl.relation_data(rid, principal_unit).items()
            if k not in JUJU_KEYS}


def status(world, unit):
    w = world.ctl.unit(unit)["workload"]
    return w["status"], w["message"]


@pytest.fixture
def worker(world, plugin_dir):
    """The ops worker on machine 0, settled, nothing related."""
    mid = world.add_machine()
    app = OpsKubernetesWorkerApp(plugin_dir=str(plugin_dir))
    world.ctl.deploy(app, to=[mid])
    world.ctl.settle()
    world.mid = mid
    return app


# --- kubernetes-worker (ops) ------------------------------------------------------

def test_worker_ships_every_plugin_of_its_set_and_no_flannel(worker, plugin_dir):
    assert worker.plugins == PLUGINS
    assert "flannel" not in worker.plugins


def test_worker_extracts_on_every_setup_hook_and_blocks_without_cni(world, worker, plugin_dir):
    unit = "kubernetes-worker/0"
    setup = ["install", "leader-elected", "config-changed", "start"]
    assert hooks_that_extracted(worker, unit) == setup
    files = cni_bin(world, world.mid)
    assert files == {p: (plugin_dir / p).read_bytes() for p in PLUGINS}
    for p in PLUGINS:
        assert os.access(host(world, world.mid, f"/opt/cni/bin/{p}"), os.X_OK), p
    assert status(world, unit) == ("blocked", "Missing CNI Integration")
    # the kubeconfig is there before the CNI step (kube-control is ready)
    assert host(world, world.mid, KUBECONFIG).read_text().startswith("apiVersion: v1")


def test_worker_update_status_re_extracts_only_while_not_reconciled(world, worker):
    unit = "kubernetes-worker/0"
    bridge = host(world, world.mid, "/opt/cni/bin/bridge")
    bridge.unlink()
    world.ctl.update_status("kubernetes-worker")
    world.ctl.settle()
    assert bridge.exists(), "blocked (reconcile unfinished): update-status reconciles"

    world.ctl.deploy(FakeCni())
    world.ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    world.ctl.settle()
    assert status(world, unit) == ("active", "Ready")
    bridge.unlink()
    world.ctl.update_status("kubernetes-worker")
    world.ctl.settle()
    assert not bridge.exists(), "reconciled: update-status does not reconcile"
    world.ctl.fire(unit, "config-changed")
    world.ctl.settle()
    assert bridge.exists(), "config-changed reconciles, extraction first"


def test_worker_with_cni_is_ready_before_cidr_and_publishes_hash_and_registry(world, worker):
    unit = "kubernetes-worker/0"
    cni = FakeCni()   # publishes nothing yet
    world.ctl.deploy(cni)
    world.ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    world.ctl.settle()
    assert status(world, unit) == ("active", "Ready")   # does not wait for cidr
    kubeconfig = host(world, world.mid, KUBECONFIG).read_bytes()
    assert published(world, unit) == {
        "image-registry": "rocks.canonical.com:443/cdk",
        "kubeconfig-hash": hashlib.sha256(kubeconfig).hexdigest()}
    # every hook of the relation reconciled, so extracted
    hooks = hooks_that_extracted(worker, unit)
    assert {"cni-relation-created", "cni-relation-joined", "cni-relation-changed"} <= set(hooks)
    cni.publish(cidr="10.1.0.0/16", **{"cni-conf-file": "10-flannel.conflist"})
    world.ctl.settle()
    assert status(world, unit) == ("active", "Ready")
    # the worker makes no default conflist of its own (kube-control's default-cni is "")
    assert not list(host(world, world.mid, "/etc/cni/net.d").glob("01-default.*"))


def test_worker_publishes_nothing_until_ready(world, plugin_dir):
    mid = world.add_machine()
    worker = OpsKubernetesWorkerApp(plugin_dir=str(plugin_dir))
    worker.kube_control_ready = False
    world.ctl.deploy(worker, to=[mid])
    world.ctl.deploy(FakeCni(cidr="10.1.0.0/16", **{"cni-conf-file": "10-flannel.conflist"}))
    world.ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    world.ctl.settle()
    unit = "kubernetes-worker/0"
    assert status(world, unit) == ("waiting", "Waiting for kube-control relation")
    assert published(world, unit) == {}
    assert set(cni_bin(world, mid)) == set(PLUGINS), "extraction comes before readiness"
    assert not host(world, mid, KUBECONFIG).exists()

    worker.ca_ready = False
    worker.kube_control_ready = True
    world.ctl.fire(unit, "config-changed")
    world.ctl.settle()
    assert status(world, unit) == ("waiting", "Waiting for certificate authority")
    assert published(world, unit) == {}

    worker.ca_ready = True
    world.ctl.fire(unit, "config-changed")
    world.ctl.settle()
    assert status(world, unit) == ("active", "Ready")
    assert set(published(world, unit)) == {"image-registry", "kubeconfig-hash"}


def test_worker_blocks_in_its_own_cni_relation_broken_hook(world, worker):
    unit = "kubernetes-worker/0"
    world.ctl.deploy(FakeCni())
    world.ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    world.ctl.settle()
    assert status(world, unit) == ("active", "Ready")
    before = len(worker.extractions)
    world.ctl.remove_relation("flannel:cni", "kubernetes-worker:cni")
    world.ctl.settle()
    assert status(world, unit) == ("blocked", "Missing CNI Integration")
    hooks = [h for u, h in worker.extractions[before:] if u == unit]
    assert "cni-relation-broken" in hooks and "cni-relation-departed" in hooks


def test_worker_extraction_leaves_other_files_in_opt_cni_bin_alone(world, worker):
    """A file the worker's tarball does not hold (flannel's plugin) is never
    touched by its extraction; the worker's own files are rewritten."""
    flannel = host(world, world.mid, "/opt/cni/bin/flannel")
    flannel.write_bytes(b"#!/bin/sh\necho flannel plugin\n")
    flannel.chmod(0o755)
    stat = flannel.stat()
    bridge = host(world, world.mid, "/opt/cni/bin/bridge")
    bridge.write_bytes(b"changed by hand\n")
    world.ctl.fire("kubernetes-worker/0", "config-changed")
    world.ctl.settle()
    assert flannel.read_bytes() == b"#!/bin/sh\necho flannel plugin\n"
    assert (flannel.stat().st_ino, flannel.stat().st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    assert bridge.read_bytes() == b"#!/bin/sh\necho bridge v1.2.0\n"


def test_reactive_worker_copies_its_plugins_once(world, plugin_dir):
    """The contrast: the worker of LP #1866869 copies at install only."""
    mid = world.add_machine()
    reactive = KubernetesWorkerApp(plugin_dir=str(plugin_dir), plugins=("bridge", "loopback"))
    world.ctl.deploy(reactive, to=[mid])
    world.ctl.settle()
    bridge = host(world, mid, "/opt/cni/bin/bridge")
    assert bridge.exists()
    bridge.unlink()
    world.ctl.fire("kubernetes-worker/0", "config-changed")
    world.ctl.deploy(FakeCni())
    world.ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    world.ctl.settle()
    assert not bridge.exists()


# --- kubernetes-control-plane (ops) ------------------------------------------------

@pytest.fixture
def control_plane(world, plugin_dir):
    mid = world.add_machine()
    app = OpsKubernetesControlPlaneApp(plugin_dir=str(plugin_dir))
    world.ctl.deploy(app, to=[mid])
    world.ctl.deploy(EtcdApp("https://10.99.0.2:2379", version="3.4.22", client_ca="CA",
                             client_cert="CERT", client_key="KEY", address="10.99.0.2"))
    world.ctl.settle()
    world.mid = mid
    return app


def net_d(world, mid):
    d = host(world, mid, "/etc/cni/net.d")
    return {p.name: os.readlink(p) if p.is_symlink() else p.read_text()
            for p in d.iterdir()} if d.is_dir() else {}


def test_control_plane_waits_for_etcd_then_for_the_cni(world, control_plane):
    unit = "kubernetes-control-plane/0"
    assert status(world, unit) == ("waiting", "Waiting for etcd")
    assert set(cni_bin(world, world.mid)) == set(PLUGINS)
    world.ctl.add_relation("kubernetes-control-plane:etcd", "etcd:db")
    world.ctl.settle()
    assert status(world, unit) == ("blocked", "Missing CNI relation or config")
    assert net_d(world, world.mid) == {}


def test_control_plane_publishes_when_ready_and_links_the_conf_file_when_it_comes(
        world, control_plane):
    unit = "kubernetes-control-plane/0"
    world.ctl.add_relation("kubernetes-control-plane:etcd", "etcd:db")
    cni = FakeCni(cidr="10.1.0.0/16")   # no cni-conf-file yet
    world.ctl.deploy(cni)
    world.ctl.add_relation("flannel:cni", "kubernetes-control-plane:cni")
    world.ctl.settle()
    assert status(world, unit) == ("blocked", "Missing CNI relation or config")
    kubeconfig = host(world, world.mid, KUBECONFIG).read_bytes()
    assert published(world, unit) == {
        "image-registry": "rocks.canonical.com:443/cdk",
        "kubeconfig-hash": hashlib.sha256(kubeconfig).hexdigest(),
        "service-cidr": "10.152.183.0/24"}
    assert net_d(world, world.mid) == {}
    assert "--cluster-cidr=10.1.0.0/16" in host(world, world.mid, CLUSTER_ARGS).read_text()

    cni.publish(**{"cni-conf-file": "10-flannel.conflist"})
    world.ctl.settle()
    assert status(world, unit) == ("active", "Ready")
    assert net_d(world, world.mid) == {"01-default.conflist": "10-flannel.conflist"}

    cni.publish(cidr="10.5.0.0/16")
    world.ctl.settle()
    assert "--cluster-cidr=10.5.0.0/16" in host(world, world.mid, CLUSTER_ARGS).read_text()

    world.ctl.remove_relation("flannel:cni", "kubernetes-control-plane:cni")
    world.ctl.settle()
    assert status(world, unit) == ("blocked", "Missing CNI relation or config")
    # MissingCNIError stops the reconcile before the link is touched (2d58730):
    # the link to the CNI that went stays ...
    assert net_d(world, world.mid) == {"01-default.conflist": "10-flannel.conflist"}
    # ... until the operator says to go on without a CNI.
    world.ctl.config("kubernetes-control-plane", **{"ignore-missing-cni": True})
    world.ctl.settle()
    assert net_d(world, world.mid) == {}


def test_control_plane_publishes_nothing_before_its_certificates(world, control_plane):
    unit = "kubernetes-control-plane/0"
    control_plane.ca_ready = False
    world.ctl.add_relation("kubernetes-control-plane:etcd", "etcd:db")
    world.ctl.deploy(FakeCni(cidr="10.1.0.0/16", **{"cni-conf-file": "10-flannel.conflist"}))
    world.ctl.add_relation("flannel:cni", "kubernetes-control-plane:cni")
    world.ctl.settle()
    assert status(world, unit) == ("waiting", "Waiting for certificate authority")
    assert published(world, unit) == {}
    assert net_d(world, world.mid) == {}
    control_plane.ca_ready = True
    world.ctl.update_status("kubernetes-control-plane")   # unfinished: reconciles
    world.ctl.settle()
    assert status(world, unit) == ("active", "Ready")
    assert set(published(world, unit)) == {"image-registry", "kubeconfig-hash", "service-cidr"}
    assert net_d(world, world.mid) == {"01-default.conflist": "10-flannel.conflist"}


def test_control_plane_reads_the_alphabetically_first_cni_or_default_cni(world, control_plane):
    unit = "kubernetes-control-plane/0"
    world.ctl.add_relation("kubernetes-control-plane:etcd", "etcd:db")
    world.ctl.deploy(FakeCni("flannel", cidr="10.1.0.0/16",
                             **{"cni-conf-file": "10-flannel.conflist"}))
    world.ctl.deploy(FakeCni("calico", cidr="192.168.0.0/16",
                             **{"cni-conf-file": "10-calico.conflist"}))
    world.ctl.add_relation("flannel:cni", "kubernetes-control-plane:cni")
    world.ctl.add_relation("calico:cni", "kubernetes-control-plane:cni")
    world.ctl.settle()
    assert net_d(world, world.mid) == {"01-default.conflist": "10-calico.conflist"}
    world.ctl.config("kubernetes-control-plane", **{"default-cni": "flannel"})
    world.ctl.settle()
    assert net_d(world, world.mid) == {"01-default.conflist": "10-flannel.conflist"}
    assert "--cluster-cidr=10.1.0.0/16" in host(world, world.mid, CLUSTER_ARGS).read_text()
    assert status(world, unit) == ("active", "Ready")
