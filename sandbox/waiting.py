"""Polling for a state the sandbox cannot be told about (a process forked,
a leader elected): one helper for the sandbox and its tests."""
from __future__ import annotations

import time


def wait_for(predicate, timeout: float, interval: float = 0.2):
    """predicate()'s first truthy value within `timeout` seconds, else None."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(interval)
