"""The stop hook (steps/teardown.py): flannel leaves the node as it found
it, and a node leaving during a backend change gives its lease back.

On a real network namespace of the test's own (netns_machine), the
session's real TLS etcd, real files below the test's directory and
flannel.service run by systemctl3 (tests/unit/test_status.py: this
machine runs no systemd). The steps use etcd's default prefix, so each
test here clears the leases under it first and last.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import stepkit
from test_status import with_systemd, write_unit

from charms.flannel.adapters.credentials import write_client_credentials
from charms.flannel.adapters.etcd import NetworkStore
from charms.flannel.facts.status import Problem
from charms.flannel.steps import teardown
from charms.flannel.steps.flags import OWN, STOPPED

VXLAN = {"Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan", "VNI": 1}}
SUBNET_ENV = ("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.52.1/24\nFLANNEL_MTU=1450\n"
              "FLANNEL_IPMASQ=false\n")
UNREACHABLE = "https://127.0.0.1:9"


@pytest.fixture
def store(settings):
    """etcd at the default prefix the steps use, with no lease before or after."""
    with NetworkStore(settings) as store:
        store.release_lease(store.leases())
        yield store
        store.release_lease(store.leases())


@pytest.fixture
def node(netns_machine):
    """The namespace as a node's flanneld left it: cni0 holding the
    lease's gateway."""
    netns_machine.netns(["sh", "-ec", "ip link add cni0 type bridge\n"
                                      "ip addr add 10.1.52.1/24 dev cni0\nip link set cni0 up\n"
                                      "ip link add uplink type veth peer name uplinkp\n"
                                      "ip addr add 192.0.2.10/24 dev uplink"])
    return netns_machine


def addresses(machine, name="cni0") -> list[str]:
    shown = json.loads(machine.netns(["ip", "-j", "addr", "show"]))
    return [f"{a['local']}/{a['prefixlen']}" for link in shown if link["ifname"] == name
            for a in link.get("addr_info", []) if a.get("scope") != "link"]


def leaving_unit(tmp_path, machine, pki, *, backend, endpoints):
    """A unit whose flanneld runs vxlan on 10.1.52.0/24, its config now
    asking for `backend`, its client files on disk as the etcd step wrote
    them."""
    ctx = stepkit.context(tmp_path, machine=with_systemd(tmp_path / "node", machine),
                          hook="stop", config={"backend": backend})
    write_client_credentials(ctx.record, ctx.paths, pki.ca_cert.read_text(),
                             pki.client_cert.read_text(), pki.client_key.read_text())
    ctx.state.confirmed_network = VXLAN
    ctx.state.etcd_endpoints = endpoints
    ctx.paths.subnet_env.parent.mkdir(parents=True)
    ctx.paths.subnet_env.write_text(SUBNET_ENV)
    return ctx


def lease_in(store):
    assert store.create_lease("10.1.52.0-24", json.dumps({"PublicIP": "192.0.2.10",
                                                          "BackendType": "vxlan"}).encode(), 600)


# --- the lease, while a backend change waits -----------------------------------------------

def test_a_node_leaving_during_a_backend_change_gives_its_lease_back(tmp_path, node, pki,
                                                                     store, etcd):
    """`juju config flannel backend=host-gw` waits for every node to leave:
    a removed unit that kept its lease (24 h) would keep the change refused.
    The next lease differs, so the old gateway leaves cni0 too."""
    lease_in(store)
    ctx = leaving_unit(tmp_path, node, pki, backend="host-gw", endpoints=etcd.endpoint)
    out = teardown.run(ctx, masked=False, remove_nrpe_check=lambda: None)
    assert store.leases() == []
    assert ("Deleted this node's lease of 10.1.52.0/24 from etcd", False) in out.log
    assert addresses(node) == []


def test_without_a_backend_change_the_lease_stays_for_the_unit_added_back(tmp_path, node, pki,
                                                                          store, etcd):
    """A unit added back gets the same subnet, and the pods here keep theirs."""
    lease_in(store)
    ctx = leaving_unit(tmp_path, node, pki, backend="vxlan", endpoints=etcd.endpoint)
    out = teardown.run(ctx, masked=False, remove_nrpe_check=lambda: None)
    assert [lease.subnet for lease in store.leases()] == ["10.1.52.0/24"]
    assert not [message for message, _ in out.log if "lease" in message]


