"""The status never says active while the node cannot start a pod: the
pods' bridge, the CNI plugins, the configs the runtime loads."""
import json

import pytest
from harness import configure, deployed


def test_flannel_s_old_gateway_leaves_cni0_and_the_unit_is_active(unit):
    """A unit back after its lease expired, with cni0 still holding the
    gateway of the lease it had (removal keeps it while pods use it)."""
    unit.machine.bridge("10.1.29.1/24", ports=1)
    deployed(unit, subnet="10.1.48.1/24")
    assert unit.machine.links["cni0"].addresses == []
    assert "Took 10.1.29.1/24 off cni0" in unit.log
    assert unit.status == ("active", "Flannel subnet 10.1.48.1/24")


def test_an_address_on_cni0_that_is_not_flannel_s_blocks_and_stays(unit):
    """(Listed before the gateway: the bridge plugin stops at the first.)"""
    unit.machine.bridge("192.168.9.1/24", "10.1.48.1/24", ports=1)
    deployed(unit, subnet="10.1.48.1/24")
    assert unit.machine.links["cni0"].addresses == ["192.168.9.1/24", "10.1.48.1/24"]
    assert unit.status == ("blocked", "cni0 holds 192.168.9.1/24, which is not flannel's: the "
                                      "bridge plugin refuses every new pod until it goes "
                                      "(ip addr del 192.168.9.1/24 dev cni0)")
    unit.machine.links["cni0"].addresses.remove("192.168.9.1/24")
    unit.hook("update-status")
    assert unit.status == ("active", "Flannel subnet 10.1.48.1/24")


def test_an_address_after_the_gateway_stops_no_pod_and_the_unit_is_active(unit):
    """The bridge plugin reads cni0's addresses in order and is done at the
    gateway: an address listed after it stops nothing (containernetworking
    plugins v1.1.1 and v1.9.1 both start the pod)."""
    unit.machine.bridge("10.1.48.1/24", "192.168.9.1/24", ports=1)
    deployed(unit, subnet="10.1.48.1/24")
    assert unit.status == ("active", "Flannel subnet 10.1.48.1/24")


def test_an_ipv4_link_local_address_on_cni0_blocks_naming_it(unit):
    """169.254.x.y as avahi-autoipd or systemd-networkd add it (scope link):
    the kernel lists it before the gateway, and the bridge plugin refuses
    every new pod. It is not flannel's to take off."""
    unit.machine.bridge("10.1.48.1/24", "169.254.7.9/16 scope link", ports=1)
    deployed(unit, subnet="10.1.48.1/24")
    assert unit.status == ("blocked", "cni0 holds 169.254.7.9/16, which is not flannel's: the "
                                      "bridge plugin refuses every new pod until it goes "
                                      "(ip addr del 169.254.7.9/16 dev cni0)")
    assert "169.254.7.9/16 scope link" in unit.machine.links["cni0"].addresses
    unit.machine.links["cni0"].addresses.remove("169.254.7.9/16 scope link")
    unit.hook("update-status")
    assert unit.status == ("active", "Flannel subnet 10.1.48.1/24")


def test_a_gateway_of_an_earlier_cidr_is_flannel_s_by_host_local_s_table(unit):
    """The cidr changed while the unit was away: the old gateway is in no
    network etcd holds now, but host-local handed out an address there on
    flannel's network."""
    table = unit.paths.host_local_tables / "CDK-flannel-network"
    table.mkdir(parents=True)
    (table / "last_reserved_ip.0").write_text("10.7.29.5")
    unit.machine.bridge("10.7.29.1/24", ports=1)
    deployed(unit, subnet="10.1.48.1/24")
    assert unit.machine.links["cni0"].addresses == []
    assert unit.status[0] == "active"


def test_flannel_s_own_plugin_gone_is_installed_again_in_the_next_hook(unit):
    deployed(unit)
    unit.paths.cni_plugin.unlink()
    unit.hook("update-status")
    assert unit.paths.cni_plugin.exists()
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")
    assert unit.machine.started() == 1


@pytest.mark.parametrize("plugin", ["bridge", "host-local"])
def test_a_missing_plugin_blocks_naming_it_and_clears_when_it_is_back(unit, plugin):
    deployed(unit)
    path = unit.paths.cni_bin_dir / plugin
    data = path.read_bytes()
    path.unlink()
    unit.hook("update-status")
    assert unit.status == ("blocked", f'CNI plugin "{plugin}" missing from '
                                      f'{unit.paths.cni_bin_dir} (provided by the principal)')
    path.write_bytes(data)
    path.chmod(0o755)
    unit.hook("update-status")
    assert unit.status[0] == "active"


def test_a_dangling_default_link_before_flannel_s_conflist_blocks(unit):
    deployed(unit)
    link = unit.paths.cni_conf_dir / "05-default.conflist"
    link.symlink_to("gone.conflist")
    unit.hook("update-status")
    assert unit.status == ("blocked", f"CNI config {link} is a link to the missing gone.conflist: "
                                      "the container runtime starts no pod")
    link.unlink()
    link.symlink_to("10-flannel.conflist")
    unit.hook("update-status")
    assert unit.status[0] == "active"


def test_a_lease_of_another_network_is_negotiating_not_active(unit):
    deployed(unit)
    unit.lease("10.9.3.1/24", network="10.9.0.0/16")
    unit.hook("update-status")
    assert unit.status == ("waiting", "Negotiating flannel network subnet.")


def test_dual_stack_pods_get_the_mtu_flannel_v6_carries(unit):
    """The conflist gives pods flannel-v6.1's MTU on this interface (1500 less
    70), not flanneld's FLANNEL_MTU (less 50), and IPv4 alone leaves
    flanneld's to the plugin."""
    deployed(unit)
    assert "mtu" not in json.loads(unit.paths.cni_conflist.read_text())["plugins"][0]["delegate"]
    unit.machine.links["eth0"].addresses.append("fd00::11/64")
    configure(unit, ipv6_cidr="fd10:1::/56")
    delegate = json.loads(unit.paths.cni_conflist.read_text())["plugins"][0]["delegate"]
    assert delegate["mtu"] == 1430
