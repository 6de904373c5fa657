"""How sandbox.conformance reads ginkgo's JSON report: which specs count, and
when a run is a pass (fast: no cluster)."""
from __future__ import annotations

import json
import re

from sandbox.conformance import FAST_FOCUS, SPEC_END, Report, read_report


def spec(texts, leaf, state, seconds=0.0, failure="", node_type="It") -> dict:
    """One SpecReport as ginkgo v2's --json-report writes it."""
    return {"ContainerHierarchyTexts": texts, "LeafNodeText": leaf, "LeafNodeType": node_type,
            "State": state, "RunTime": int(seconds * 1e9),
            "Failure": {"Message": failure} if failure else None}


# ginkgo's report of a run over two processes: each runs the suite's set-up
REPORT = [{"SuiteDescription": "Kubernetes e2e suite", "SpecReports": [
    spec(None, "", "passed", node_type="SynchronizedBeforeSuite"),
    spec(None, "", "passed", node_type="SynchronizedBeforeSuite"),
    spec(["[sig-network] DNS"], "should provide DNS for services [Conformance]", "passed", 12.5),
    spec(["[sig-network] Services"], "should serve a basic endpoint from pods [Conformance]",
         "failed", 124.2, "service is not reachable within 2m0s timeout"),
    spec(["[sig-network] DNS"], "should provide DNS for the cluster [Provider:gce]", "skipped",
         0.03, "Only supported for providers [gce] (not local)"),
    spec(["[sig-storage] Secrets"], "should be immutable [Conformance]", "skipped"),
    spec(None, "", "passed", node_type="SynchronizedAfterSuite"),
]}]


def test_the_report_holds_what_ran_or_skipped_itself_not_what_the_focus_left_out(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(REPORT))
    specs = {s.name: s for s in read_report(path)}
    assert sorted(specs) == [
        "[sig-network] DNS should provide DNS for services [Conformance]",
        "[sig-network] DNS should provide DNS for the cluster [Provider:gce]",
        "[sig-network] Services should serve a basic endpoint from pods [Conformance]"]
    failed = specs["[sig-network] Services should serve a basic endpoint from pods [Conformance]"]
    assert (failed.state, failed.seconds) == ("failed", 124.2)
    assert "not reachable" in failed.message
    skipped = specs["[sig-network] DNS should provide DNS for the cluster [Provider:gce]"]
    assert skipped.state == "skipped" and "providers [gce]" in skipped.message


def test_a_run_passes_only_when_every_selected_spec_passed(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(REPORT))
    specs = read_report(path)
    assert not Report("etcd", specs, selected=3).passed          # one failed
    passing = [s for s in specs if s.state == "passed"]
    assert Report("etcd", passing, selected=1).passed
    assert not Report("etcd", passing, selected=2).passed       # one never ran
    assert not Report("etcd", passing, selected=1, exit_code=1).passed
    skipping = [s for s in specs if s.state == "skipped"]
    assert not Report("etcd", passing + skipping, selected=2).passed   # one skipped itself
    table = Report("etcd", specs, selected=4, seconds=130).table()
    assert "etcd: 1 passed, 1 failed, 1 skipped, 1 not run of 4 in 130 s" in table
    assert "Only supported for providers [gce]" in table


def test_a_failed_suite_set_up_is_one_failure_and_no_spec(tmp_path):
    """Each of ginkgo's processes reports the suite's set-up: a failure
    there is named once, fails the run, and counts as no spec's failure."""
    setup_failed = "SynchronizedBeforeSuite failed on Ginkgo parallel process #1"
    path = tmp_path / "report.json"
    path.write_text(json.dumps([{"SpecReports": [
        spec(None, "", "failed", failure=setup_failed, node_type="SynchronizedBeforeSuite"),
        spec(None, "", "failed", failure=setup_failed, node_type="SynchronizedBeforeSuite"),
        spec(["[sig-network] DNS"], "should provide DNS for services [Conformance]", "passed"),
        spec(["[sig-network] DNS"], "should resolve it one day [Conformance]", "pending"),
    ]}]))
    specs = read_report(path)
    assert [(s.name, s.kind) for s in specs if s.state == "failed"] == [
        ("[SynchronizedBeforeSuite]", "suite")]
    report = Report("etcd", specs, selected=1, exit_code=1)
    assert report.count("failed") == 0 and report.count("passed") == 1
    assert not report.passed
    assert setup_failed in report.table()


def test_ginkgo_spec_endings_are_read():
    assert SPEC_END.match("• [16.261 seconds]").group(2) == "16.261"
    assert SPEC_END.match("• [FAILED] [124.184 seconds]").group(1).strip() == "[FAILED]"
    assert SPEC_END.match("S [SKIPPED] [0.029 seconds]").group(3) == "0.029"
    assert SPEC_END.match("  STEP: Creating a kubernetes client") is None


def test_the_everyday_focus_is_the_four_granular_checks_and_a_service():
    names = [
        "[sig-network] Networking Granular Checks: Pods should function for intra-pod "
        "communication: http [Conformance] [NodeConformance]",
        "[sig-network] Networking Granular Checks: Pods should function for intra-pod "
        "communication: udp [Conformance] [NodeConformance]",
        "[sig-network] Networking Granular Checks: Pods should function for node-pod "
        "communication: http [LinuxOnly] [Conformance] [NodeConformance]",
        "[sig-network] Networking Granular Checks: Pods should function for node-pod "
        "communication: udp [LinuxOnly] [Conformance] [NodeConformance]",
        "[sig-network] Services should serve a basic endpoint from pods [Conformance]",
    ]
    others = [
        "[sig-network] Networking Granular Checks: Pods should function for intra-pod "
        "communication: sctp [LinuxOnly] [Feature:SCTPConnectivity]",
        "[sig-network] Services should serve multiport endpoints from pods [Conformance]",
        "[sig-network] DNS should provide DNS for the cluster [Conformance]",
    ]
    assert [n for n in names + others if re.search(FAST_FOCUS, n)] == names


class _Machine:
    def __init__(self, resolv_conf: bytes | None):
        self.resolv_conf = resolv_conf

    def read_file(self, path: str) -> bytes | None:
        assert path == "/etc/resolv.conf"
        return self.resolv_conf


def test_coredns_upstream_is_never_a_loopback_nameserver():
    """kubelet's resolvConf (what CoreDNS forwards to): a systemd-resolved
    machine's 127.0.0.53 would be CoreDNS itself, and its loop plugin stops
    it."""
    from sandbox.kubernetes import NO_UPSTREAM, _upstream_resolv_conf
    resolved = _upstream_resolv_conf(_Machine(b"nameserver 127.0.0.53\noptions edns0\n"))
    assert resolved.decode().splitlines() == ["options edns0", f"nameserver {NO_UPSTREAM}"]
    kept = _upstream_resolv_conf(_Machine(b"nameserver 10.255.255.53\nnameserver ::1\n"))
    assert kept.decode().splitlines() == ["nameserver 10.255.255.53"]
    assert _upstream_resolv_conf(_Machine(None)).decode() == f"nameserver {NO_UPSTREAM}\n"
