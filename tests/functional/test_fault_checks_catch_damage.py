"""The fault bench's checks catch what they claim to (so a fault row that
passes means something): on a healthy deployed cluster they find nothing;
each damage done by hand is named, and repairing it clears the finding."""
from __future__ import annotations

import os

import pytest

from sandbox.faults import FaultBench
from sandbox.waiting import wait_for

pytestmark = pytest.mark.functional


def test_the_checks_see_each_kind_of_damage(open_cluster):
    with open_cluster("fault checks", 2) as cluster:
        bench = FaultBench(cluster, say=cluster.say)
        bench.deploy()
        assert bench.verify() == (0, [])
        m1 = bench.machine("m1")
        unit = bench.unit_on("m1")

        # a worker plugin changed: a lost file
        bridge = m1.path_on_host("/opt/cni/bin/bridge")
        original = bridge.read_bytes()
        bridge.write_bytes(original + b"\0")
        lost, problems = bench.verify(pods=False)
        assert lost == 1 and problems == ["m1: /opt/cni/bin/bridge changed"]
        bridge.write_bytes(original)

        # the charm's conflist changed behind the record's back; a temp file
        # of an interrupted write; the etcd key readable by all
        conflist = m1.path_on_host("/etc/cni/net.d/10-flannel.conflist")
        kept = conflist.read_bytes()
        conflist.write_bytes(kept + b"\n")
        m1.write_file("/usr/local/bin/.flanneld.abc.tmp", b"partial")
        key = m1.path_on_host("/etc/ssl/flannel/client-key.pem")
        os.chmod(key, 0o644)
        lost, problems = bench.verify(pods=False)
        assert lost == 0
        assert sorted(problems) == sorted([
            f"{unit}: /etc/cni/net.d/10-flannel.conflist differs from the record",
            f"{unit}: temp file of an interrupted write left: /usr/local/bin/.flanneld.abc.tmp",
            f"{unit}: /etc/ssl/flannel/client-key.pem mode 0o644, record says 0o600",
            f"{unit}: /etc/ssl/flannel/client-key.pem has mode 0o644 (not root-only)",
        ])
        conflist.write_bytes(kept)
        os.unlink(m1.path_on_host("/usr/local/bin/.flanneld.abc.tmp"))
        os.chmod(key, 0o600)

        # a pod that cannot be reached any more
        pod = bench.pods["m2"]
        cluster.machines["m2"].run(["ip", "link", "set", "cni0", "down"])
        _, problems = bench.verify()
        assert any(f"cannot reach pod {pod.name}" in p for p in problems), problems
        cluster.machines["m2"].run(["ip", "link", "set", "cni0", "up"])
        # (the bridge forwards again once its ports are back in forwarding state)
        assert wait_for(lambda: bench.verify() == (0, []), 60, interval=1.0), bench.verify()
