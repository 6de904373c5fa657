"""Flannel as the CNI of a real kubernetes-core, on a real Juju controller.

Skipped as a whole (see conftest.py) where no controller answers. The
tests share one model and run in file order:

1. deploy kubernetes-core's parts with this charm; a busybox pod runs;
2. every flannel unit names a subnet inside cidr in its status;
3. the Launchpad #1866869 reproducer: remove and re-add the worker's cni
   relation; the worker's own CNI plugins survive and new pods run;
4. a cidr change gives new pods addresses in the new network.
"""
from __future__ import annotations

import ipaddress
import logging

import pytest
import yaml

from flannel_cluster import (
    CONTROL_PLANE,
    FLANNEL,
    WORKER,
    WORKER_PLUGINS,
    Cluster,
    bounded,
    juju,
    kubernetes_core_bundle,
    subnet_in_status,
)

log = logging.getLogger(__name__)

# Every test needs the controller: without one the whole module skips.
pytestmark = pytest.mark.usefixtures("juju_controller")


@pytest.fixture(scope="module")
def cluster(ops_test, settings) -> Cluster:
    return Cluster(ops_test.model, image=settings.image,
                   pod_timeout=settings.pod_timeout)


async def flannel_cidr(ops_test) -> ipaddress.IPv4Network:
    config = await ops_test.model.applications[FLANNEL].get_config()
    return ipaddress.IPv4Network(config["cidr"]["value"])


async def settle(ops_test, apps, timeout: float, what: str) -> None:
    await bounded(
        ops_test.model.wait_for_idle(apps=apps, status="active",
                                     timeout=timeout, idle_period=30),
        timeout + 120, what)


def assert_subnets_inside(ops_test, cidr: ipaddress.IPv4Network) -> None:
    units = ops_test.model.applications[FLANNEL].units
    assert units, "flannel has no units"
    for unit in units:
        subnet = subnet_in_status(unit.workload_status_message)
        assert unit.workload_status == "active", (
            f"{unit.name}: {unit.workload_status} "
            f"({unit.workload_status_message!r})")
        assert subnet is not None, (
            f"{unit.name} names no subnet: {unit.workload_status_message!r}")
        assert subnet.network.subnet_of(cidr), (
            f"{unit.name}: subnet {subnet} is not inside cidr {cidr}")


@pytest.mark.abort_on_fail
@pytest.mark.skip_if_deployed
async def test_deploy_kubernetes_core_with_flannel(
        ops_test, flannel_charm, flannel_resource, settings):
    bundle = kubernetes_core_bundle(
        charm=flannel_charm, resource_name=flannel_resource.name,
        resource_path=flannel_resource.path,
        k8s_channel=settings.k8s_channel, base=settings.base,
        constraints=settings.constraints, arch=settings.arch)
    path = ops_test.tmp_path / "kubernetes-core-flannel.yaml"
    path.write_text(yaml.safe_dump(bundle, sort_keys=False))
    log.info("deploying %s", path)
    await juju(ops_test, "deploy", str(path), timeout=settings.step_timeout)
    # Name the apps: right after `juju deploy` returns, libjuju may not
    # have seen them yet, and wait_for_idle() of "all apps" would see none.
    await settle(ops_test, list(bundle["applications"]),
                 settings.deploy_timeout,
                 "kubernetes-core with flannel to become active")


@pytest.mark.abort_on_fail
async def test_busybox_pod_reaches_running(ops_test, cluster):
    cidr = await flannel_cidr(ops_test)
    node = await cluster.node_of(cluster.unit(WORKER))
    pod = await cluster.start_pod("first", node)
    try:
        assert pod.ip in cidr, f"pod {pod.name} got {pod.ip}, not in {cidr}"
    finally:
        await cluster.delete_pod(pod.name)


async def test_status_names_a_subnet_inside_cidr(ops_test):
    assert_subnets_inside(ops_test, await flannel_cidr(ops_test))


async def test_actions_say_the_overlay_is_whole(ops_test, settings):
    """check-network from every node reaches every other node's lease;
    list-leases shows one lease per flannel unit, each held by its unit."""
    units = ops_test.model.applications[FLANNEL].units
    for unit in units:
        action = await bounded(unit.run_action("check-network"), settings.step_timeout,
                               f"check-network on {unit.name}")
        action = await bounded(action.wait(), settings.step_timeout,
                               f"check-network on {unit.name} to finish")
        assert action.status == "completed", (unit.name, action.safe_data)
        assert action.results.get("status") == "ok", (unit.name, action.results)
    action = await bounded(units[0].run_action("list-leases"), settings.step_timeout,
                           "list-leases")
    action = await bounded(action.wait(), settings.step_timeout, "list-leases to finish")
    assert action.status == "completed", action.safe_data
    assert int(action.results["count"]) == len(units), action.results
    assert action.results["nodes-gone"] == "none", action.results


