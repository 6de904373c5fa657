"""Fault rows: see sandbox/faults/__init__.py."""
from sandbox.faults.core import FaultBench, Outcome, row  # noqa: F401
