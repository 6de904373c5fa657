"""Remove/add cycles of the flannel:cni relation on one worker machine, for
each worker generation: the reactive worker of the bug report and today's
ops worker (which re-extracts its plugins in every hook). Two cycles in
the everyday profile, ten in the full one (sandbox.profile; the 50-cycle
soak is `python -m sandbox soak`). Each cycle is the user's scenario
(LP #1866869) as functional_kit.play_remove_add plays it, the same steps the
negative control (test_a_charm_deleting_worker_plugins_is_caught) fails.

Each cycle: a pod gets an address; after the removal no unit, no flanneld,
none of the files the charm installed, no iptables rule, route, device or
systemd unit of flannel's (Cluster.flannel_leftovers compares the node with
its state before flannel came); after the re-add every unit active and a new
pod gets an address; the worker's plugins byte for byte as before flannel
came, after every step. Each cycle's time is printed (one machine bounds it;
each new unit installs its Python dependencies from the wheelhouse)."""
from __future__ import annotations

import time

import pytest
from functional_kit import deploy_and_wait, play_remove_add

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
        before = deploy_and_wait(cluster)
        per_cycle = []
        for cycle in range(1, CYCLES + 1):
            started = time.monotonic()
            run = play_remove_add(cluster, before, cluster.say, label=f"cycle {cycle:2}: ")
            per_cycle.append(time.monotonic() - started)
            where = f"cycle {cycle}"
            assert all(p.address for p in run.first_pods), \
                f"{where}: " + "; ".join(map(str, run.first_pods))
            assert run.units_after_remove == [], f"{where}: flannel units left after removal"
            assert run.flanneld_after_remove == {"m1": []}, \
                f"{where}: flanneld still runs: {run.flanneld_after_remove}"
            assert run.leftovers_after_remove == {"m1": []}, \
                f"{where}: flannel left these: {run.leftovers_after_remove}"
            assert run.files_after_remove == {"m1": []}, \
                f"{where}: the charm's files left behind: {run.files_after_remove}"
            assert not run.readd_status, f"{where}: {run.readd_status}"
            assert all(p.address for p in run.new_pods), \
                f"{where}: new pods after add-relation: " + "; ".join(map(str, run.new_pods))
            assert run.all_plugin_changes() == [], \
                f"{where}: the worker's plugins changed: {run.all_plugin_changes()}"
        cluster.say("cycle  pods + remove + add + active + new pods")
        for n, seconds in enumerate(per_cycle, 1):
            cluster.say(f"{n:5}  {seconds:6.1f}s")