async def test_cni_relation_remove_and_add(ops_test, cluster, settings):
    """Launchpad #1866869: the cycle must not cost the worker its CNI."""
    worker = cluster.unit(WORKER)
    before = await cluster.cni_plugins(worker)
    missing = [p for p in WORKER_PLUGINS if p not in before]
    assert not missing, f"{worker.name} lacks {missing} before the test"
    old = cluster.flannel_unit_on(worker.name)
    assert old is not None, f"no flannel unit on {worker.name}"
    old_name = old.name

    await ops_test.model.applications[FLANNEL].destroy_relation(
        "cni", f"{WORKER}:cni")
    await bounded(
        ops_test.model.block_until(
            lambda: old_name not in ops_test.model.units,
            timeout=settings.step_timeout),
        settings.step_timeout + 60, f"{old_name} to go away")
    after_removal = await cluster.cni_plugins(worker)
    gone = [p for p in WORKER_PLUGINS if p not in after_removal]
    assert not gone, (
        f"removing flannel from {worker.name} deleted {gone} "
        f"from /opt/cni/bin (left: {sorted(after_removal)})")

    await ops_test.model.integrate(f"{FLANNEL}:cni", f"{WORKER}:cni")
    await bounded(
        ops_test.model.block_until(
            lambda: cluster.flannel_unit_on(worker.name) is not None,
            timeout=settings.step_timeout),
        settings.step_timeout + 60, f"a new flannel unit on {worker.name}")
    await settle(ops_test, [FLANNEL, WORKER, CONTROL_PLANE],
                 settings.step_timeout,
                 "flannel to be active again after add-relation")
    new = cluster.flannel_unit_on(worker.name)
    assert new is not None and new.name != old_name

    after_add = await cluster.cni_plugins(worker)
    gone = [p for p in (*WORKER_PLUGINS, "flannel") if p not in after_add]
    assert not gone, (
        f"{worker.name} lacks {gone} in /opt/cni/bin after the cycle "
        f"(has: {sorted(after_add)})")

    cidr = await flannel_cidr(ops_test)
    pod = await cluster.start_pod(
        "after-cycle", await cluster.node_of(worker))
    try:
        assert pod.ip in cidr, f"pod {pod.name} got {pod.ip}, not in {cidr}"
    finally:
        await cluster.delete_pod(pod.name)
    assert_subnets_inside(ops_test, cidr)


async def test_cidr_change_moves_new_pods(ops_test, cluster, settings):
    flannel = ops_test.model.applications[FLANNEL]
    original = await flannel_cidr(ops_test)
    wanted = ipaddress.IPv4Network(settings.alt_cidr)
    assert wanted != original and not wanted.overlaps(original), (
        f"--alt-cidr {wanted} must not overlap the current cidr {original}")

    def reports_wanted(unit) -> bool:
        subnet = subnet_in_status(unit.workload_status_message)
        return (unit.workload_status == "active" and subnet is not None
                and subnet.network.subnet_of(wanted))

    def all_inside_wanted() -> bool:
        units = flannel.units
        return bool(units) and all(reports_wanted(u) for u in units)

    await flannel.set_config({"cidr": str(wanted)})
    try:
        await bounded(
            ops_test.model.block_until(all_inside_wanted,
                                       timeout=settings.step_timeout),
            settings.step_timeout + 60,
            f"every flannel unit to report a subnet inside {wanted}")
        await settle(ops_test, [FLANNEL, WORKER, CONTROL_PLANE],
                     settings.step_timeout, "the cidr change to settle")
        assert_subnets_inside(ops_test, wanted)

        pod = await cluster.start_pod(
            "new-cidr", await cluster.node_of(cluster.unit(WORKER)))
        try:
            assert pod.ip in wanted, (
                f"pod {pod.name} got {pod.ip}, not in the new cidr {wanted}")
        finally:
            await cluster.delete_pod(pod.name)
    finally:
        # Leave a reused model (--model) as it was found.
        await flannel.set_config({"cidr": str(original)})
        await settle(ops_test, [FLANNEL], settings.step_timeout,
                     f"flannel to settle back on {original}")
