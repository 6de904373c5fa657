"""The charm's sequences around flannel.service, run as the charm runs them
(lib/charms/flannel/steps/flanneld.py and teardown.py, with a hook's
context but no hook around them) on a sandbox machine: its real systemctl,
its own /lib/systemd/system, /run and network namespace. flanneld is a
stand-in here (a shell that sleeps): what is under test is when the charm
reloads, restarts and removes, not flanneld."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sandbox.machine import Machine

pytestmark = pytest.mark.sandbox

LIB = str(Path(__file__).resolve().parents[2] / "lib")
VXLAN = {"Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan", "VNI": 1}}

# Run inside the machine: the charm's steps against the machine's files and
# systemctl, Juju as plain values; prints what they returned as JSON.
PRELUDE = """
import json, os, sys
from pathlib import Path
os.makedirs("/var/lib/flannel-test/charm", exist_ok=True)
from charmhelpers.core.unitdata import Storage
from charms.flannel.facts.netconfig import NetworkConfig
from charms.flannel.steps import flanneld, teardown
from charms.flannel.steps.context import HookContext
from charms.flannel.steps.outcome import Outcome
from charms.flannel.steps.subnets import FlanneldOn
from charms.flannel.steps.subnets.etcd import EtcdSubnets
from charms.flannel.steps.unit_state import UnitState


class Juju:
    hook = "config-changed"
    charm_dir = Path("/var/lib/flannel-test/charm")
    options = {}
    def config(self): return dict(self.options)
    def etcd(self): return None
    def etcd_related(self): return True
    def service_cidr(self): return None
    def cni_relation_ids(self): return []
    def bind_addresses(self, endpoint): return []
    def resource_path(self, name): return None
    def nagios(self): return None


juju = Juju()
ctx = HookContext(juju, UnitState(Storage("/var/lib/flannel-test/state.db")))
record = ctx.record
out = Outcome()
# flanneld on etcd, its client files not the point here
mode, on = EtcdSubnets(ctx), FlanneldOn(where="etcd", arguments=())
"""
STAND_IN = b"#!/bin/sh\nexec sleep 3600\n"
UNIT = b"""[Unit]
Description=flannel (a stand-in)
[Service]
ExecStart=/usr/local/bin/flanneld --iface=%s
[Install]
WantedBy=multi-user.target
"""


def charm(m: Machine, body: str) -> dict:
    """Run `body` (after PRELUDE) in the machine; the JSON it printed."""
    cp = m.run([sys.executable, "-c", PRELUDE + body + "\nctx.state.kv.flush()\n"],
               env={"PYTHONPATH": LIB}, check=False)
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout.strip().splitlines()[-1])


def install(m: Machine, iface: str = "eth0") -> dict:
    return charm(m, f"""
record.install(ctx.paths.flanneld, {STAND_IN!r}, 0o755)
record.install(ctx.paths.service_file, {UNIT % iface.encode()!r}, 0o644, sole=True)
print(json.dumps({{"loaded": flanneld.load_unit_file(ctx)}}))
""")


def restart(m: Machine, confirmed: dict, iface: str = "eth0") -> dict:
    return charm(m, f"""
juju.options = {{"iface": {iface!r}}}
restarted = flanneld.restart_if_changed(ctx, NetworkConfig.from_json({confirmed!r}), on, mode,
                                       out)
print(json.dumps({{"restarted": restarted, "iface": ctx.state.flanneld_iface,
                  "logged": [line for line, _ in out.log]}}))
