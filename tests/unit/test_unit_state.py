"""UnitState: what the charm remembers between hooks, in charmhelpers' own
unitdata store (a real sqlite file), and forgotten whole when flannel goes."""
import pytest
from charmhelpers.core.unitdata import Storage

from charms.flannel.facts.status import RECORDED, Problem
from charms.flannel.steps.unit_state import UnitState


def state(tmp_path) -> UnitState:
    return UnitState(Storage(str(tmp_path / "state.db")))


def test_what_a_hook_remembers_the_next_hook_reads(tmp_path):
    first = state(tmp_path)
    first.confirmed_network = {"Network": "10.1.0.0/16"}
    first.set_problem(Problem.ETCD, "cannot reach etcd: https://10.0.0.1:2379 (refused)")
    first.kv.flush()
    second = state(tmp_path)
    assert second.confirmed_network == {"Network": "10.1.0.0/16"}
    assert second.problem(Problem.ETCD).startswith("cannot reach etcd")
    assert second.problem(Problem.CIDR) is None and second.flanneld_inputs is None
    assert second.recorded_problems() == [
        (Problem.ETCD, "cannot reach etcd: https://10.0.0.1:2379 (refused)")]


def test_none_unsets_a_value_and_clears_a_problem(tmp_path):
    s = state(tmp_path)
    s.flanneld_inputs = "digest"
    s.flanneld_inputs = None
    assert "flannel.service-inputs" not in s.kv.getrange("flannel.")
    s.set_problem(Problem.RECORD, "install record unreadable")
    s.set_problem(Problem.RECORD, None)
    assert s.problem(Problem.RECORD) is None
    assert s.recorded_problems() == []


def test_recorded_problems_come_in_the_order_an_operator_acts_on_them(tmp_path):
    s = state(tmp_path)
    s.set_problem(Problem.BRIDGE_STALE, "cni0 still holds flannel's old gateway 10.1.29.1/24")
    s.set_problem(Problem.ETCD, "cannot reach etcd")
    s.set_problem(Problem.RECORD, "Install record x is missing")
    assert [problem for problem, _ in s.recorded_problems()] == [
        Problem.RECORD, Problem.ETCD, Problem.BRIDGE_STALE]


@pytest.mark.parametrize("problem", [p for p in Problem if p not in RECORDED])
def test_a_problem_every_hook_sees_afresh_is_never_recorded(tmp_path, problem):
    """A recorded NO_ETCD (say) would outlive the relation that fixed it."""
    s = state(tmp_path)
    with pytest.raises(ValueError):
        s.set_problem(problem, "recorded")
    assert s.kv.getrange("flannel.problem.") == {}


def test_a_removed_unit_forgets_everything_flannel_remembered(tmp_path):
    """A unit added back on the machine later must start from nothing: an
    old digest would skip its flanneld's first start."""
    s = state(tmp_path)
    for key in UnitState.keys():
        s.kv.set(key, "something")
    for problem in RECORDED:
        s.set_problem(problem, "a problem")
    s.kv.set("other.layer", "kept")
    s.kv.set("flannel.flanneld-started", 1_000_000)   # an earlier revision's, retired
    s.forget()
    assert s.kv.getrange("flannel.") == {}
    assert s.recorded_problems() == []
    assert s.kv.get("other.layer") == "kept"


def test_a_unit_refreshed_from_the_previous_revision_reads_what_it_wrote(tmp_path):
    """The keys are the ones the revision before this module wrote (they
    lived in reactive/flannel.py): a renamed key would read as nothing after
    `juju refresh`, and e.g. a lost flanneld digest restarts every node's
    flanneld, a lost confirmed network re-publishes it."""
    previous = {"flannel.network-config": {"Network": "10.1.0.0/16"},
                "flannel.service-inputs": "d1", "flannel.network-inputs": "d2",
                "flannel.unit-file-inputs": "d3", "flannel.cni-inputs": "d4",
                "flannel.nrpe-inputs": "d5", "flannel.unit-file-loaded": "c1",
                "flannel.etcd-endpoints": "https://10.0.0.1:2379",
                "flannel.etcd-answered": "https://10.0.0.1:2379",
                "flannel.binding-interface": "eth0", "flannel.flanneld-iface": "eth0",
                "flannel.status": ["active", "Flannel subnet 10.1.52.1/24"],
                "flannel.config": {"cidr": "10.1.0.0/16"}, "flannel.cni-network-name": "cbr0"}
    # keys this revision added, which no earlier one wrote
    added = {"flannel.v2-network-seen", "flannel.v011-rules", "flannel.flanneld-restarts",
             "flannel.tx-checksum-turned-off", "flannel.offload-udev-rule-inputs",
             "flannel.flanneld-version", "flannel.lease-list", "flannel.registered-lease",
             "flannel.flanneld-process", "flannel.subnet-manager", "flannel.node-name",
             "flannel.subnet-manager-left", "flannel.relations"}
    s = state(tmp_path)
    for key, value in previous.items():
        s.kv.set(key, value)
    assert sorted(UnitState.keys()) == sorted(set(previous) | added)
    read = {name: getattr(s, name) for name in (
        "confirmed_network", "flanneld_inputs", "network_inputs", "unit_file_inputs",
        "cni_inputs", "nrpe_inputs", "unit_file_loaded", "etcd_endpoints", "etcd_answered",
        "binding_interface", "flanneld_iface", "status", "config", "cni_network_name")}
    assert sorted(map(str, read.values())) == sorted(map(str, previous.values()))


def test_the_problems_the_previous_revision_recorded_are_read_after_a_refresh(tmp_path):
    """The previous revision kept each problem under flannel.problem.<area>:
    a unit refreshed while blocked stays blocked with the same message."""
    previous = {"record": Problem.RECORD, "resource": Problem.RESOURCE, "cidr": Problem.CIDR,
                "network": Problem.NETWORK, "iface": Problem.IFACE, "mtu": Problem.MTU,
                "ipv6": Problem.IPV6, "etcd": Problem.ETCD, "bridge": Problem.BRIDGE,
                "bridge-stale": Problem.BRIDGE_STALE}
    # problems this revision added, which no earlier one recorded
    added = {Problem.COMMANDS, Problem.KERNEL, Problem.OFFLOAD, Problem.OUT_OF_SUBNETS,
             Problem.UNROUTABLE, Problem.RESTARTS, Problem.POD_CIDR, Problem.KUBE,
             Problem.KUBE_ACCESS, Problem.NODE}
    assert set(previous.values()) | added == set(RECORDED)
    s = state(tmp_path)
    for area in previous:
        s.kv.set(f"flannel.problem.{area}", f"the {area} problem")
    for area, problem in previous.items():
        assert s.problem(problem) == f"the {area} problem"
    assert len(s.recorded_problems()) == len(previous)
