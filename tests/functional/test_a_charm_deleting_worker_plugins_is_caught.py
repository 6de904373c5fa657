"""The negative control: the user's scenario against a copy of the charm
whose stop hook deletes the worker's CNI plugins, as the charm did before
LP #1866869 was fixed.

Against the reactive worker of the bug report (it copied its plugins once),
the same checks that pass for the real charm must catch it: libcni's own
error when the new pod is created, containerd's (the bug report's words) when
a CRI pod sandbox is, the byte comparison of the worker's plugins, and `juju
status`, which names the missing plugin (without the CNI chain check the
unit would come back "active" while no pod could start). Against the ops
worker the old charm's damage does not last: the worker extracts its plugins
again in its next hook (the relation's own departed/broken hooks, at the
latest the add-relation's), so new pods work and the plugins are back byte
for byte; this is why the bug report needed the reactive kubernetes-worker
of 2020."""
from __future__ import annotations

import pytest
from functional_kit import (CONTAINERD_MISSING_PLUGIN, MISSING_PLUGIN, deploy_and_wait,
                            old_charm_copy, play_remove_add, wait_cri_loaded)

pytestmark = pytest.mark.functional


def test_old_stop_hook_makes_new_pods_fail_with_missing_plugin(
        open_cluster, built_charm, tmp_path):
    from sandbox.resource import crictl_path
    crictl_path()
    broken = old_charm_copy(built_charm, tmp_path)
    with open_cluster("negative control", workers=1) as cluster:
        before = deploy_and_wait(cluster, charm_dir=broken)
        cri_before = cluster.start_pod("m1", runtime="cri")
        run = play_remove_add(cluster, before, cluster.say, readd_state="blocked")
        wait_cri_loaded(cluster, "CDK-flannel-network")
        cri_pod, cri_error = cluster.try_pod("m1", runtime="cri")

    assert all(p.address for p in run.first_pods), [str(p) for p in run.first_pods]
    assert cri_before.address
    # flannel itself comes back (it reinstalls its own plugin), and its status
    # names what the worker lost ...
    assert not run.readd_status, run.readd_status
    assert list(run.readd_messages.values()) == [
        'CNI plugin "bridge" missing from /opt/cni/bin (provided by the principal)'], \
        run.readd_messages
    [new_pod] = run.new_pods
    assert new_pod.address is None, f"a new pod got {new_pod.address} although bridge is gone"
    # ... and libcni cannot find the plugin flannel delegates to.
    missing = MISSING_PLUGIN.search(new_pod.error)
    assert missing, f"cnitool failed otherwise: {new_pod.error}"
    assert missing.group(1) in ("bridge", "host-local", "flannel"), missing.group(0)
    print(f"cnitool, as expected: {missing.group(0)}")
    # containerd's CRI plugin, as kubelet meets it, says the same.
    assert cri_pod is None, f"a new CRI pod got {cri_pod.address} although the plugins are gone"
    missing = CONTAINERD_MISSING_PLUGIN.match(cri_error)
    assert missing, f"containerd failed otherwise: {cri_error}"
    assert missing.group(1) in ("bridge", "host-local", "flannel"), cri_error
    print(f"containerd, as expected: {cri_error}")
    # The byte comparison the real charm passes catches the deletion too.
    assert run.plugin_changes["deploy"] == []
    assert "m1: bridge deleted" in run.plugin_changes["remove-relation"]
    assert "m1: host-local deleted" in run.plugin_changes["remove-relation"]


def test_old_stop_hook_against_the_ops_worker_is_healed_by_its_next_reconcile(
        open_cluster, built_charm, tmp_path):
    broken = old_charm_copy(built_charm, tmp_path)
    with open_cluster("negative control, ops worker", workers=1,
                      worker_generation="ops") as cluster:
        before = deploy_and_wait(cluster, charm_dir=broken)
        worker = cluster.worker_app
        run = play_remove_add(cluster, before, cluster.say)
        hooks = [hook for _unit, hook in worker.extractions]

    cluster.say(f"after remove-relation: {run.plugin_changes['remove-relation'] or 'unchanged'}")
    assert all(p.address for p in run.first_pods), [str(p) for p in run.first_pods]
    assert not run.readd_status, run.readd_status
    [new_pod] = run.new_pods
    assert new_pod.address, f"a new pod got no address: {new_pod.error}"
    assert run.plugin_changes["add-relation"] == []
    assert run.plugin_changes["the new pods"] == []
    assert "cni-relation-broken" in hooks, f"the worker did not reconcile on the removal: {hooks}"


@pytest.mark.kubernetes
def test_kubectl_shows_the_bug_reports_event_with_the_charm_it_replaces(
        built_charm, resource, tmp_path):
    """The bug report as written, on Kubernetes itself: charm-flannel at
    f79f180 with its stop hook, the reactive worker of 2020; after remove-
    and add-relation, kubelet's event for a new pod is the report's
    (`scripts/demo` plays the same, sandbox.demo.negative_control)."""
    from sandbox.demo import MISSING_FLANNEL_EVENT, negative_control
    event = negative_control(built_charm, resource, tmp_path, say=print)
    assert event is not None and MISSING_FLANNEL_EVENT.search(event), event
    print(f"kubelet, as in the bug report: {event}")
