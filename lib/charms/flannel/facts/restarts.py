"""When update-status restarts flanneld for what flanneld does not mend by
itself (a lease etcd lost, a lease it has no route to, no subnet.env, an
etcd watch stuck), and when it stops trying so often.

A restart is the fix for a flanneld that missed an event; it is no fix for
what a restart cannot change. So: no restart of a flanneld younger than
GRACE (it lists and routes every lease, and writes subnet.env, within
seconds of its start); the first restart for a cause at once; and while the
same cause outlives its restarts, each next one waits twice as long as the
one before (FIRST_WAIT, doubling, at most MAX_WAIT), the unit saying so in
its status. A cause is the same while what it names (the leases without a
route, the lost lease) holds some of what the restarts were made for: a
lease more beside one no restart mends waits with it, but a lease missed
after the last restart mended its own is a new event missed, restarted for
at the first look past the grace. The wall clock counts the waits: a step
back restarts at once rather than never.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

# seconds a flanneld is left to lease, route and write subnet.env after it
# started (v0.28.10 does all three within two seconds when etcd answers)
GRACE = 15
# the wait after a restart that did not mend its cause, doubling each time
FIRST_WAIT = 600
MAX_WAIT = 4 * 3600


class Cause(NamedTuple):
    """Why flanneld is to be restarted: `key` its kind ("unrouted"), `names`
    what it is about (the subnets without a route), `text` says it in the
    log and the status."""
    key: str
    text: str
    names: frozenset = frozenset()


class Restarts(NamedTuple):
    """The restarts made for one cause that has not gone since."""
    cause: str      # Cause.key
    count: int
    last: float     # when the last one was made (wall clock)
    names: frozenset = frozenset()   # what the cause named then

    def as_stored(self) -> dict:
        return {"cause": self.cause, "count": self.count, "last": self.last,
                "names": sorted(self.names)}

    @classmethod
    def from_stored(cls, stored) -> Optional["Restarts"]:
        try:
            return cls(str(stored["cause"]), int(stored["count"]), float(stored["last"]),
                       frozenset(str(name) for name in stored.get("names") or ()))
        except (TypeError, KeyError, ValueError, AttributeError):
            return None

    def for_(self, cause: "Cause") -> bool:
        """Whether `cause` is the one these restarts were made for: the same
        kind, naming some of the same (restarts that named nothing, of a
        cause that names nothing or of an earlier revision: the same kind)."""
        return self.cause == cause.key and (
            bool(self.names & cause.names) or not self.names)

    def wait(self) -> float:
        """Seconds from the last restart to the next one."""
        return min(FIRST_WAIT * 2 ** (self.count - 1), MAX_WAIT)


class Decision(NamedTuple):
    restart: bool
    restarts: Optional[Restarts]      # what to remember
    waiting: Optional[str] = None     # the status while a restart waits

    @property
    def stored(self) -> Optional[dict]:
        return self.restarts.as_stored() if self.restarts else None


def decide(previous: Optional[Restarts], cause: Optional[Cause], *, now: float,
           flanneld_age: Optional[float]) -> Decision:
    """Whether to restart flanneld for `cause` (None: nothing to mend), given
    the restarts made for it so far and how long the running flanneld has
    run (None: not running, or not known)."""
    if cause is None:
        return Decision(False, None)
    if flanneld_age is not None and flanneld_age < GRACE:
        return Decision(False, previous)
    if previous is None or not previous.for_(cause):
        return Decision(True, Restarts(cause.key, 1, now, cause.names))
    elapsed = now - previous.last
    if elapsed < 0 or elapsed >= previous.wait():
        return Decision(True, Restarts(cause.key, previous.count + 1, now,
                                       previous.names | cause.names))
    left = previous.wait() - elapsed
    times = "once" if previous.count == 1 else f"{previous.count} times"
    return Decision(False, previous,
                    f"{cause.text}: restarted it {times}, again in {minutes(left)} "
                    "(journalctl -u flannel says why)")


def minutes(seconds: float) -> str:
    whole = max(int(seconds + 59) // 60, 1)
    return f"{whole} min" if whole < 120 else f"{whole // 60} h {whole % 60} min"
