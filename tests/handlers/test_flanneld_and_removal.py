"""flanneld's unit file, its interface and its restarts; a series upgrade;
removal, with a record to trust and without."""
from harness import configure, deployed


def test_an_edited_unit_file_is_rendered_again_and_flanneld_restarted(unit):
    deployed(unit)
    written = unit.paths.service_file.read_text()
    unit.paths.service_file.write_text(written.replace("-subnet-file", "-public-ip=1.2.3.4 "
                                                                       "-subnet-file"))
    reloads = unit.machine.reloads
    unit.hook("update-status")
    assert unit.paths.service_file.read_text() == written
    assert unit.machine.reloads == reloads + 1 and unit.machine.started() == 2


def test_flanneld_runs_on_the_binding_s_interface_but_never_on_a_fan_bridge(unit):
    unit.machine.links["fan-252"] = type(unit.machine.links["eth0"])(
        "fan-252", kind="bridge", addresses=["252.10.0.1/8"])
    unit.juju.bind_addresses = [{"interface-name": "fan-252"}, {"interface-name": "eth0"}]
    deployed(unit)
    assert " -iface=eth0 " in unit.paths.service_file.read_text()


def test_a_new_iface_gives_the_lease_back_so_the_subnet_stays(unit):
    """flanneld keys its lease by its address: on another interface it would
    lease a new subnet, and cni0's old gateway would stop every new pod."""
    unit.machine.links["eth1"] = type(unit.machine.links["eth0"])(
        "eth1", addresses=["172.31.253.11/24"])
    deployed(unit)
    configure(unit, iface="eth1")
    assert " -iface=eth1 " in unit.paths.service_file.read_text()
    assert "gave the lease of 10.1.52.0/24 back" in unit.log
    assert unit.machine.started() == 2


def test_a_series_upgrade_pauses_flanneld_and_removal_then_unmasks_it(unit):
    deployed(unit)
    unit.hook("pre-series-upgrade")
    assert unit.machine.units["flannel"] == {"active": False, "enabled": False, "masked": True}
    assert unit.status == ("blocked", "Series upgrade in progress")
    unit.hook("stop")
    assert unit.machine.units["flannel"]["masked"] is False
    assert unit.status == ("maintenance", "Flannel removed.")


def test_a_series_upgrade_resumes_flanneld(unit):
    deployed(unit)
    unit.hook("pre-series-upgrade")
    unit.hook("post-series-upgrade")
    assert unit.machine.units["flannel"] == {"active": True, "enabled": True, "masked": False}
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")


def test_without_a_record_to_trust_removal_deletes_no_file_and_names_them(unit):
    deployed(unit)
    record = unit.charm.parent / "flannel-install-record" / "record.json"
    record.unlink()
    unit.hook("stop")
    for path in (unit.paths.flanneld, unit.paths.cni_plugin, unit.paths.cni_conflist):
        assert path.exists(), path
    state, message = unit.status
    assert state == "blocked" and message.startswith("Flannel stopped; Install record")
    assert str(unit.paths.flanneld) in message
    assert unit.machine.units["flannel"]["active"] is False


def test_a_unit_removed_before_it_started_is_torn_down_by_remove(unit):
    unit.hook("install")
    unit.hook("remove")
    assert not unit.paths.flanneld.exists()
    assert "flannel.stopped" in unit.flags


def test_removal_takes_flanneld_s_rules_and_devices_and_leaves_others(unit):
    unit.machine.iptables["iptables"] = "\n".join([
        "*nat", ":POSTROUTING ACCEPT [0:0]", ":FLANNEL-POSTRTG - [0:0]",
        '-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG',
        "-A FLANNEL-POSTRTG -s 10.1.0.0/16 -j MASQUERADE",
        "-A POSTROUTING -s 192.168.9.0/24 -j MASQUERADE", "COMMIT", ""])
    deployed(unit)
    unit.machine.links["flannel.1"] = type(unit.machine.links["eth0"])(
        "flannel.1", kind="vxlan", mtu=1450)
    unit.hook("stop")
    assert "FLANNEL" not in unit.machine.iptables["iptables"]
    assert "-A POSTROUTING -s 192.168.9.0/24 -j MASQUERADE" in unit.machine.iptables["iptables"]
    assert "flannel.1" not in unit.machine.links


def test_during_a_series_upgrade_no_hook_starts_writes_or_installs(unit):
    deployed(unit)
    unit.hook("pre-series-upgrade")
    config = unit.etcd_values()
    unit.paths.cni_plugin.unlink()
    configure(unit, cidr="10.3.0.0/16")
    unit.hook("update-status")
    assert unit.machine.started() == 1 and unit.machine.units["flannel"]["active"] is False
    assert unit.etcd_values() == config
    assert not unit.paths.cni_plugin.exists()
    assert unit.status == ("blocked", "Series upgrade in progress")
