"""Remove/add cycles of the flannel:cni relation on one worker machine, for
each worker generation: the reactive worker of the bug report and today's
ops worker (which re-extracts its plugins in every hook). Two cycles in
the everyday profile, ten in the full one (sandbox.profile; the 50-cycle
soak is `python -m sandbox soak`).

After each removal: no flanneld, no flannel.1, none of the files the charm
installed, no iptables rule, route or systemd unit of flannel's, the worker's
plugins byte for byte as before flannel came. After
each re-add: every unit active and a new pod gets an address. Each cycle's
time is printed (one machine bounds it; each new unit installs its Python
dependencies from the wheelhouse)."""
from __future__ import annotations

import time

import pytest
from functional_kit import CHARM_PATHS, deploy_and_wait, plugin_bytes, plugin_differences

from sandbox import profile
from sandbox.cluster import WORKER_GENERATIONS

pytestmark = pytest.mark.functional

# a later cycle meets what the earlier ones left: two are the least that shows it
CYCLES = profile.repetitions(everyday=2, full=10)


@pytest.mark.parametrize("generation", WORKER_GENERATIONS)
def test_remove_add_cycles_leave_nothing_behind_and_pods_keep_working(
        open_cluster, generation):
    with open_cluster(f"remove/add cycles, {generation} worker", workers=1,
                      worker_generation=generation) as cluster:
        before = {"m1": deploy_and_wait(cluster)["m1"]}
        machine = cluster.machines["m1"]
        pod, error = cluster.try_pod("m1")
        assert pod, f"no address for a pod after the deploy: {error}"
        per_cycle = []
        for cycle in range(1, CYCLES + 1):
            started = time.monotonic()
            with cluster.timings.phase(f"cycle {cycle:2}: remove-relation", cluster.say):
                cluster.remove_cni_relation()
            removed = time.monotonic()
            assert cluster.flannel_units() == [], f"cycle {cycle}: units left"
            assert cluster.flanneld_pids("m1") == [], f"cycle {cycle}: flanneld still runs"
            assert cluster.vxlan_links("m1") == {}, f"cycle {cycle}: vxlan device left behind"
            assert cluster.flannel_leftovers("m1") == [], f"cycle {cycle}: flannel left these"
            left = [p for p in CHARM_PATHS if machine.exists(p)]
            assert left == [], f"cycle {cycle}: the charm's files left behind: {left}"
            assert plugin_differences(before, {"m1": plugin_bytes(cluster, "m1")}) == [], \
                f"cycle {cycle}: the worker's plugins changed"

            with cluster.timings.phase(f"cycle {cycle:2}: add-relation, active", cluster.say):
                cluster.add_cni_relation()
                cluster.wait_for_flannel(timeout=180)
            pod, error = cluster.try_pod("m1")
            assert pod, f"cycle {cycle}: a new pod got no address: {error}"
            assert plugin_differences(before, {"m1": plugin_bytes(cluster, "m1")}) == []
            done = time.monotonic()
            per_cycle.append((removed - started, done - removed))
            cluster.say(f"cycle {cycle:2}: remove {removed - started:5.1f}s, "
                        f"add + active + pod {done - removed:5.1f}s, new pod {pod.address}")
        cluster.say("cycle  remove   add+pod   total")
        for n, (rm, add) in enumerate(per_cycle, 1):
            cluster.say(f"{n:5}  {rm:6.1f}s  {add:7.1f}s  {rm + add:6.1f}s")
