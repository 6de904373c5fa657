"""What containerd adds that cnitool hid, on one machine with the built
charm: which conflist the runtime loads (the first in conf_dir by name, a
symlink included), how it reacts when the charm's conflist goes and comes
back, and CNI DEL of pods set up under the old charm's conflist
(network "CDK-flannel-network") after this charm took over.

The tests share one cluster and run in file order; each leaves flannel
active with its own conflist in place."""
from __future__ import annotations

import json
import re
import time

import pytest
from functional_kit import deploy_and_wait

pytestmark = pytest.mark.functional

NET_D = "/etc/cni/net.d"
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


@pytest.fixture(scope="module")
def cluster(open_cluster):
    from sandbox.resource import crictl_path
    crictl_path()
    with open_cluster("cri runtime", workers=1) as cluster:
        deploy_and_wait(cluster)
        yield cluster


def runtime(cluster):
    from sandbox.cri import runtime_for
    return runtime_for(cluster.machines["m1"])


def loaded_network(cluster) -> str | None:
    """The name of the CNI network containerd has loaded (None: none)."""
    info = json.loads(runtime(cluster).crictl("info").stdout)
    names = [n["Config"]["Name"] for n in info.get("cniconfig", {}).get("Networks") or []]
    names = [n for n in names if n != "cni-loopback"]
    return names[0] if names else None


def wait_loaded(cluster, name: str | None, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while loaded_network(cluster) != name:
        if time.monotonic() > deadline:
            raise AssertionError(f"containerd loaded {loaded_network(cluster)!r}, not {name!r}")
        time.sleep(0.2)


def allocations(cluster, network: str) -> set[str]:
    return {n for n in cluster.machines["m1"].ls(f"/var/lib/cni/networks/{network}") or []
            if re.fullmatch(r"[0-9.]+", n)}


def flannel_subnet(cluster) -> str:
    return cluster.subnet_env("m1")["FLANNEL_SUBNET"].rsplit(".", 1)[0] + "."


def test_containerd_loads_the_first_conflist_by_name_and_follows_the_01_default_symlink(cluster):
    m1 = cluster.machines["m1"]
    runtime(cluster)
    wait_loaded(cluster, "cbr0")
    # someone's conflist sorting first wins over the charm's ...
    m1.write_file(f"{NET_D}/05-stale.conflist", json.dumps(STALE_CONFLIST))
    wait_loaded(cluster, "stale")
    stray = cluster.start_pod("m1", runtime="cri")
    assert stray.address.startswith("10.99.0."), stray
    # ... until the control plane's 01-default.conflist (the ops charms'
    # symlink to the CNI charm's file) sorts before it. containerd 1.6's conf
    # syncer ignores inotify Create events (only write, rename and remove
    # reload), so the new symlink alone changes nothing ...
    m1.run(["ln", "-s", CONFLIST, f"{NET_D}/01-default.conflist"])
    time.sleep(1.0)
    assert loaded_network(cluster) == "stale"
    # ... and the next write in the directory (here someone's file rewritten
    # by rename) loads the first by name: the symlink, flannel's network.
    m1.write_file(f"{NET_D}/05-stale.conflist", json.dumps(STALE_CONFLIST))
    wait_loaded(cluster, "cbr0")
    pod = cluster.start_pod("m1", runtime="cri")
    assert pod.address.startswith(flannel_subnet(cluster)), pod
    assert stray.delete() == "" and pod.delete() == ""
    m1.run(["rm", f"{NET_D}/05-stale.conflist"])

    # remove-relation: the symlink dangles; containerd has no network.
    cluster.remove_cni_relation()
    assert m1.ls(NET_D) == ["01-default.conflist"] and not m1.exists(CONFLIST)
    wait_loaded(cluster, None)
    failed, error = cluster.try_pod("m1", runtime="cri")
    cluster.say(f"CRI pod with a dangling 01-default.conflist: {error}")
    assert failed is None and error.startswith("failed to setup network for sandbox"), error
    # add-relation: the conflist is back, the symlink resolves, pods run.
    cluster.add_cni_relation()
    cluster.wait_for_flannel(timeout=180)
    wait_loaded(cluster, "cbr0")
    pod = cluster.start_pod("m1", runtime="cri")
    assert pod.address.startswith(flannel_subnet(cluster)), pod
    assert pod.delete() == ""
    m1.run(["rm", f"{NET_D}/01-default.conflist"])


def test_conflist_gone_and_back_containerd_unloads_and_reloads_it(cluster):
    m1 = cluster.machines["m1"]
    before = cluster.start_pod("m1", runtime="cri")
    cluster.remove_cni_relation()
    # the charm keeps the runtime's directory (containerd's inotify watch)
    assert m1.ls(NET_D) == []
    wait_loaded(cluster, None)
    failed, error = cluster.try_pod("m1", runtime="cri")
    assert failed is None and error.endswith(": cni plugin not initialized"), error
    assert before.inspect()["status"]["state"] == "SANDBOX_READY"
    cluster.add_cni_relation()
    cluster.wait_for_flannel(timeout=180)
    wait_loaded(cluster, "cbr0")
    after = cluster.start_pod("m1", runtime="cri")
    assert after.address != before.address
    assert after.ping(before.address) and before.ping(after.address)
    assert before.delete() == "" and after.delete() == ""


def test_pod_of_the_old_charms_network_is_deleted_after_the_takeover(cluster):
    """A pod set up while the old charm's conflist (CDK-flannel-network) was
    in place, removed after this charm's conflist (cbr0) replaced it: CNI DEL
    must succeed and free the address in the old network's host-local table,
    and no new pod may get the address the old one holds."""
    m1 = cluster.machines["m1"]
    charm_conflist = m1.read_file(CONFLIST)
    m1.write_file(CONFLIST, json.dumps(OLD_CHARM_CONFLIST))
    wait_loaded(cluster, "CDK-flannel-network")
    old = cluster.start_pod("m1", runtime="cri")
    assert old.address in allocations(cluster, "CDK-flannel-network")
    # the charm takes over at its next hook: its own conflist again
    cluster.controller.update_status("flannel")
    cluster.settle()
    assert m1.read_file(CONFLIST) == charm_conflist
    wait_loaded(cluster, "cbr0")
    new = cluster.start_pod("m1", runtime="cri")
    cluster.say(f"old pod {old.address} (CDK-flannel-network), new pod {new.address} (cbr0)")
    error = old.delete()
    left = allocations(cluster, "CDK-flannel-network")
    assert error == "", f"CNI DEL of the old charm's pod failed: {error}"
    assert old.address not in left, f"DEL left {old.address} allocated: {left}"
    assert new.address != old.address, "a new pod got the address a running pod holds"
    assert new.delete() == ""
