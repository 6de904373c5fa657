"""A unit's life, hook by hook: install, etcd, flanneld, the CNI config,
the idle hook, removal."""
import json

from harness import FLANNELD_SCRIPT, FLANNELD_VERSION, NETWORK, deployed


def test_a_fresh_unit_installs_and_waits_for_etcd(unit):
    unit.hook("install")
    assert "flannel.installed" in unit.flags
    assert unit.status == ("blocked", "Waiting for etcd relation.")
    assert unit.juju.version == FLANNELD_VERSION
    assert unit.paths.flanneld.read_bytes() == FLANNELD_SCRIPT


def test_with_etcd_and_the_principal_the_unit_is_active_on_its_lease(unit):
    etcd, cni = deployed(unit)
    assert json.loads(unit.etcd_values()[f"{NETWORK}/config"]) == {
        "Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan", "VNI": 1}}
    assert unit.machine.started() == 1
    assert {"flannel.network.configured", "flannel.service.running",
            "flannel.cni.configured"} <= unit.flags
    assert unit.juju.relations[cni].local == {"cidr": "10.1.0.0/16",
                                              "cni-conf-file": "10-flannel.conflist"}
    assert json.loads(unit.paths.cni_conflist.read_text())["name"] == "CDK-flannel-network"
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")


def test_an_idle_hook_changes_nothing_and_sets_no_status(unit):
    deployed(unit)
    statuses, calls = len(unit.juju.statuses), len(unit.machine.calls)
    unit.hook("update-status")
    assert unit.machine.started() == 1
    assert len(unit.juju.statuses) == statuses
    new_calls = [c for c in unit.machine.calls[calls:]]
    assert not any(c[:2] in (["systemctl", "start"], ["systemctl", "stop"]) for c in new_calls)


def test_before_the_principal_joins_the_unit_waits_for_it(unit):
    unit.flanneld_leases()
    unit.hook("install")
    etcd = unit.relate_etcd()
    unit.hook("etcd-relation-changed", etcd, "etcd/0")
    assert unit.status == ("waiting", "Waiting for the principal on the cni relation.")


def test_removal_takes_every_file_and_flag_and_says_so(unit):
    deployed(unit)
    unit.hook("stop")
    assert not unit.paths.flanneld.exists() and not unit.paths.cni_conflist.exists()
    assert not unit.paths.service_file.exists() and not unit.paths.etcd_key.exists()
    assert unit.flags == {"flannel.stopped"} | {f for f in unit.flags if not
                                                f.startswith("flannel.")}
    assert unit.status == ("maintenance", "Flannel removed.")
    assert unit.machine.units["flannel"]["active"] is False


def test_etcd_s_address_without_its_tls_material_waits_without_a_traceback(unit):
    """etcd publishes in steps; and the interface layer's flags are set in
    etcd's relation hooks only, so another hook may meet data gone since."""
    etcd, _ = deployed(unit)
    data = unit.juju.relations[etcd].units["etcd/0"]
    key = data.pop("client_key")
    unit.machine.units["flannel"]["active"] = False
    unit.hook("etcd-relation-changed", etcd, "etcd/0")
    assert unit.status == ("waiting", "Waiting for etcd client credentials.")
    unit.hook("config-changed")
    unit.hook("update-status")
    assert unit.status == ("waiting", "Waiting for etcd client credentials.")
    data["client_key"] = key
    unit.hook("etcd-relation-changed", etcd, "etcd/0")
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")


def test_etcd_arriving_after_the_principal_configures_cni_in_the_same_hook(unit):
    """The principal joined first; the hook in which etcd's credentials
    arrive writes the network, starts flanneld and hands the principal the
    CNI config, not a hook later (a worker's kubelet waits for it)."""
    unit.flanneld_leases()
    unit.hook("install")
    cni = unit.relate_cni()
    unit.hook("cni-relation-changed", cni, "kubernetes-worker/0")
    assert "flannel.cni.configured" not in unit.flags
    etcd = unit.relate_etcd()
    unit.hook("etcd-relation-changed", etcd, "etcd/0")
    assert "flannel.cni.configured" in unit.flags
    assert unit.juju.relations[cni].local == {"cidr": "10.1.0.0/16",
                                              "cni-conf-file": "10-flannel.conflist"}
