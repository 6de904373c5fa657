"""Options an operator sets, and the status they see: an invalid value is
blocked naming the option and leaves etcd and flanneld as they were; a
valid one recovers with no other action; the status shows the problem
an operator should act on first."""
import json

import pytest
from harness import NETWORK, configure, deployed


@pytest.mark.parametrize("options, status", [
    ({"cidr": "10.1.0.0/33"}, 'Invalid cidr: "10.1.0.0/33" is not an IPv4 network'),
    ({"vni": 0}, "Invalid vni: 0 is out of range"),
    ({"subnet_len": 8}, "Invalid subnet-len: 8 leaves cidr 10.1.0.0/16 fewer than four subnets"),
    # a network eth0 is on
    ({"cidr": "172.31.0.0/16"}, "Invalid cidr: 172.31.0.0/16 overlaps 172.31.254.0/24, the "
                                "network of eth0"),
    ({"iface": "eth7"}, 'Invalid iface: "eth7" is not an interface of this machine'),
    # interfaces that exist but cannot carry the overlay (see unfit_links)
    ({"iface": "fl-down"}, 'Invalid iface: "fl-down" is down'),
    ({"iface": "fl-noip"}, 'Invalid iface: "fl-noip" has no IPv4 address'),
    ({"iface": "lo"}, 'Invalid iface: "lo" is the loopback interface'),
    ({"iface": "fd00:77::1"}, 'Invalid iface: "fd00:77::1" is an IPv6 address'),
    ({"mtu": 9000}, "Invalid mtu: 9000 is more than the MTU of eth0 (1500)"),
])
def test_an_invalid_option_is_blocked_by_name_and_changes_nothing(unit, options, status):
    unfit_links(unit)
    deployed(unit)
    config = unit.etcd_values()[f"{NETWORK}/config"]
    configure(unit, **options)
    state, message = unit.status
    assert state == "blocked" and message.startswith(status), unit.status
    assert unit.etcd_values()[f"{NETWORK}/config"] == config
    assert unit.machine.started() == 1
    configure(unit, cidr="10.1.0.0/16", vni=1, subnet_len=24, iface="", mtu=0)
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")
    assert unit.machine.started() == 1


def unfit_links(unit) -> None:
    """fl-down: an IPv4 address on a link that is down; fl-noip: up, with an
    IPv6 address only."""
    link = type(unit.machine.links["eth0"])
    unit.machine.links["fl-down"] = link("fl-down", addresses=["192.168.77.1/24"], up=False)
    unit.machine.links["fl-noip"] = link("fl-noip", addresses=["fd00:77::1/64"])


@pytest.mark.parametrize("published, kind", [
    # rendered raw into ExecStart, this would be a line of its own in the unit file
    ("{good}\nExecStartPre=/bin/touch /flannel-pwned", "newline"),
    # rendered raw, these would be extra flanneld flags
    ("{good} -etcd-prefix=/elsewhere", "space"),
])
def test_malformed_etcd_relation_data_waits_and_reaches_no_unit_file(unit, published, kind):
    """Relation data is input: an etcd connection string that is not a list
    of https://host:port is a waiting status naming the relation; the unit
    file and flanneld stay as they were, and recover when etcd publishes a
    good one again."""
    etcd, _ = deployed(unit)
    unit_file = unit.paths.service_file.read_text()
    data = unit.juju.relations[etcd].units["etcd/0"]
    good = data["connection_string"]
    data["connection_string"] = published.format(good=good)
    unit.hook("etcd-relation-changed", etcd, "etcd/0")
    state, message = unit.status
    assert state == "waiting", unit.status
    assert message.startswith("etcd relation: connection string") and \
        "not https://host:port" in message, message
    assert unit.paths.service_file.read_text() == unit_file
    assert unit.machine.started() == 1
    data["connection_string"] = good
    unit.hook("etcd-relation-changed", etcd, "etcd/0")
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")
    assert unit.machine.started() == 1


