"""What the charm knows of flanneld's versions: which offer /readyz, and
which carry a known defect of etcd mode (and the version that fixes it)."""
import pytest

from charms.flannel.facts.flanneld import (KNOWN_DEFECTS, defects_note, defects_of,
                                           offers_readyz, version_tuple)
from charms.flannel.facts.status import ACTIVE, Problem, choose


@pytest.mark.parametrize("version, parsed", [
    ("v0.28.10", (0, 28, 10)), ("0.27.4", (0, 27, 4)), ("v0.28.9-rc1", (0, 28, 9)),
    ("dev", None), (None, None), ("v0.28", None)])
def test_versions_compare_as_numbers(version, parsed):
    assert version_tuple(version) == parsed


@pytest.mark.parametrize("version, readyz", [
    ("v0.28.8", False), ("v0.28.9", True), ("v0.28.10", True), ("v0.27.4", False),
    ("v1.0.0", True), ("dev", False), (None, False)])
def test_readyz_is_asked_of_flanneld_0_28_9_and_later(version, readyz):
    # "v0.28.10" > "v0.28.9" only as numbers: as strings it would sort first
    assert offers_readyz(version) is readyz


@pytest.mark.parametrize("version, defects", [
    ("v0.11.0", []),                                    # etcd v2's era: not the v3 watch
    ("v0.22.0", ["its etcd watch loops after a compaction"]),
    ("v0.27.4", ["its etcd watch loops after a compaction",
                 "it panics recreating a lost vxlan device"]),
    ("v0.28.5", ["its etcd watch loops after a compaction"]),
    ("v0.28.9", []), ("v0.28.10", []), ("dev", [])])
def test_known_defects_by_version(version, defects):
    assert [d.what for d in defects_of(version)] == defects


def test_every_defect_names_where_it_is_tracked_and_a_fix_after_it_appeared():
    for defect in KNOWN_DEFECTS:
        assert defect.reference.startswith("flannel-io/flannel#")
        assert defect.since < defect.fixed_in


def test_the_active_status_names_the_defects_and_the_version_fixing_all():
    note = defects_note("v0.27.4")
    assert note == ("flanneld v0.27.4: its etcd watch loops after a compaction; it panics "
                    "recreating a lost vxlan device (fixed in v0.28.9)")
    shown = choose([], ["10.1.52.1/24"], note)
    assert shown.state == ACTIVE
    assert shown.message == f"Flannel subnet 10.1.52.1/24; {note}"
    assert defects_note("v0.28.10") == ""
    assert choose([], ["10.1.52.1/24"], "").message == "Flannel subnet 10.1.52.1/24"


def test_not_ready_is_waiting_and_yields_to_negotiating():
    # right after a start flanneld has no lease yet: "Negotiating" says more
    assert Problem.NOT_READY.level == "waiting"
    assert choose([(Problem.NOT_READY, None), (Problem.NEGOTIATING, None)]).message == \
        "Negotiating flannel network subnet."


def test_a_journal_tail_of_compacted_retries_is_a_stuck_watch():
    from charms.flannel.facts.flanneld import has_compaction_loop, stuck_on_compaction
    retry = ("E1203 12:00:05.1 1 registry.go:314] etcd watch channel for /coreos.com/network/"
             "subnets closed with error etcdserver: mvcc: required revision has been compacted, "
             "reconnecting...")
    watching = "I1203 12:00:05.1 1 registry.go:293] registry: watching subnets starting from rev 5"
    assert stuck_on_compaction([watching, retry] * 10)
    assert not stuck_on_compaction([retry] * 3 + ["I1203 12:00:09.0 1 main.go:1] ready"] * 17)
    assert not stuck_on_compaction([])
    assert has_compaction_loop("v0.27.4") and has_compaction_loop("v0.28.8")
    assert not has_compaction_loop("v0.28.9") and not has_compaction_loop("v0.11.0")
