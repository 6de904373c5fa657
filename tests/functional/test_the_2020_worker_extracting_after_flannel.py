"""The reactive kubernetes-worker of 2020 extracts its cni-plugins (flannel
included) once its container runtime is ready, in whichever hook first finds
it so: possibly after flannel installed its own plugin (docs/explanation/etcd-v2-clusters.md).

One one-worker cluster: flannel deployed while the worker's runtime is not
ready (the unit says which plugin is missing), then the worker's extraction
over flannel's plugin, pods, removal (the worker's files left exactly as it
extracted them, owners included), and a remove/add cycle after it."""
from __future__ import annotations

import stat

import pytest

from sandbox.cluster import WORKER
from sandbox.juju.cni_plugins import MEMBER_GID, MEMBER_UID

pytestmark = [pytest.mark.functional,
              pytest.mark.xdist_group("the_2020_worker_extracting_after_flannel")]

BIN = "/opt/cni/bin"


def plugin_files(cluster) -> dict:
    """/opt/cni/bin on m1: name -> (bytes, mode, uid, gid)."""
    machine = cluster.machines["m1"]
    out = {}
    for name in machine.ls(BIN) or []:
        info = machine.path_on_host(f"{BIN}/{name}").stat()
        out[name] = (machine.read_file(f"{BIN}/{name}"), stat.S_IMODE(info.st_mode),
                     info.st_uid, info.st_gid)
    return out


def test_the_workers_late_extraction_over_flannels_plugin(open_cluster, resource):
    from functional_kit import member
    with open_cluster("2020 worker, runtime late", workers=1,
                      worker_runtime_ready=False) as cluster:
        cluster.deploy_flannel()
        cluster.wait_for_flannel(timeout=120, state="blocked")
        unit = cluster.unit_on("m1")
        before_worker = cluster.workload(unit)
        ours_alone = sorted(plugin_files(cluster))

        cluster.worker_app.container_runtime_ready = True
        cluster.controller.fire(f"{WORKER}/0", "update-status")
        cluster.settle()
        extracted = plugin_files(cluster)
        cluster.wait_for_flannel(timeout=60)
        pod = cluster.start_pod("m1")

        cluster.remove_cni_relation()
        after_remove = plugin_files(cluster)
        leftovers = cluster.flannel_leftovers("m1")
        cluster.add_cni_relation()
        cluster.wait_for_flannel(timeout=120)
        ours_again = plugin_files(cluster)["flannel"][0]
        second = cluster.start_pod("m1")
        cluster.remove_cni_relation()
        after_second_remove = plugin_files(cluster)

    assert ours_alone == ["flannel"]
    assert before_worker == (
        "blocked", 'CNI plugin "bridge" missing from /opt/cni/bin (provided by the principal)')
    # the worker's tar, as root, kept its archive's owners: its flannel over ours
    assert extracted["flannel"][0] == cluster.worker_app.flannel
    assert all(f[2:] == (MEMBER_UID, MEMBER_GID) for f in extracted.values()), extracted
    assert pod.address and second.address
    # flannel's plugin changed since it wrote it (the worker's now): left, as it is
    assert after_remove == extracted, "removal touched a file of the worker's"
    assert leftovers == [], leftovers
    # back: flannel's plugin again, the worker's kept aside and put back
    assert ours_again == member(resource, "cni-plugin/flannel")
    assert after_second_remove == extracted
