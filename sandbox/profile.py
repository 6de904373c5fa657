"""How often the suite and the fault matrix repeat what they repeat.

Two profiles, chosen by ``$FLANNEL_TEST_PROFILE``:

- ``everyday`` (the default, what ``scripts/test`` and CI run): every test,
  every behaviour it checks, with few repetitions (remove/add cycles, kill
  offsets swept, samples);
- ``full`` (``scripts/test --full``): the same tests with all their
  repetitions.

Only repetition differs between them: a test that checks something in one
profile checks it in the other.
"""
from __future__ import annotations

import os

ENV = "FLANNEL_TEST_PROFILE"
EVERYDAY = "everyday"
FULL = "full"
PROFILES = (EVERYDAY, FULL)


def current() -> str:
    name = os.environ.get(ENV, "").strip() or EVERYDAY
    if name not in PROFILES:
        raise ValueError(f"${ENV}={name!r}: one of {', '.join(PROFILES)}")
    return name


def repetitions(everyday: int, full: int) -> int:
    """How many times to repeat something under the current profile."""
    return full if current() == FULL else everyday
