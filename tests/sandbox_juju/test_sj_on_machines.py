"""The emulated Juju driving sandbox.machine.Machine (network + mount
namespaces): hooks run inside the machine, see its private /var/lib/juju and
/opt/cni/bin, its address, the fake jujud; charms.reactive runs unchanged."""

from __future__ import annotations

import os
import shutil

import pytest
from jujukit import REACTIVE_PYTHON, reactive_charm

from sandbox.juju import EtcdApp, KubernetesWorkerApp

pytestmark = pytest.mark.sandbox


@pytest.fixture
def machines(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool}")
    from sandbox.machine import Machine
    from sandbox.network import TestNetwork
    with TestNetwork() as net:
        started = []
        try:
            for name in ("jw0", "jw1"):
                started.append(Machine(name, net).start())
            yield started
        finally:
            for m in started:
                m.destroy()


def test_hooks_run_inside_the_machine(world, machines):
    ctl = world.ctl
    m0 = machines[0]
    mid = ctl.add_sandbox_machine(m0)
    assert ctl.model().machine(mid)["address"] == m0.address
    worker = KubernetesWorkerApp()
    ctl.deploy(EtcdApp("https://192.0.2.1:2379", version="3.4.22", address="192.0.2.1"))
    ctl.deploy(worker, to=[mid])
    ctl.deploy("flannel", world.charm())
    ctl.add_relation("flannel:etcd", "etcd:db")
    out = world.out / "inside"
    world.script("install", f"""
        touch /opt/cni/bin/flannel
        {{
          $(ls /var/lib/juju/tools/machine-*/jujud) version
          network-get cni --ingress-address
          . /etc/os-release; echo "$ID"
          pwd
        }} > {out}
    """)
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    runs = ctl.settle()
    assert all(r.ok for r in runs), [(r.unit, r.hook, r.stderr_tail) for r in runs if not r.ok]
    lines = out.read_text().splitlines()
    assert lines == ["3.6.4-ubuntu-amd64", m0.address, "ubuntu",
                     "/var/lib/juju/agents/unit-flannel-0/charm"]
    # the plugins the worker copied, plus the charm's file, are in the machine only
    assert sorted(m0.ls("/opt/cni/bin")) == ["bridge", "flannel", "host-local", "loopback",
                                             "portmap"]
    assert not os.path.exists("/opt/cni/bin/flannel") or \
        not os.path.samefile("/opt/cni/bin", m0.host_path("/opt/cni/bin"))
    assert m0.exists("/var/lib/juju/agents/unit-flannel-0/charm/metadata.yaml")
    assert not os.path.exists("/var/lib/juju/agents/unit-flannel-0")
    assert machines[1].ls("/var/lib/juju/agents") in (None, [])
    # juju exec on a sandbox machine: in the charm dir, with the hook tools
    # (before: nsenter --wd opened the charm dir on the host and failed)
    cp = ctl.exec("flannel/0", ["sh", "-c", "pwd; relation-ids cni; ls /opt/cni/bin | wc -l"])
    assert cp.returncode == 0, cp.stderr
    cni = ctl.relation_id("flannel:cni", "kubernetes-worker:cni")
    assert cp.stdout.decode().split() == ["/var/lib/juju/agents/unit-flannel-0/charm",
                                          f"cni:{cni}", "5"]
    ctl.remove_relation("flannel:cni", "kubernetes-worker:cni")
    ctl.settle()
    assert not m0.exists("/var/lib/juju/agents/unit-flannel-0")
    assert not m0.exists("/var/lib/juju/tools/unit-flannel-0")
    assert sorted(m0.ls("/opt/cni/bin")) == ["bridge", "flannel", "host-local", "loopback",
                                             "portmap"]


@pytest.mark.skipif(REACTIVE_PYTHON is None, reason="no Python with charms.reactive")
def test_charms_reactive_on_two_machines(world, machines):
    ctl = world.ctl
    mids = [ctl.add_sandbox_machine(m) for m in machines]
    worker = KubernetesWorkerApp()
    ctl.deploy(EtcdApp("https://192.0.2.1:2379", version="3.4.22", client_ca="CA",
                       client_cert="CERT", client_key="KEY", address="192.0.2.1"))
    ctl.deploy(worker, to=mids)
    ctl.deploy("flannel", reactive_charm(world))
    ctl.add_relation("flannel:etcd", "etcd:db")
    ctl.add_relation("flannel:cni", "kubernetes-worker:cni")
    runs = ctl.settle()
    assert all(r.ok for r in runs), [(r.unit, r.hook, r.stderr_tail) for r in runs if not r.ok]
    assert worker.cni_configured()
    st = ctl.status()["applications"]["kubernetes-worker"]["units"]
    for unit, m in zip(("kubernetes-worker/0", "kubernetes-worker/1"), machines):
        (sub,) = st[unit]["subordinates"].values()
        assert sub["workload-status"] == {"current": "active", "message": f"ready on {m.address}"}


def test_ops_principals_extract_debians_plugins_inside_their_machines(world, machines):
    """The ops worker and control plane untar their cni-plugins resource (the
    whole Debian set, no flannel) into their own machine's /opt/cni/bin, in
    every hook; the host's /opt/cni/bin and the other machine see nothing."""
    from sandbox.juju import OpsKubernetesControlPlaneApp, OpsKubernetesWorkerApp

    def host_bin():
        return sorted(os.listdir("/opt/cni/bin")) if os.path.isdir("/opt/cni/bin") else None

    ctl = world.ctl
    host_before = host_bin()
    worker_machine, cp_machine = machines
    worker, cp = OpsKubernetesWorkerApp(), OpsKubernetesControlPlaneApp()
    ctl.deploy(worker, to=[ctl.add_sandbox_machine(worker_machine)])
    ctl.deploy(cp, to=[ctl.add_sandbox_machine(cp_machine)])
    runs = ctl.settle()
    assert all(r.ok for r in runs), [(r.unit, r.hook, r.stderr_tail) for r in runs if not r.ok]
    debian = sorted(n for n in os.listdir("/usr/lib/cni") if n != "flannel")
    for m in machines:
        assert sorted(m.ls("/opt/cni/bin")) == debian, m.name
        for name in debian:
            with open(f"/usr/lib/cni/{name}", "rb") as f:
                assert m.read_file(f"/opt/cni/bin/{name}") == f.read(), name
    assert host_bin() == host_before
    assert [h for _u, h in worker.extractions] == ["install", "leader-elected",
                                                   "config-changed", "start"]
    status = ctl.status()["applications"]
    assert status["kubernetes-worker"]["units"]["kubernetes-worker/0"]["workload-status"] == \
        {"current": "blocked", "message": "Missing CNI Integration"}
    assert status["kubernetes-control-plane"]["units"]["kubernetes-control-plane/0"][
        "workload-status"] == {"current": "waiting", "message": "Waiting for etcd"}
