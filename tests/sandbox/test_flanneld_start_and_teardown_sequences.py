"""The charm's sequences around flannel.service, run as the charm runs them
(lib/charms/flannel/service.py and teardown.py, no hook around them) on a
sandbox machine: its real systemctl, its own /lib/systemd/system, /run and
network namespace. flanneld is a stand-in here (a shell that sleeps): what
is under test is when the charm reloads, restarts and removes, not flanneld."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sandbox.machine import Machine

pytestmark = pytest.mark.sandbox

LIB = str(Path(__file__).resolve().parents[2] / "lib")
VXLAN = {"Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan", "VNI": 1}}

# Run inside the machine: the charm's library against the machine's files
# and systemctl; prints what it returned as JSON.
PRELUDE = """
import json, os, sys
from pathlib import Path
os.makedirs("/var/lib/flannel-test", exist_ok=True)
from charmhelpers.core.unitdata import Storage
from charms.flannel import paths, service, teardown
from charms.flannel.credentials import ClientFiles
from charms.flannel.install_record import InstallRecord
from charms.flannel.leftovers import ServedNetwork
from charms.flannel.systemd import Systemd
from charms.flannel.unit_state import UnitState
record = InstallRecord("/var/lib/flannel-test/record")
state = UnitState(Storage("/var/lib/flannel-test/state.db"))
files = ClientFiles(paths.ETCD_CA, paths.ETCD_CERT, paths.ETCD_KEY)
systemd = Systemd()
logged = []
def log(message, warning=False):
    logged.append(message)
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
    cp = m.run([sys.executable, "-c", PRELUDE + body + "\nstate.kv.flush()\n"],
               env={"PYTHONPATH": LIB}, check=False)
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout.strip().splitlines()[-1])


def install(m: Machine, iface: str = "eth0") -> dict:
    return charm(m, f"""
record.install(paths.FLANNELD, {STAND_IN!r}, 0o755)
record.install(paths.SERVICE_FILE, {UNIT % iface.encode()!r}, 0o644, sole=True)
print(json.dumps({{"loaded": service.load_unit_file(record, state, systemd)}}))
""")


def restart(m: Machine, confirmed: dict, iface: str = "eth0") -> dict:
    return charm(m, f"""
moves = []
restarted = service.restart_if_changed(
    record, state, systemd, confirmed={confirmed!r}, iface={iface!r}, files=files,
    active=lambda: systemd.is_active("flannel"),
    moved=lambda old, new: moves.append([old, new]),
    log=log)
print(json.dumps({{"restarted": restarted, "moves": moves, "logged": logged}}))
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


def test_a_new_interface_is_a_move_the_lease_follows(machine):
    install(machine)
    assert restart(machine, VXLAN)["moves"] == []            # its first interface
    install(machine, "eth1")                                 # the unit file says so too
    moved = restart(machine, VXLAN, iface="eth1")
    assert moved["restarted"] and moved["moves"] == [["eth0", "eth1"]]
    assert restart(machine, VXLAN, iface="eth1")["moves"] == []


def test_teardown_removes_what_flannel_made_and_nothing_else(machine):
    machine.write_file("/opt/cni/bin/bridge", b"the worker's plugin\n", mode=0o755)
    install(machine)
    restart(machine, VXLAN)
    machine.run(["ip", "link", "add", "flannel.1", "type", "vxlan", "id", "1", "dstport", "8472"])
    done = charm(machine, """
left = teardown.tear_down(record, systemd, served=ServedNetwork(), record_problem=None,
                          masked=False, release_lease=lambda: None,
                          remove_nrpe_check=lambda: None, log=log)
print(json.dumps({"left": left, "logged": logged}))
""")
    assert done["left"] == []
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
left = teardown.tear_down(None, systemd, served=ServedNetwork(),
                          record_problem="install record unreadable", masked=False,
                          release_lease=lambda: None, remove_nrpe_check=lambda: None, log=log)
print(json.dumps({"left": left, "logged": logged}))
""")
    assert "/usr/local/bin/flanneld" in done["left"]
    assert machine.exists("/usr/local/bin/flanneld")
    assert not flanneld(machine)                     # stopped all the same
    assert any("removed no file" in line for line in done["logged"])


def test_a_failing_step_does_not_keep_the_files(machine):
    install(machine)
    done = charm(machine, """
def broken():
    raise OSError("etcd is gone")
left = teardown.tear_down(record, systemd, served=ServedNetwork(), record_problem=None,
                          masked=False, release_lease=broken,
                          remove_nrpe_check=lambda: None, log=log)
print(json.dumps({"left": left, "logged": logged}))
""")
    assert any("Could not release the lease: etcd is gone" in line for line in done["logged"])
    assert not machine.exists("/usr/local/bin/flanneld")
