"""flanneld as the charm knows it: which version a binary says it is, which
era that is of, and the one digest of what it reads at start."""
from __future__ import annotations

import hashlib
import json
import re
from typing import Iterable, Optional

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
    match = re.match(r"v?(\d+)\.(\d+)", version or "")
    return bool(match) and (int(match.group(1)), int(match.group(2))) < V2_ERA_BEFORE


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
