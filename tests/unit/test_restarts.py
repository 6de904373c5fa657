"""When update-status restarts flanneld (facts/restarts.py): not within a
grace of flanneld's own start, at once for a new cause, then backing off
while the cause outlives its restarts; a wall clock stepped back restarts
rather than never."""
from charms.flannel.facts.restarts import (FIRST_WAIT, GRACE, MAX_WAIT, Cause, Restarts,
                                           decide)

ROUTE = Cause("unrouted", "flanneld has no route to 10.1.9.0/24 that etcd leases",
              frozenset(["10.1.9.0/24"]))


def test_nothing_to_mend_forgets_the_restarts():
    assert decide(Restarts(ROUTE.key, 3, 0.0), None, now=10.0, flanneld_age=900).restarts \
        is None


def test_a_young_flanneld_is_left_its_grace():
    young = decide(None, ROUTE, now=0.0, flanneld_age=GRACE - 1)
    assert not young.restart and young.restarts is None and young.waiting is None
    assert decide(None, ROUTE, now=0.0, flanneld_age=GRACE).restart
    assert decide(None, ROUTE, now=0.0, flanneld_age=None).restart   # not running


def test_restarts_for_a_cause_that_stays_wait_twice_as_long_each_time():
    now, restarts, made = 0.0, None, []
    while now < 6 * 3600:
        decision = decide(restarts, ROUTE, now=now, flanneld_age=300)
        if decision.restart:
            made.append(now)
        restarts = decision.restarts
        now += 300   # update-status
    gaps = [b - a for a, b in zip(made, made[1:])]
    assert gaps[:4] == [FIRST_WAIT, 2 * FIRST_WAIT, 4 * FIRST_WAIT, 8 * FIRST_WAIT]
    assert max(gaps) <= MAX_WAIT
    assert len(made) == 6   # not 72


def test_the_status_says_the_cause_the_restarts_made_and_when_the_next_comes():
    decision = decide(Restarts(ROUTE.key, 2, 0.0, ROUTE.names), ROUTE, now=300.0,
                      flanneld_age=300)
    assert not decision.restart
    assert decision.waiting == ("flanneld has no route to 10.1.9.0/24 that etcd leases: "
                                "restarted it 2 times, again in 15 min (journalctl -u flannel "
                                "says why)")


def test_restarts_an_earlier_revision_recorded_hold_their_back_off():
    """Recorded with no names: the same kind is the same cause (no restart
    at once after a refresh)."""
    earlier = Restarts.from_stored({"cause": "unrouted", "count": 1, "last": 0.0})
    assert not decide(earlier, ROUTE, now=60.0, flanneld_age=300).restart
    assert decide(earlier, ROUTE, now=FIRST_WAIT, flanneld_age=300).restart


def test_another_cause_restarts_at_once_and_a_clock_stepped_back_restarts():
    other = Cause("lost-lease", "etcd lost this node's lease of 10.1.52.0/24")
    assert decide(Restarts(ROUTE.key, 4, 0.0, ROUTE.names), other, now=60.0,
                  flanneld_age=300).restarts == Restarts(other.key, 1, 60.0)
    stepped = decide(Restarts(ROUTE.key, 4, 10_000.0, ROUTE.names), ROUTE, now=6_000.0,
                     flanneld_age=300)
    assert stepped.restart and stepped.restarts.count == 5


def test_what_is_remembered_reads_back_and_garbage_is_forgotten():
    kept = Restarts(ROUTE.key, 2, 12.5, ROUTE.names)
    assert Restarts.from_stored(kept.as_stored()) == kept
    # (what an earlier revision kept: no names, read as naming nothing)
    assert Restarts.from_stored({"cause": "unrouted", "count": 2, "last": 1.0}).names == \
        frozenset()
    assert Restarts.from_stored({"cause": "x"}) is None and Restarts.from_stored(None) is None


def test_a_lease_missed_after_the_last_restart_mended_its_own_is_restarted_for_at_once():
    """IPv6 turned off: the restart for one missed lease mended it, then the
    restarted flanneld missed the other node's new lease. The restarts for
    the first (never forgotten: no look saw the cause gone between) held
    the second back for ten minutes while no pod reached that node."""
    missed = Cause("unrouted", "flanneld has no route to 10.1.77.0/24 that etcd leases",
                   frozenset(["10.1.77.0/24"]))
    decision = decide(Restarts(ROUTE.key, 1, 0.0, ROUTE.names), missed, now=60.0,
                      flanneld_age=GRACE)
    assert decision.restart and decision.restarts == Restarts("unrouted", 1, 60.0, missed.names)
    # one the restarts did not mend, beside a new one: the same cause, waited for
    both = Cause("unrouted", "...", ROUTE.names | missed.names)
    assert not decide(Restarts(ROUTE.key, 1, 0.0, ROUTE.names), both, now=60.0,
                      flanneld_age=300).restart
