"""flanneld as a running thing: its version, its inputs, its vxlan link."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path
from typing import Iterable, Optional

VXLAN_LINK = "flannel.1"
_VERSION = re.compile(r"v?\d+\.\d+\.\d+[\w.+-]*")


def flanneld_version(binary: Path, timeout: float = 10.0) -> Optional[str]:
    """The version `flanneld -version` prints (it prints to stderr), or None."""
    try:
        done = subprocess.run([str(binary), "-version"], capture_output=True,
                              text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _VERSION.search(done.stdout + done.stderr)
    return match.group(0) if match else None


def inputs_digest(checksums: Iterable[Optional[str]], network_config: dict) -> str:
    """One digest of everything flanneld reads at start.

    flanneld must restart when any input changes and only then; comparing one
    digest with the one from its last (re)start says which.
    """
    h = hashlib.sha256()
    for checksum in checksums:
        h.update((checksum or "-").encode())
        h.update(b"\0")
    h.update(json.dumps(network_config, sort_keys=True).encode())
    return h.hexdigest()


def delete_vxlan_link(name: str = VXLAN_LINK) -> bool:
    """Delete flanneld's vxlan device; True if there was one.

    flanneld leaves the device behind when stopped; a later flanneld with
    another VNI or port would then fail to create its own.
    """
    shown = subprocess.run(["ip", "link", "show", name], capture_output=True)
    if shown.returncode != 0:
        return False
    subprocess.run(["ip", "link", "delete", name], check=True, capture_output=True)
    return True
