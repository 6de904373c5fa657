"""The status an operator sees, for each state the unit can be in."""
import ipaddress

import pytest

from charms.flannel.status import Observations, assess
from charms.flannel.subnet import parse_subnet_env

SUBNET_ENV = """FLANNEL_NETWORK=10.1.0.0/16
FLANNEL_SUBNET=10.1.52.1/24
FLANNEL_MTU=1450
FLANNEL_IPMASQ=true
"""
CIDR = ipaddress.IPv4Network("10.1.0.0/16")

HEALTHY = dict(installed=True, etcd_related=True, etcd_tls_ready=True,
               network_configured=True, service_active=True, cidr=CIDR,
               subnet=parse_subnet_env(SUBNET_ENV))


def test_healthy_unit_shows_its_subnet():
    status = assess(Observations(**HEALTHY))
    assert (status.state, status.message) == ("active", "Flannel subnet 10.1.52.1/24")


def test_without_etcd_the_unit_is_blocked_waiting_for_the_relation():
    seen = Observations(**{**HEALTHY, "etcd_related": False, "etcd_tls_ready": False})
    assert (assess(seen).state, assess(seen).message) == ("blocked", "Waiting for etcd relation.")


def test_before_flanneld_writes_subnet_env_the_unit_is_negotiating():
    seen = Observations(**{**HEALTHY, "subnet": None})
    assert (assess(seen).state, assess(seen).message) == (
        "waiting", "Negotiating flannel network subnet.")


def test_a_subnet_outside_a_new_cidr_is_not_reported_as_active():
    seen = Observations(**{**HEALTHY, "cidr": ipaddress.IPv4Network("10.9.0.0/16")})
    assert assess(seen).state == "waiting"


@pytest.mark.parametrize("override, state, text", [
    ({"resource_problem": "Missing resource flannel-amd64"}, "blocked", "Missing resource"),
    ({"config_problem": "Invalid vni: 0 is out of range"}, "blocked", "Invalid vni"),
    ({"etcd_problem": "etcd unreachable at https://10.0.0.5:2379"}, "waiting", "etcd unreachable"),
    ({"service_active": False}, "waiting", "flannel.service"),
    ({"series_upgrade": True}, "blocked", "Series upgrade in progress"),
    ({"installed": False}, "maintenance", "Installing"),
])
def test_each_problem_is_named_in_the_status(override, state, text):
    status = assess(Observations(**{**HEALTHY, **override}))
    assert status.state == state
    assert text in status.message


def test_bad_config_outranks_a_missing_etcd_relation():
    # The operator can fix the option now; the relation may be on its way.
    seen = Observations(**{**HEALTHY, "etcd_related": False,
                           "config_problem": "Invalid cidr: \"x\" is not an IPv4 network"})
    assert assess(seen).message.startswith("Invalid cidr")


def test_a_broken_cni_chain_is_blocked_with_the_plugin_named():
    """On main Observations had no cni_problem (TypeError) and a unit whose
    node could start no pod showed active."""
    problem = 'CNI plugin "bridge" missing from /opt/cni/bin (provided by the principal)'
    status = assess(Observations(**{**HEALTHY, "cni_problem": problem}))
    assert (status.state, status.message) == ("blocked", problem)


def test_a_flanneld_that_exited_after_its_start_is_failing_not_starting():
    """On main a crash-looping flanneld (a broken binary in the resource) left
    the unit at "Waiting for flannel.service to start.", hook after hook."""
    failing = assess(Observations(**{**HEALTHY, "service_active": False,
                                     "service_started": True}))
    assert failing.state == "waiting"
    assert "flannel.service is failing" in failing.message
    assert "journalctl -u flannel" in failing.message
    starting = assess(Observations(**{**HEALTHY, "service_active": False}))
    assert starting.message == "Waiting for flannel.service to start."


def test_a_damaged_install_record_blocks_and_names_the_record():
    problem = "Install record /var/lib/juju/agents/unit-flannel-0/flannel-install-record/" \
              "record.json is missing"
    for seen in (Observations(**HEALTHY, record_problem=problem),
                 Observations(record_problem=problem, series_upgrade=True)):
        status = assess(seen)
        assert status.state == "blocked"
        assert status.message == problem + ": no file is changed; remove and re-add flannel " \
            "(unproven files stay)"


DUAL_ENV = parse_subnet_env(SUBNET_ENV + "FLANNEL_IPV6_NETWORK=fd10:1::/56\n"
                                         "FLANNEL_IPV6_SUBNET=fd10:1:0:5::1/64\n")
IPV6_CIDR = ipaddress.IPv6Network("fd10:1::/56")


def test_a_dual_stack_unit_names_both_subnets():
    seen = Observations(**{**HEALTHY, "subnet": DUAL_ENV, "ipv6_cidr": IPV6_CIDR})
    assert (assess(seen).state, assess(seen).message) == (
        "active", "Flannel subnet 10.1.52.1/24, fd10:1:0:5::1/64")


@pytest.mark.parametrize("subnet, ipv6_cidr", [
    (parse_subnet_env(SUBNET_ENV), IPV6_CIDR),     # IPv6 just turned on: no IPv6 lease yet
    (DUAL_ENV, None),                              # just turned off: the old dual lease
    (DUAL_ENV, ipaddress.IPv6Network("fd20::/56")),   # another ipv6-cidr
])
def test_a_lease_of_the_other_ipv6_shape_is_negotiating_not_active(subnet, ipv6_cidr):
    """flanneld drops such a lease and leases anew (both families)."""
    seen = Observations(**{**HEALTHY, "subnet": subnet, "ipv6_cidr": ipv6_cidr})
    assert (assess(seen).state, assess(seen).message) == (
        "waiting", "Negotiating flannel network subnet.")


def test_flannel_s_old_gateway_still_on_cni0_is_waiting_not_active():
    pending = "cni0 still holds flannel's old gateway 10.1.29.1/24: no new pod starts"
    status = assess(Observations(**HEALTHY, bridge_pending=pending))
    assert (status.state, status.message) == ("waiting", pending)


def test_an_address_on_cni0_that_is_not_flannel_s_blocks():
    foreign = "cni0 holds 192.168.9.1/24, which is not flannel's"
    status = assess(Observations(**HEALTHY, cni_problem=foreign, bridge_pending="x"))
    assert (status.state, status.message) == ("blocked", foreign)


def test_before_the_conflist_is_handed_to_the_principal_no_pod_can_start():
    """flanneld on its lease, etcd's hooks first: the cni relation's hooks
    have not run yet, so there is no flannel network config on the node."""
    status = assess(Observations(**HEALTHY, cni_configured=False))
    assert (status.state, status.message) == ("waiting",
                                              "Waiting for the principal on the cni relation.")
