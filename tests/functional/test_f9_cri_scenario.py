"""LP #1866869 on CRI pods: pods made by containerd's CRI plugin (crictl
runp + a busybox container, as kubelet makes them), on the built charm's
machines, through `juju remove-relation` / `add-relation` of flannel:cni.

Both tests fail on main before sandbox.cri existed (no CRI pods at all); the
first also failed on main's charm itself: its stop removed /etc/cni/net.d
(which it had created), containerd lost its inotify watch on it, and every
new pod after add-relation failed with "cni plugin not initialized"."""
from __future__ import annotations

import re

import pytest
from functional_kit import deploy_and_wait, old_charm_copy

pytestmark = pytest.mark.functional

# containerd's own words when a plugin of the conflist is missing (the bug report's).
CONTAINERD_MISSING_PLUGIN = re.compile(
    r'^failed to setup network for sandbox "[0-9a-f]{64}": plugin type="flannel" failed '
    r'\(add\): failed to find plugin "([^"]+)" in path \[/opt/cni/bin\]$')
# containerd with no loadable conflist in its conf_dir.
NOT_INITIALIZED = re.compile(r'^failed to setup network for sandbox "[0-9a-f]{64}": '
                             r'cni plugin not initialized$')


@pytest.fixture(scope="module", autouse=True)
def crictl_built():
    from sandbox.resource import crictl_path
    crictl_path()


def host_local_allocations(cluster, machine: str, network: str = "cbr0") -> set[str]:
    return {name for name in cluster.machines[machine].ls(f"/var/lib/cni/networks/{network}")
            or [] if re.fullmatch(r"[0-9.]+", name)}


def test_cri_pods_before_during_and_after_remove_add(open_cluster):
    with open_cluster("cri scenario", workers=2) as cluster:
        deploy_and_wait(cluster)
        with cluster.timings.phase("first CRI pod (containerd starts)", cluster.say):
            first = {"m1": cluster.start_pod("m1", runtime="cri")}
        first["m2"] = cluster.start_pod("m2", runtime="cri")
        assert first["m1"].ping(first["m2"].address), "no ping across machines (vxlan)"
        assert first["m2"].ping(first["m1"].address)

        with cluster.pinging(first["m1"], first["m2"].address) as across:
            with cluster.timings.phase("remove-relation (CRI pods running)", cluster.say):
                cluster.remove_cni_relation()
            # containerd reloads its conf_dir: with flannel's conflist gone,
            # no new pod, while the running ones stay Ready.
            pod, gap_error = cluster.try_pod("m1", runtime="cri")
            states = {m: p.inspect()["status"]["state"] for m, p in first.items()}
            with cluster.timings.phase("add-relation (CRI pods running)", cluster.say):
                cluster.add_cni_relation()
                cluster.wait_for_flannel(timeout=180)
        cluster.say(f"pings m1 -> m2 through the cycle: {across}")
        assert pod is None and NOT_INITIALIZED.match(gap_error), gap_error
        assert states == {"m1": "SANDBOX_READY", "m2": "SANDBOX_READY"}

        # The user's bug: new pods after add-relation. They run, and reach the
        # pods made before the cycle, which kept their addresses and work again.
        new = {m: cluster.start_pod(m, runtime="cri") for m in ("m1", "m2")}
        addresses = [p.address for p in (*first.values(), *new.values())]
        assert len(set(addresses)) == 4, addresses
        assert new["m1"].ping(new["m2"].address) and new["m2"].ping(first["m1"].address)
        assert first["m1"].ping(first["m2"].address), "old pods lost each other for good"
        assert first["m2"].ping(new["m1"].address)
        assert across.answered > 0, str(across)

        # Removal through the runtime releases the address (CNI DEL, host-local).
        old = first["m1"].address
        assert old in host_local_allocations(cluster, "m1")
        assert first["m1"].delete() == ""
        assert old not in host_local_allocations(cluster, "m1")
        for name, machine in cluster.machines.items():
            from sandbox.cri import runtime_for
            rt = runtime_for(machine)
            cluster.say(f"{name}: crictl pods\n{rt.crictl('pods').stdout}")


def test_old_stop_hook_makes_new_cri_pods_fail_with_containerds_message(
        open_cluster, built_charm, tmp_path):
    """The negative control on CRI pods: the charm copy whose stop deletes
    the worker's plugins (functional_kit.old_charm_copy)."""
    broken = old_charm_copy(built_charm, tmp_path)
    with open_cluster("cri negative control", workers=1) as cluster:
        deploy_and_wait(cluster, charm_dir=broken)
        before = cluster.start_pod("m1", runtime="cri")
        cluster.remove_cni_relation()
        cluster.add_cni_relation()
        cluster.wait_for_flannel(timeout=180)
        pod, error = cluster.try_pod("m1", runtime="cri")
    assert before.address
    assert pod is None, f"a new CRI pod got {pod.address} although the plugins are gone"
    missing = CONTAINERD_MISSING_PLUGIN.match(error)
    assert missing, f"containerd failed otherwise: {error}"
    # flannel itself is back (this charm's install), the plugins it delegates to are not
    assert missing.group(1) in ("bridge", "host-local", "flannel"), error
    print(f"containerd, as expected: {error}")
