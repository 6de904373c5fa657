"""Helpers the unit tier's tests import by name (conftest.py holds the
fixtures): a module of its own, so that any combination of tiers collects
(`from conftest import ...` resolves to whichever tier's conftest pytest
imported last)."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time

import pytest


@contextlib.contextmanager
def open_netns():
    """A throwaway network namespace with lo up (root, unshare): gives
    run(argv), which runs a command inside it and returns its stdout;
    run.path is the namespace's /proc path (for nsenter or CNI_NETNS)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a network namespace needs root and unshare")
    holder = subprocess.Popen(["unshare", "-n", "sleep", "600"])
    path = f"/proc/{holder.pid}/ns/net"
    for _ in range(500):   # unshare has made the namespace once its net ns differs
        if os.path.exists(path) and os.readlink(path) != os.readlink("/proc/self/ns/net"):
            break
        time.sleep(0.01)

    def run(argv, **kwargs):
        return subprocess.run(["nsenter", f"--net={path}", *map(str, argv)], check=True,
                              capture_output=True, text=True, timeout=60, **kwargs).stdout

    run.path = path
    try:
        run(["ip", "link", "set", "lo", "up"])
        yield run
    finally:
        holder.kill()
        holder.wait()


# --- etcd as a test looks behind the charm's back ----------------------------------

def etcd_client(etcd):
    """An etcd3gw client of the test's own (to put what flanneld would, and
    to look at what the charm wrote)."""
    import etcd3gw
    return etcd3gw.Etcd3Client(host=etcd.host, port=etcd.port, protocol="https",
                               timeout=5, session=etcd.session())


def wipe_flannel(etcd, prefix: str = "/coreos.com/network") -> None:
    """flannel's keys at `prefix` gone, v3 and v2."""
    etcd_client(etcd).delete_prefix(prefix + "/")
    with etcd.session() as session:
        session.delete(f"{etcd.endpoint}/v2/keys{prefix}",
                       params={"recursive": "true", "dir": "true"}, timeout=5)
