"""flanneld as the charm knows it: which version a binary says it is, which
era that is of, its health server, the defects of its versions that bite
this charm's mode, and the one digest of what it reads at start."""
from __future__ import annotations

import hashlib
import json
import re
from typing import Iterable, NamedTuple, Optional

_VERSION = re.compile(r"v?\d+\.\d+\.\d+[\w.+-]*")
# flannel before v0.18 kept its network in etcd's v2 keyspace and wrote its
# --ip-masq and forward rules straight into POSTROUTING and FORWARD
V2_ERA_BEFORE = (0, 18)


def version_in(output: str) -> Optional[str]:
    """The version `flanneld -version` printed ("v0.27.4"), or None."""
    match = _VERSION.search(output)
    return match.group(0) if match else None


def of_the_v2_era(version: Optional[str]) -> bool:
    """Whether a flanneld version ("v0.11.0") is of etcd v2's era."""
    parsed = version_tuple(version)
    return parsed is not None and parsed[:2] < V2_ERA_BEFORE


def inputs_digest(checksums: Iterable[Optional[str]], network_config: dict) -> str:
    """One digest of everything flanneld reads at start (its binary's, unit
    file's and etcd client files' checksums, the network config's JSON):
    flanneld restarts when it changes, and only then."""
    h = hashlib.sha256()
    for checksum in checksums:
        h.update((checksum or "-").encode())
        h.update(b"\0")
    h.update(json.dumps(network_config, sort_keys=True).encode())
    return h.hexdigest()


def version_tuple(version: Optional[str]) -> Optional[tuple[int, int, int]]:
    """(0, 28, 10) for "v0.28.10"; None for no or an unreadable version."""
    match = re.match(r"v?(\d+)\.(\d+)\.(\d+)", version or "")
    return tuple(int(n) for n in match.groups()) if match else None


# flanneld's health server, bound to loopback (-healthz-ip, -healthz-port:
# both flags exist since v0.11): /healthz answers while it runs; /readyz
# (v0.28.9) answers 200 only once its rules are in and subnet.env written.
HEALTHZ_IP = "127.0.0.1"
HEALTHZ_PORT = 8474
READYZ_SINCE = (0, 28, 9)
# A flanneld started less than this many seconds ago is not asked: it
# answers once it leased and wrote its rules (v0.28.10: within two seconds
# of its start when etcd answers), and a hook that just (re)started it would
# otherwise show it not ready until the next hook.
READY_GRACE = 10


def offers_readyz(version: Optional[str]) -> bool:
    parsed = version_tuple(version)
    return parsed is not None and parsed >= READYZ_SINCE


class Defect(NamedTuple):
    """A defect of flanneld's that bites this charm's mode (etcd subnet
    manager), in the versions [since, fixed_in)."""
    what: str
    since: tuple[int, int, int]
    fixed_in: tuple[int, int, int]
    reference: str


KNOWN_DEFECTS = (
    # after etcd compacts, the subnet watch resumes from a compacted revision
    # and retries it forever, logging without pause (flannel-io/flannel#2470)
    Defect("its etcd watch loops after a compaction", (0, 18, 0), (0, 28, 9),
           "flannel-io/flannel#2470"),
    # reCreateVxlan (v0.27.4) indexes the IPv6 addresses on an IPv4-only node
    Defect("it panics recreating a lost vxlan device", (0, 27, 4), (0, 28, 5),
           "flannel-io/flannel#2296"),
)


def defects_of(version: Optional[str]) -> list[Defect]:
    """The known defects of a flanneld version; none for an unreadable one."""
    parsed = version_tuple(version)
    if parsed is None:
        return []
    return [d for d in KNOWN_DEFECTS if d.since <= parsed < d.fixed_in]


def defects_note(version: Optional[str]) -> str:
    """What the active status adds for a flanneld with known defects:
    "flanneld v0.27.4: its etcd watch loops after a compaction; ... (fixed in
    v0.28.9)", or ""."""
    defects = defects_of(version)
    if not defects:
        return ""
    fixed = max(d.fixed_in for d in defects)
    return (f"flanneld {version}: {'; '.join(d.what for d in defects)} "
            f"(fixed in v{'.'.join(map(str, fixed))})")


# What flanneld < 0.28.9 logs each time its watch retries a compacted
# revision (flannel-io/flannel#2470): with backoff to one try every 5 s per
# watch, and nothing else logged at idle, a stuck watch fills the journal's
# tail; one or two such lines are a reconnect that succeeded.
COMPACTED = "required revision has been compacted"
JOURNAL_TAIL = 20
STUCK_AT = 10


def has_compaction_loop(version: Optional[str]) -> bool:
    return any(d.reference == "flannel-io/flannel#2470" for d in defects_of(version))


# the line every flanneld logs as it starts (v0.11 to v0.28.10)
STARTED = "Installing signal handlers"


def stuck_on_compaction(tail: list[str]) -> bool:
    """Whether the last lines of flanneld's journal show its etcd watch
    retrying a compacted revision without end (lines before its last start
    are a previous run's)."""
    lines = tail[-JOURNAL_TAIL:]
    starts = [n for n, line in enumerate(lines) if STARTED in line]
    if starts:
        lines = lines[starts[-1]:]
    return sum(COMPACTED in line for line in lines) >= STUCK_AT
