"""What the attached flanneld says of itself: /readyz (flanneld >= 0.28.9)
decides whether a running flanneld is shown active, and a flanneld of a
version with a known defect in etcd mode is named with the version that
fixes it."""
from harness import PLUGIN_SCRIPT, deployed, resource

from charms.flannel.facts.flanneld import READY_GRACE
from charms.flannel.facts.restarts import GRACE
from charms.flannel.facts.status import NOT_READY


def test_a_running_flanneld_that_is_not_ready_is_not_active(unit):
    deployed(unit)
    # just started: not asked (it answers nothing in the hook that started it)
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")
    unit.now += READY_GRACE
    unit.machine.readyz = 503          # "flanneld is not ready yet"
    unit.hook("update-status")
    assert unit.status == ("waiting", NOT_READY)
    unit.machine.readyz = None         # hung: no answer within a second
    unit.hook("update-status")
    assert unit.status == ("waiting", NOT_READY)
    assert unit.machine.started() == 1  # the charm does not restart it for that
    unit.machine.readyz = 200
    unit.hook("update-status")
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")


def test_a_flanneld_systemd_restarted_gets_the_same_grace_as_one_the_charm_started(unit):
    """Restarted by Restart= after a crash (or at boot, or resumed after a
    series upgrade), flanneld answers 503 for a second or two while it
    leases: that is no "not ready" to show for five minutes."""
    deployed(unit)
    unit.now += 3600
    unit.machine.restarted_by_systemd()
    unit.machine.readyz = 503
    unit.now += 2
    unit.hook("update-status")
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")
    unit.now += READY_GRACE
    unit.hook("update-status")
    assert unit.status == ("waiting", NOT_READY)


def test_a_wall_clock_stepped_back_does_not_silence_the_readiness_check(unit):
    """The grace is counted on the boot clock, from flanneld's own start:
    an NTP step of the wall clock an hour back changes nothing."""
    deployed(unit)
    boot = unit.machine.since_boot()
    unit.machine.since_boot = lambda: boot + 60     # a minute later
    unit.now -= 3600                                # the wall clock stepped back
    unit.machine.readyz = 503
    unit.hook("update-status")
    assert unit.status == ("waiting", NOT_READY)


def attach(unit, version: str) -> None:
    """`juju attach-resource flannel flannel-amd64=...` with a flanneld of
    `version`, and the upgrade-charm hook Juju runs for it."""
    script = f"#!/bin/sh\necho 'Flannel version {version}' >&2\n".encode()
    unit.juju.resources["flannel-amd64"] = str(resource(
        unit.root, {"flanneld": script, "cni-plugin/flannel": PLUGIN_SCRIPT}))
    unit.hook("upgrade-charm")


def test_an_older_flanneld_is_named_with_its_defects_and_never_asked_readyz(unit):
    deployed(unit)
    attach(unit, "v0.27.4")
    assert unit.juju.version == "v0.27.4"
    unit.machine.readyz = 503     # would say not ready: v0.27.4 has no /readyz
    unit.machine.calls.clear()
    unit.hook("update-status")
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24; flanneld v0.27.4: its etcd "
                                     "watch loops after a compaction; it panics recreating a "
                                     "lost vxlan device (fixed in v0.28.9)")
    assert not [c for c in unit.machine.calls if c[0] == "GET"]
    attach(unit, "v0.28.10")
    unit.now += READY_GRACE
    unit.machine.readyz = 200
    unit.hook("update-status")
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")
    assert ["GET", "http://127.0.0.1:8474/readyz"] in unit.machine.calls


def test_the_unit_file_serves_health_on_loopback_only(unit):
    deployed(unit)
    exec_start = [line for line in unit.paths.service_file.read_text().splitlines()
                  if line.startswith("ExecStart=")][0]
    assert " -healthz-ip=127.0.0.1 -healthz-port=8474" in exec_start


# flanneld v0.27.4's journal once its watch is stuck on a compacted revision
STUCK = [line.format(n) for n in range(6) for line in (
    "I1203 12:00:{:02d}.000000 1 registry.go:293] registry: watching subnets starting from "
    "rev 5",
    "E1203 12:00:{:02d}.000000 1 registry.go:314] etcd watch channel for /coreos.com/network/"
    "subnets closed with error etcdserver: mvcc: required revision has been compacted, "
    "reconnecting...",
    "E1203 12:00:{:02d}.000000 1 registry.go:396] etcd watch channel for /coreos.com/network/"
    "subnets/10.1.52.0-24 closed with error etcdserver: mvcc: required revision has been "
    "compacted, reconnecting...")]


def test_a_flanneld_stuck_on_a_compacted_revision_is_named_and_restarted(unit):
    deployed(unit)
    attach(unit, "v0.27.4")
    started = unit.machine.started()
    unit.machine.journal = ["I1203 11:59:00.000000 1 main.go:1] flannel is running"] + STUCK
    unit.now += GRACE   # (a flanneld fresh from its start is left alone)
    unit.hook("update-status")
    assert unit.machine.started() == started + 1
    assert "v0.27.4's etcd watch retries a compacted revision without end " \
           "(flannel-io/flannel#2470, fixed in v0.28.9): restarting flanneld" in unit.log
    # the restarted flanneld's own lines follow the old run's retries: not a loop
    unit.machine.journal = STUCK + ["I1203 12:01:00.000000 1 main.go:258] Installing signal "
                                    "handlers", "I1203 12:01:00.1 1 main.go:1] flannel is ready"]
    unit.hook("update-status")
    assert unit.machine.started() == started + 1


def test_a_fixed_flanneld_s_journal_is_never_read(unit):
    deployed(unit)
    unit.machine.journal = STUCK
    unit.hook("update-status")
    assert not [c for c in unit.machine.calls if c[0] == "journalctl"]
    assert unit.machine.started() == 1
