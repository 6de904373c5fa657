"""The fault matrix: `python -m sandbox faults` and
tests/functional/test_fault_matrix.py play the same registered rows.

core: the bench, the row registry and the checks; the area modules hold the
rows: etcd_faults (etcd away, wiped, re-keyed), hook_faults (hooks killed,
disk full, install record damaged), node_faults (flanneld dying, reboot,
concurrent first configuration)."""
from sandbox.faults import etcd_faults, hook_faults, node_faults  # noqa: F401  (register rows)
from sandbox.cluster import IPV6_CIDR
from sandbox.faults.core import ROWS, FaultBench, Outcome, Row, row, run_row, table

# The rows whose fault is the pod network's own (its leases wiped, flanneld
# killed, the node's network gone with the power): played in dual-stack,
# whose checks are IPv4's and IPv6's (CI plays the reboot in both).
NETWORK_ROWS = ("2 etcd data wiped", "7a flanneld killed with SIGKILL", "8 machine reboot")
DUAL_STACK_ONLY = ("2 etcd data wiped", "7a flanneld killed with SIGKILL")
DUAL_STACK = {"ipv6-cidr": IPV6_CIDR}   # the flannel options of a dual-stack row

__all__ = ["ROWS", "NETWORK_ROWS", "DUAL_STACK_ONLY", "DUAL_STACK", "FaultBench", "Outcome",
           "Row", "row", "run_row", "table"]
