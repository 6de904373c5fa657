"""LP #1866869 on CRI pods, and what containerd adds that cnitool hid.

Pods here are made by containerd's CRI plugin (crictl runp + a busybox
container, as kubelet makes them) on the built charm's machines. One
two-machine cluster serves, in file order: which conflist the runtime loads
(the first in conf_dir by name, the ops charms' 01-default.conflist symlink
included); CNI DEL of a pod set up under the old charm's conflist
(network "CDK-flannel-network") after this charm took over; then the user's
scenario through `juju remove-relation` / `add-relation` of flannel:cni
(the conflist gone and back). Each test leaves flannel active with its own
conflist. The negative control on CRI pods (containerd's message for the
plugins the old charm deleted) is test_a_charm_deleting_worker_plugins_is_caught.

All of it needs sandbox.cri (CRI pods). A charm whose stop removed
/etc/cni/net.d (which it had created) failed the scenario: containerd lost
its inotify watch on it, and every new pod after add-relation failed with
"cni plugin not initialized"."""
from __future__ import annotations

import json
import re

import pytest
from functional_kit import cri_loaded_network, deploy_and_wait, wait_cri_loaded

from sandbox.waiting import wait_for

# the module's tests share its cluster(s): one pytest-xdist worker runs them all
pytestmark = [pytest.mark.functional, pytest.mark.xdist_group("cri_pods_through_remove_add")]