def test_etcd_gone_is_logged_not_raised(tmp_path, node, pki):
    ctx = leaving_unit(tmp_path, node, pki, backend="host-gw", endpoints=UNREACHABLE)
    out = teardown.run(ctx, masked=False, remove_nrpe_check=lambda: None)
    [message] = [message for message, warning in out.log if warning]
    assert message.startswith("Could not clear all that subnet-manager=etcd kept: cannot reach "
                              f"etcd: {UNREACHABLE} (")
    assert (out.status.state, out.status.message) == ("maintenance", "Flannel removed.")


LOADS_NO_ETCD_CLIENT = """
import sys
from pathlib import Path
import stepkit
from charms.flannel.steps import teardown
ctx = stepkit.context(Path(sys.argv[1]), hook="stop", config={"backend": "vxlan"})
ctx.state.confirmed_network = {"Network": "10.1.0.0/16", "Backend": {"Type": "vxlan"}}
ctx.state.etcd_endpoints = "https://127.0.0.1:9"
ctx.state.registered_lease = "10.1.52.0/24"   # (its name goes: no etcd3gw for that either)
ctx.paths.subnet_env.parent.mkdir(parents=True)
ctx.paths.subnet_env.write_text(sys.argv[2])
teardown.run(ctx, masked=False, remove_nrpe_check=lambda: None)
print(sorted(m for m in ("etcd3gw", "requests", "urllib3") if m in sys.modules))
"""