""")


def flanneld(m: Machine) -> list[int]:
    return m.pids_of("sleep")


@pytest.fixture
def machine(test_network):
    with Machine("m1", test_network) as m1:
        yield m1


def test_flanneld_restarts_when_its_inputs_change_and_only_then(machine):
    assert install(machine) == {"loaded": True}
    assert install(machine) == {"loaded": False}     # loaded already: no daemon-reload
    assert machine.systemctl("is-enabled", "flannel").stdout.strip() == "enabled"

    first = restart(machine, VXLAN)
    assert first["restarted"] and flanneld(machine)
    pid = flanneld(machine)
    assert restart(machine, VXLAN)["restarted"] is False
    assert flanneld(machine) == pid                 # same inputs, running: left alone

    # a new network (VNI): stopped, what the old one left dropped, started again
    machine.run(["ip", "link", "add", "flannel.1", "type", "vxlan", "id", "1", "dstport", "8472"])
    second = restart(machine, {**VXLAN, "Backend": {"Type": "vxlan", "VNI": 2}})
    assert second["restarted"] and flanneld(machine) and flanneld(machine) != pid
    assert "flannel.1" not in machine.links()
    assert any("flannel.1" in line for line in second["logged"])

    # flanneld found dead: started again with the same inputs
    machine.systemctl("stop", "flannel")
    assert restart(machine, {**VXLAN, "Backend": {"Type": "vxlan", "VNI": 2}})["restarted"]


def test_a_new_interface_restarts_flanneld_there(machine):
    """(The lease that follows it: tests/handlers/test_flanneld_and_removal.py.)"""
    install(machine)
    assert restart(machine, VXLAN)["iface"] == "eth0"        # its first interface
    install(machine, "eth1")                                 # the unit file says so too
    moved = restart(machine, VXLAN, iface="eth1")
    assert moved["restarted"] and moved["iface"] == "eth1"
    assert restart(machine, VXLAN, iface="eth1")["restarted"] is False


def test_teardown_removes_what_flannel_made_and_nothing_else(machine):
    machine.write_file("/opt/cni/bin/bridge", b"the worker's plugin\n", mode=0o755)
    install(machine)
    restart(machine, VXLAN)
    machine.run(["ip", "link", "add", "flannel.1", "type", "vxlan", "id", "1", "dstport", "8472"])
    done = charm(machine, """
done = teardown.run(ctx, masked=False, remove_nrpe_check=lambda: None)
print(json.dumps({"status": [done.status.state, done.status.message],
                  "logged": [line for line, _ in done.log]}))
""")
    assert done["status"] == ["maintenance", "Flannel removed."]
    assert not flanneld(machine)
    assert not machine.exists("/usr/local/bin/flanneld")
    assert not machine.exists("/lib/systemd/system/flannel.service")
    assert machine.read_file("/opt/cni/bin/bridge") == b"the worker's plugin\n"
    assert "flannel.1" not in machine.links()
    assert machine.systemctl("is-enabled", "flannel").returncode != 0


def test_teardown_without_a_record_removes_no_file(machine):
    """An unreadable record proves nothing: the handler hands none over (its
    load would raise), and no file goes."""
    install(machine)
    restart(machine, VXLAN)
    done = charm(machine, """
from charms.flannel.facts.status import Problem
ctx.state.set_problem(Problem.RECORD, "Install record unreadable")
done = teardown.run(ctx, masked=False, remove_nrpe_check=lambda: None)
print(json.dumps({"status": [done.status.state, done.status.message],
                  "logged": [line for line, _ in done.log]}))
""")
    assert done["status"][0] == "blocked"
    assert "/usr/local/bin/flanneld" in done["status"][1]
    assert machine.exists("/usr/local/bin/flanneld")
    assert not flanneld(machine)                     # stopped all the same
    assert any("removed no file" in line for line in done["logged"])


def test_a_failing_step_does_not_keep_the_files(machine):
    install(machine)
    done = charm(machine, """
def broken():
    raise OSError("nagios is gone")
done = teardown.run(ctx, masked=False, remove_nrpe_check=broken)
print(json.dumps({"logged": [line for line, _ in done.log]}))
""")
    assert any("Could not remove the nrpe check: nagios is gone" in line
               for line in done["logged"])
    assert not machine.exists("/usr/local/bin/flanneld")