def test_a_new_network_is_written_flanneld_restarts_and_the_principal_hears_it(unit):
    _, cni = deployed(unit)
    unit.flanneld_leases("10.3.7.1/24")
    configure(unit, cidr="10.3.0.0/16", ipv6_cidr="")
    assert json.loads(unit.etcd_values()[f"{NETWORK}/config"])["Network"] == "10.3.0.0/16"
    assert unit.machine.started() == 2
    assert unit.juju.relations[cni].local["cidr"] == "10.3.0.0/16"
    assert unit.status == ("active", "Flannel subnet 10.3.7.1/24")


def test_dual_stack_is_published_ipv4_first(unit):
    unit.machine.links["eth0"].addresses.append("fdf1:31:254::11/64")
    _, cni = deployed(unit)
    unit.flanneld_leases("10.1.52.1/24")
    configure(unit, ipv6_cidr="fd10:1::/56")
    assert unit.juju.relations[cni].local["cidr"] == "10.1.0.0/16,fd10:1::/56"
    config = json.loads(unit.etcd_values()[f"{NETWORK}/config"])
    assert (config["EnableIPv6"], config["IPv6Network"], config["IPv6SubnetLen"]) == \
        (True, "fd10:1::/56", 64)


def test_ipv6_without_a_global_address_on_the_interface_is_blocked(unit):
    deployed(unit)
    configure(unit, ipv6_cidr="fd10:1::/56")
    assert unit.status[0] == "blocked"
    assert unit.status[1].startswith("Invalid ipv6-cidr: IPv6 needs a global IPv6 address on eth0")


def test_a_backend_change_under_leases_is_refused_and_the_network_kept(unit):
    deployed(unit)
    configure(unit, backend="host-gw")
    assert unit.status == ("blocked", "Invalid backend: cannot change from vxlan to host-gw "
                                      "while 1 node holds a lease; set backend back to vxlan, "
                                      "or remove flannel from every node (each unit releases "
                                      "its lease as it stops) and add it back")
    assert json.loads(unit.etcd_values()[f"{NETWORK}/config"])["Backend"]["Type"] == "vxlan"
    configure(unit, backend="vxlan")
    assert unit.status[0] == "active"


def test_a_damaged_install_record_outranks_every_other_problem(unit):
    deployed(unit)
    record = unit.charm.parent / "flannel-install-record" / "record.json"
    record.write_text("{not json")
    configure(unit, cidr="bogus")
    state, message = unit.status
    assert state == "blocked" and message.startswith(f"Install record {record}")
    assert message.endswith("no file is changed; remove and re-add flannel "
                            "(unproven files stay)")
    assert "flannel.record-damaged" in unit.flags


def test_without_the_resource_the_unit_is_blocked_and_installs_once_it_is_there(unit):
    path = unit.juju.resources.pop("flannel-amd64")
    unit.hook("install")
    assert unit.status == ("blocked", "Missing resource flannel-amd64: attach it with juju "
                                      "attach-resource")
    unit.juju.resources["flannel-amd64"] = path
    unit.hook("upgrade-charm")
    assert "flannel.installed" in unit.flags
    assert unit.status == ("blocked", "Waiting for etcd relation.")


def test_a_cidr_over_the_control_plane_s_service_cidr_is_refused_and_recorded_for_all(unit):
    """Only kubernetes-control-plane publishes service-cidr, to its own
    flannel unit: the unit records it in etcd, where the units beside the
    workers read it, and a cidr over it is refused before anything is
    written."""
    unit.flanneld_leases()
    unit.hook("install")
    etcd = unit.relate_etcd()
    unit.hook("etcd-relation-changed", etcd, "etcd/0")
    cni = unit.relate_cni("kubernetes-control-plane", **{"service-cidr": "10.152.183.0/24"})
    unit.hook("cni-relation-changed", cni, "kubernetes-control-plane/0")
    assert unit.etcd_values()[f"{NETWORK}/service-cidr"] == "10.152.183.0/24"
    config = unit.etcd_values()[f"{NETWORK}/config"]
    configure(unit, cidr="10.152.0.0/16")
    assert unit.status == ("blocked", "Invalid cidr: 10.152.0.0/16 overlaps the Kubernetes "
                                      "service-cidr 10.152.183.0/24 the control plane "
                                      "publishes; use a range outside it")
    assert unit.etcd_values()[f"{NETWORK}/config"] == config
    assert unit.machine.started() == 1
