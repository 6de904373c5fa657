"""flanneld's health server on loopback (facts/flanneld.py: HEALTHZ_IP,
HEALTHZ_PORT): whether it says it is ready."""
from __future__ import annotations

from ..facts.flanneld import HEALTHZ_IP, HEALTHZ_PORT
from .machine import Machine


def ready(machine: Machine) -> bool:
    """True if flanneld's /readyz answers 200; False if it answers anything
    else (503: "flanneld is not ready yet") or nothing (not listening, or
    hung past a second)."""
    return machine.http_status(HEALTHZ_IP, HEALTHZ_PORT, "/readyz") == 200