NET_D = "/etc/cni/net.d"
# The charm's CNI network name: the old charm's, so host-local keeps one
# allocation table whatever a cluster's history.
NETWORK = "CDK-flannel-network"
CONFLIST = f"{NET_D}/10-flannel.conflist"
# The old charm's conflist as it sits on units (network name CDK-flannel-network).
OLD_CHARM_CONFLIST = {
    "name": "CDK-flannel-network", "cniVersion": "0.3.1",
    "plugins": [
        {"type": "flannel", "delegate": {"hairpinMode": True, "isDefaultGateway": True}},
        {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
    ],
}
# Someone's bridge network that sorts before the charm's 10-flannel.conflist.
STALE_CONFLIST = {
    "name": "stale", "cniVersion": "0.3.1",
    "plugins": [{"type": "bridge", "bridge": "stale0",
                 "ipam": {"type": "host-local", "subnet": "10.99.0.0/24"}}],
}

# containerd with no loadable conflist in its conf_dir.
NOT_INITIALIZED = re.compile(r'^failed to setup network for sandbox "[0-9a-f]{64}": '
                             r'cni plugin not initialized$')


@pytest.fixture(scope="module")
def cluster(open_cluster):
    from sandbox.resource import crictl_path
    crictl_path()
    with open_cluster("cri", workers=2) as cluster:
        deploy_and_wait(cluster)
        yield cluster


def runtime(cluster, machine: str = "m1"):
    from sandbox.cri import runtime_for
    return runtime_for(cluster.machines[machine])


def loaded_source(cluster) -> str | None:
    """The text of the conflist containerd has loaded (None: none)."""
    info = json.loads(runtime(cluster).crictl("info").stdout)
    for network in info.get("cniconfig", {}).get("Networks") or []:
        if network["Config"]["Name"] != "cni-loopback":
            return network["Config"].get("Source")
    return None


def wait_loaded_source(cluster, text: bytes, timeout: float = 120.0) -> None:
    if not wait_for(lambda: (loaded_source(cluster) or "").encode() == text, timeout):
        raise AssertionError(f"containerd loaded {loaded_source(cluster)!r}, not {text!r}")


def wait_conf_event(cluster, mark: int, what: str, name: str, timeout: float = 120.0) -> bool:
    """Whether containerd's conf syncer logged `what` ("ignore event",
    "receiving change event") for file `name` after log mark `mark`."""
    def seen():
        return any(what in line and f"{NET_D}/{name}" in line
                   for line in runtime(cluster).log_since(mark).splitlines())
    return bool(wait_for(seen, timeout))


def allocations(cluster, network: str, machine: str = "m1") -> set[str]:
    """Addresses host-local holds for `network` on `machine`."""
    return {n for n in cluster.machines[machine].ls(f"/var/lib/cni/networks/{network}") or []
            if re.fullmatch(r"[0-9.]+", n)}


def flannel_subnet(cluster) -> str:
    return cluster.subnet_env("m1")["FLANNEL_SUBNET"].rsplit(".", 1)[0] + "."


def test_containerd_loads_the_first_conflist_by_name_and_follows_the_01_default_symlink(cluster):
    m1 = cluster.machines["m1"]
    runtime(cluster)
    wait_cri_loaded(cluster, NETWORK)
    try:
        conflists_sort_by_name(cluster, m1)
    finally:  # the module's cluster goes on with the charm's conflist alone
        m1.run(["rm", "-f", f"{NET_D}/02-stale.conflist", f"{NET_D}/01-default.conflist"])
        m1.write_file(CONFLIST, m1.read_file(CONFLIST))   # a rename: containerd reloads
    wait_cri_loaded(cluster, NETWORK)


def conflists_sort_by_name(cluster, m1):
    # someone's conflist sorting first wins over the charm's ...
    m1.write_file(f"{NET_D}/02-stale.conflist", json.dumps(STALE_CONFLIST))
    wait_cri_loaded(cluster, "stale")
    stray = cluster.start_pod("m1", runtime="cri")
    assert stray.address.startswith("10.99.0."), stray
    # ... until the control plane's 01-default.conflist (the ops charms'
    # symlink to the CNI charm's file) sorts before it. containerd 1.6's conf
    # syncer ignores inotify Create events (only write, rename and remove
    # reload), so the new symlink alone changes nothing ...
    mark = runtime(cluster).log_size()
    m1.run(["ln", "-s", CONFLIST, f"{NET_D}/01-default.conflist"])
    assert wait_conf_event(cluster, mark, "ignore event", "01-default.conflist"), \
        runtime(cluster).log_since(mark)[-2000:]
    assert cri_loaded_network(cluster) == "stale"
    # ... and the next write in the directory (here someone's file rewritten
    # by rename) loads the first by name: the symlink, flannel's network.
    m1.write_file(f"{NET_D}/02-stale.conflist", json.dumps(STALE_CONFLIST))
    wait_cri_loaded(cluster, NETWORK)
    pod = cluster.start_pod("m1", runtime="cri")
    assert pod.address.startswith(flannel_subnet(cluster)), pod
    assert stray.delete() == "" and pod.delete() == ""


def test_pod_of_the_old_charms_network_is_deleted_after_the_takeover(cluster):
    """A pod set up under the old charm's conflist, removed after this
    charm's conflist (same network name, other delegate settings) replaced
    it: CNI DEL must succeed and free the address in host-local's table, and
    no new pod may get the address the old one holds. The old charm's file is
    played by a conflist that sorts first and then goes, as the old one does
    when the refresh rewrites it (containerd reloads on the removal)."""
    m1 = cluster.machines["m1"]
    old_conflist = f"{NET_D}/00-old-charm.conflist"
    try:
        m1.write_file(old_conflist, json.dumps(OLD_CHARM_CONFLIST))
        wait_loaded_source(cluster, json.dumps(OLD_CHARM_CONFLIST).encode())
        old = cluster.start_pod("m1", runtime="cri")
        assert old.address in allocations(cluster, NETWORK)
        mark = runtime(cluster).log_size()
    finally:
        m1.run(["rm", "-f", old_conflist])   # the takeover: only the charm's conflist is left
    assert wait_conf_event(cluster, mark, "receiving change event", "00-old-charm.conflist")
    wait_loaded_source(cluster, m1.read_file(CONFLIST))
    new = cluster.start_pod("m1", runtime="cri")
    cluster.say(f"old pod {old.address} (the old charm's conflist), new pod {new.address}")
    error = old.delete()
    left = allocations(cluster, NETWORK)
    assert error == "", f"CNI DEL of the old charm's pod failed: {error}"
    assert old.address not in left, f"DEL left {old.address} allocated: {left}"
    assert new.address != old.address, "a new pod got the address a running pod holds"
    assert new.delete() == ""


def test_cri_pods_before_during_and_after_remove_add(cluster):
    with cluster.timings.phase("first CRI pod (containerd starts)", cluster.say):
        first = {"m1": cluster.start_pod("m1", runtime="cri")}
    first["m2"] = cluster.start_pod("m2", runtime="cri")
    assert first["m1"].ping(first["m2"].address), "no ping across machines (vxlan)"
    assert first["m2"].ping(first["m1"].address)

    with cluster.pinging(first["m1"], first["m2"].address) as across:
        with cluster.timings.phase("remove-relation (CRI pods running)", cluster.say):
            cluster.remove_cni_relation()
        # containerd reloads its conf_dir: with flannel's conflist gone,
        # no new pod, while the running ones stay Ready. The charm kept the
        # runtime's directory (containerd's inotify watch on it).
        net_d_after_stop = cluster.machines["m1"].ls(NET_D)
        default_link = cluster.default_conflist_link("m1", stem="05-default")
        wait_cri_loaded(cluster, None)   # (containerd's reload follows the removal's event)
        pod, gap_error = cluster.try_pod("m1", runtime="cri")
        cluster.say(f"   a new pod with flannel gone, the worker's link left: {gap_error}")
        states = {m: p.inspect()["status"]["state"] for m, p in first.items()}
        with cluster.timings.phase("add-relation (CRI pods running)", cluster.say):
            cluster.add_cni_relation()
            cluster.wait_for_flannel(timeout=180)
    cluster.say(f"pings m1 -> m2 through the cycle: {across}")
    # Traffic across machines stops while flannel is gone (flannel.1 deleted),
    # as docs/how-to/remove.md says, and the pods reach each other again afterwards (below).
    assert across.lost > 0, across
    # the link of the reactive kubernetes-worker of 2020 to flannel's conflist
    # stays, dangling: nothing of the worker removes it (configure_default_cni
    # only runs with a CNI)
    assert net_d_after_stop == ["05-default.conflist"], net_d_after_stop
    assert default_link == "10-flannel.conflist", default_link
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

    # Removal through the runtime releases the address (CNI DEL, host-local).
    old = first["m1"].address
    assert old in allocations(cluster, NETWORK)
    assert first["m1"].delete() == ""
    assert old not in allocations(cluster, NETWORK)
    for name in cluster.machines:
        cluster.say(f"{name}: crictl pods\n{runtime(cluster, name).crictl('pods').stdout}")