def test_a_stop_without_a_backend_change_loads_no_etcd_client(tmp_path):
    """etcd3gw and requests cost a stop hook 0.15 s of imports: only a
    pending backend change needs them."""
    done = subprocess.run([sys.executable, "-c", LOADS_NO_ETCD_CLIENT, str(tmp_path),
                           SUBNET_ENV], capture_output=True, text=True,
                          env={"PYTHONPATH": ":".join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --- the whole stop ------------------------------------------------------------------------

FLANNELD_LEFT = """
ip link add eth0 type veth peer name eth0p
ip link set eth0p up && ip link set eth0 up && ip addr add 172.31.254.11/24 dev eth0
ip link add flannel.1 type vxlan id 1 dev eth0 dstport 8472
ip link add vx0 type vxlan id 7 dev eth0 dstport 4789
ip link set flannel.1 up && ip link set vx0 up
ip route add 10.1.7.0/24 via 172.31.254.12 dev eth0
ip route add 10.9.0.0/16 via 172.31.254.1 dev eth0
iptables -t nat -N FLANNEL-POSTRTG
iptables -t nat -A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG
iptables -t nat -A FLANNEL-POSTRTG -s 10.1.0.0/16 ! -d 224.0.0.0/4 -j MASQUERADE
iptables -t nat -A POSTROUTING -s 192.168.9.0/24 -j MASQUERADE
"""


def installed_unit(tmp_path, node, pki, *, backend="vxlan", endpoints=UNREACHABLE):
    """A unit as the charm left it running: its files through the install
    record (the worker's bridge plugin beside its own), flanneld running,
    and what flanneld left in the namespace."""
    ctx = leaving_unit(tmp_path, node, pki, backend=backend, endpoints=endpoints)
    paths = ctx.paths
    paths.cni_bin_dir.mkdir(parents=True)
    (paths.cni_bin_dir / "bridge").write_bytes(b"the worker's bridge")
    ctx.record.install(paths.flanneld, b"#!/bin/sh\nexec sleep 600\n", 0o755)
    ctx.record.install(paths.cni_plugin, b"flannel plugin", 0o755)
    ctx.record.install(paths.cni_conflist, b'{"name": "CDK-flannel-network"}', 0o644, sole=True)
    unit = write_unit(tmp_path / "scratch", f"{paths.flanneld}")
    ctx.record.install(paths.service_file, unit.read_bytes(), 0o644, sole=True)
    ctx.state.flanneld_inputs = "digest"
    ctx.state.set_problem(Problem.ETCD, "cannot reach etcd")
    node.netns(["sh", "-ec", FLANNELD_LEFT])
    return ctx


def is_active(ctx) -> bool:
    return ctx.systemd.is_active("flannel")


def links(node) -> list[str]:
    return [link["ifname"] for link in json.loads(node.netns(["ip", "-j", "link", "show"]))]


def test_stop_leaves_nothing_of_flannel_and_everything_else(tmp_path, node, pki):
    ctx = installed_unit(tmp_path, node, pki)
    ctx.systemd.do("start", "flannel")
    assert is_active(ctx)
    out = teardown.run(ctx, masked=False, remove_nrpe_check=lambda: None)
    assert not is_active(ctx)
    paths = ctx.paths
    for path in (*paths.written_files, paths.subnet_env):
        assert not path.exists(), path
    assert (paths.cni_bin_dir / "bridge").read_bytes() == b"the worker's bridge"
    assert paths.cni_conf_dir.is_dir()          # containerd's, watched: kept
    assert "flannel.1" not in links(node) and "cni0" not in links(node)
    assert {"vx0", "eth0"} <= set(links(node))
    routes = node.netns(["ip", "route", "show"])
    assert "10.1.7.0/24" not in routes and "10.9.0.0/16 via 172.31.254.1" in routes
    rules = node.netns(["iptables-save"])
    assert "FLANNEL" not in rules and "-A POSTROUTING -s 192.168.9.0/24 -j MASQUERADE" in rules
    # a unit added back later starts from nothing
    assert ctx.state.kv.getrange("flannel.") == {}
    assert set(out.clear_flags) == set(OWN) and out.set_flags == [STOPPED]
    assert (out.status.state, out.status.message) == ("maintenance", "Flannel removed.")
    assert not [message for message, warning in out.log if warning]


def test_a_stop_during_a_backend_change_gives_the_lease_back(tmp_path, node, pki, store, etcd):
    lease_in(store)
    ctx = installed_unit(tmp_path, node, pki, backend="host-gw", endpoints=etcd.endpoint)
    out = teardown.run(ctx, masked=False, remove_nrpe_check=lambda: None)
    assert store.leases() == []
    assert ("Deleted this node's lease of 10.1.52.0/24 from etcd", False) in out.log


def test_etcd_gone_during_a_backend_change_stops_nothing_else_of_the_stop(tmp_path, node, pki):
    """Each step after the service's stop may fail without stopping the
    others: a forced removal must not leave the files behind."""
    ctx = installed_unit(tmp_path, node, pki, backend="host-gw")
    nrpe_removed = []
    out = teardown.run(ctx, masked=True, remove_nrpe_check=lambda: nrpe_removed.append(True))
    warnings = [message for message, warning in out.log if warning]
    assert len(warnings) == 1 and warnings[0].startswith(
        "Could not clear all that subnet-manager=etcd kept: cannot reach etcd")
    assert nrpe_removed == [True]
    for path in ctx.paths.written_files:
        assert not path.exists(), path
    assert "flannel.1" not in links(node) and "FLANNEL" not in node.netns(["iptables-save"])
    assert (out.status.state, out.status.message) == ("maintenance", "Flannel removed.")


def test_without_a_record_to_trust_the_stop_removes_no_file_and_names_them(tmp_path, node, pki):
    """Nothing proves which files flannel wrote (a worker of 2020 ships its
    own /opt/cni/bin/flannel): the operator is told which are left."""
    ctx = installed_unit(tmp_path, node, pki)
    (ctx.record.directory / "record.json").unlink()
    damaged = f"Install record {ctx.record.directory / 'record.json'} is missing"
    ctx.state.set_problem(Problem.RECORD, damaged)
    written = [p for p in ctx.paths.written_files if p.exists()]
    out = teardown.run(ctx, masked=False, remove_nrpe_check=lambda: None)
    for path in written:
        assert path.exists(), path
    left = ", ".join(map(str, written))
    assert (out.status.state, out.status.message) == (
        "blocked", f"Flannel stopped; {damaged}: left {left}")
    assert not ctx.paths.subnet_env.exists()      # flanneld's, not a file flannel wrote
    assert "flannel.1" not in links(node)         # the kernel's leftovers go all the same
    assert ctx.state.kv.getrange("flannel.") == {}


def test_the_stop_unmasks_what_a_series_upgrade_masked(tmp_path, node, pki):
    ctx = installed_unit(tmp_path, node, pki)
    ctx.systemd.do("mask", "flannel")
    mask = tmp_path / "node" / "etc" / "systemd" / "system" / "flannel.service"
    assert os.path.lexists(mask)
    teardown.run(ctx, masked=True, remove_nrpe_check=lambda: None)
    assert not os.path.lexists(mask)
