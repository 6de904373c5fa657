"""Two kubernetes-worker machines with flannel, shared by this module's tests.

The deployment is made once (module fixture `two`, the reactive worker of the
bug report); each test asserts only what it changes or observes itself,
starting from whatever valid state the previous test left (every unit
active), so any of them can run alone. The user's remove/add scenario
itself is test_back_after_a_day_away (each worker generation, every road);
the ops worker re-extracting its plugins, test_refresh_from_the_old_charm.
"""
from __future__ import annotations

import contextlib
import ipaddress
import shutil
import time

import pytest
from functional_kit import (all_plugin_bytes, deploy_and_wait, member, plugin_differences,
                            pods_everywhere, repack_resource, wait_past_restart_grace)

from sandbox.cluster import SUBNET_ENV
from sandbox.waiting import wait_for

# the module's tests share its cluster(s): one pytest-xdist worker runs them all
pytestmark = [pytest.mark.functional, pytest.mark.xdist_group("two_machines_everyday_operations")]

MACHINES = ("m1", "m2")
FLANNELD_JOURNAL = "/var/log/journal/flannel.service.log"   # the sandbox's journal


@pytest.fixture(scope="module")
def two(open_cluster):
    with open_cluster("two machines", workers=2) as cluster:
        unfit_interfaces(cluster)
        cluster.worker_plugins_before = deploy_and_wait(cluster)
        yield cluster


def assert_ping_both_ways(a, b):
    assert a.ping(b.address), f"{a.name} ({a.address}) on {a.machine.name} cannot reach " \
        f"{b.name} ({b.address}) on {b.machine.name}"
    assert b.ping(a.address), f"{b.name} ({b.address}) on {b.machine.name} cannot reach " \
        f"{a.name} ({a.address}) on {a.machine.name}"


def subnets(cluster):
    return {m: cluster.subnet_env(m) for m in MACHINES}


# --- 2. pod-to-pod traffic across the two machines ---------------------------------------

def test_pods_ping_across_machines_over_vxlan(two):
    vni = two.network_config()["Backend"].get("VNI", 1)   # 1 unless a test changed it
    with two.timings.phase("pods ping across machines over vxlan", two.say):
        for m in MACHINES:
            links = two.vxlan_links(m)
            assert list(links) == [f"flannel.{vni}"], \
                f"{m}: flannel's vxlan devices {links}; all links {two.machines[m].links()}"
            assert links[f"flannel.{vni}"]["vni"] == vni
            assert links[f"flannel.{vni}"]["local"] == two.machines[m].address
        pods = pods_everywhere(two)
        for m, pod in pods.items():
            subnet = ipaddress.ip_interface(two.subnet_env(m)["FLANNEL_SUBNET"]).network
            assert ipaddress.ip_address(pod.address) in subnet, \
                f"pod {pod.address} on {m} is outside the machine's flannel subnet {subnet}"
        assert pods["m1"].address != pods["m2"].address
        assert_ping_both_ways(pods["m1"], pods["m2"])


def test_a_garbled_subnet_env_fails_no_hook(two):
    """subnet.env is flanneld's: a garbled one (a hand edit, a full /run)
    is no lease, and no reason for a hook to die with a traceback."""
    machine, unit = two.machines["m2"], two.unit_on("m2")
    good = machine.read_file(SUBNET_ENV)
    garbled = good.replace(b"FLANNEL_MTU=", b"FLANNEL_MTU=many")
    hooks = len(two.controller.hook_log)
    machine.write_file(SUBNET_ENV, garbled)
    try:
        two.controller.update_status("flannel")
        two.settle()
        failed = [(r.unit, r.hook) for r in two.controller.hook_log[hooks:] if not r.ok]
        assert failed == []
        assert two.workload(unit) == ("waiting", "Negotiating flannel network subnet.")
    finally:
        machine.write_file(SUBNET_ENV, good)
    assert two.wait_for_flannel(timeout=60)[unit].startswith("Flannel subnet ")


# --- 3. configuration ---------------------------------------------------------------

def test_cidr_change_reaches_etcd_flanneld_and_new_pods_without_reboot(two):
    current = ipaddress.ip_network(two.network_config()["Network"])
    new = "10.3.0.0/16" if current != ipaddress.ip_network("10.3.0.0/16") else "10.4.0.0/16"
    with two.timings.phase(f"juju config flannel cidr={new}", two.say):
        two.configure(cidr=new)
        two.wait_for_flannel(timeout=120)
    assert two.network_config()["Network"] == new
    for m, env in subnets(two).items():
        assert env.get("FLANNEL_NETWORK") == new, f"{m} subnet.env: {env}"
        assert ipaddress.ip_interface(env["FLANNEL_SUBNET"]).network.subnet_of(
            ipaddress.ip_network(new)), f"{m} subnet.env: {env}"
    with two.timings.phase("new pods in the new network", two.say):
        pods = pods_everywhere(two)
        for m, pod in pods.items():
            assert ipaddress.ip_address(pod.address) in ipaddress.ip_network(new), \
                f"pod on {m} got {pod.address}, outside the new cidr {new}"
        assert_ping_both_ways(pods["m1"], pods["m2"])


def test_vni_and_port_change_reach_etcd_and_flanneld(two):
    backend = two.network_config()["Backend"]
    vni = 4097 if backend.get("VNI") != 4097 else 4098
    port = 8999 if backend.get("Port") != 8999 else 9000
    with two.timings.phase(f"juju config flannel vni={vni} port={port}", two.say):
        two.configure(vni=vni, port=port)
        two.wait_for_flannel(timeout=120)
    backend = two.network_config()["Backend"]
    assert (backend.get("VNI"), backend.get("Port")) == (vni, port), backend
    for m in MACHINES:
        # flanneld names its device after the VNI; the old one must not linger.
        links = two.vxlan_links(m)
        assert list(links) == [f"flannel.{vni}"], f"{m}: flannel's vxlan devices {links}"
        link = links[f"flannel.{vni}"]
        assert (link["vni"], link["port"]) == (vni, port), f"{m} flannel.{vni}: {link}"
    with two.timings.phase("new pods over the new vxlan", two.say):
        pods = pods_everywhere(two)
        assert_ping_both_ways(pods["m1"], pods["m2"])


def flannels_nft_tables(cluster, machine: str) -> list[str]:
    out = cluster.machines[machine].run(["nft", "list", "tables"]).stdout
    return sorted(line.strip() for line in out.splitlines() if "flannel" in line)


def flannels_iptables_chains(cluster, machine: str) -> list[str]:
    return [line for cmd in ("iptables-save", "ip6tables-save")
            for line in cluster.machines[machine].run([cmd]).stdout.splitlines()
            if "FLANNEL-" in line]


def assert_pods_reach_each_other_and_outside(cluster):
    pods = pods_everywhere(cluster)
    assert_ping_both_ways(pods["m1"], pods["m2"])
    for m, pod in pods.items():   # etcd's address has no route back to pods: masquerade
        assert pod.ping(cluster.etcd.host), f"a pod on {m} cannot reach {cluster.etcd.host}"


def test_nftables_mode_on_and_off_keeps_only_the_running_mode_s_rules(two):
    """enable-nftables: flanneld v0.27.4 writes its masquerade and forward
    rules in nft tables, and leaves its iptables chains (flushed or not);
    back in iptables mode its nft tables stay. The charm takes away the
    other mode's; pods reach each other and the outside in both modes."""
    with two.timings.phase("juju config flannel enable-nftables=true", two.say):
        two.configure(**{"enable-nftables": True})
        two.wait_for_flannel(timeout=120)
    for m in MACHINES:
        assert flannels_nft_tables(two, m) == ["table ip flannel-ipv4", "table ip6 flannel-ipv6"]
        ruleset = two.machines[m].run(["nft", "list", "table", "ip", "flannel-ipv4"]).stdout
        assert "masquerade" in ruleset, f"{m}: {ruleset}"
        assert flannels_iptables_chains(two, m) == [], m
    with two.timings.phase("pods in nftables mode", two.say):
        assert_pods_reach_each_other_and_outside(two)
    with two.timings.phase("juju config flannel enable-nftables=false", two.say):
        two.configure(**{"enable-nftables": False})
        two.wait_for_flannel(timeout=120)
    for m in MACHINES:
        assert flannels_nft_tables(two, m) == [], m
        assert any(":FLANNEL-POSTRTG" in line for line in flannels_iptables_chains(two, m)), m
    with two.timings.phase("pods in iptables mode", two.say):
        assert_pods_reach_each_other_and_outside(two)


def tx_checksum(cluster, machine: str, device: str) -> str:
    out = cluster.machines[machine].run(["ethtool", "-k", device]).stdout
    return next(line.split(":", 1)[1].strip() for line in out.splitlines()
                if line.strip().startswith("tx-checksum-ip-generic:"))


def test_vxlan_checksum_offload_follows_the_kernel_and_stays_off_where_wanted(two):
    """disable-vxlan-tx-checksumming=auto (the default): offload stays on
    where the kernel has Linux 5.7's NAT fix (the sandbox's), and goes off
    on a node whose kernel says 5.4; true turns it off everywhere, and
    flanneld v0.27.4 makes a deleted device anew (with offload on) that the
    next hook turns off again; auto puts it back on where the kernel is fixed."""
    device = f"flannel.{two.network_config()['Backend'].get('VNI', 1)}"
    for m in MACHINES:
        assert tx_checksum(two, m, device) == "on", m
    m1 = two.machines["m1"]
    m1.run_kernel("5.4.0-216-generic")
    two.controller.update_status("flannel")
    two.settle()
    assert (tx_checksum(two, "m1", device), tx_checksum(two, "m2", device)) == ("off", "on")
    with two.timings.phase("juju config flannel disable-vxlan-tx-checksumming=true", two.say):
        two.configure(**{"disable-vxlan-tx-checksumming": "true"})
    for m in MACHINES:
        assert tx_checksum(two, m, device) == "off", m
    m2 = two.machines["m2"]
    m2.run(["ip", "link", "delete", device])
    assert wait_for(lambda: device in m2.links(), 30), f"flanneld did not make {device} anew"
    # (the routes went with the device: update-status restarts flanneld for them)
    wait_past_restart_grace(two, "m2")
    two.controller.update_status("flannel")
    two.settle()
    assert tx_checksum(two, "m2", device) == "off"
    two.configure(**{"disable-vxlan-tx-checksumming": "auto"})
    assert (tx_checksum(two, "m1", device), tx_checksum(two, "m2", device)) == ("off", "on")
    m1.run(["umount", "/proc/sys/kernel/osrelease"])
    two.controller.update_status("flannel")
    two.settle()
    for m in MACHINES:
        assert tx_checksum(two, m, device) == "on", m
    assert two.wait_for_flannel(timeout=60)
    assert_ping_both_ways(*pods_everywhere(two).values())


# Every invalid option and the status it gives: tests/handlers; here two, on
# real machines with real flanneld and pods pinging through them.
INVALID = [
    # valid flannel config, but the machines' own network (172.31.254.0/24):
    # etcd would take it, and every unit would say active with a subnet of it
    ({"cidr": "172.31.0.0/16"}, "cidr"),
    # an interface that exists but cannot carry the overlay (the `two`
    # fixture's unfit_interfaces): flanneld would be restarted on it
    ({"iface": "fl-down"}, "iface"),
]
INVALID_IDS = [f"{o}={list(bad.values())[0]}" for bad, o in INVALID]


def unfit_interfaces(cluster):
    """On every machine, before flannel comes (part of the nodes as flannel
    finds them): fl-down, with an IPv4 address on a link that is down;
    fl-noip, up with only an IPv6 address (fd00:77::N). Made once, never
    deleted under a running flanneld: v0.27.4 was seen to exit (and be
    restarted by systemd) when such links went away under it."""
    for n, machine in enumerate(cluster.machines.values(), start=1):
        machine.run(["sh", "-ec",
                     "ip link add fl-down type veth peer name fl-downp\n"
                     f"ip addr add 192.168.77.{n}/24 dev fl-down\n"
                     "ip link add fl-noip type veth peer name fl-noipp\n"
                     "ip link set fl-noipp up && ip link set fl-noip up\n"
                     f"ip addr add fd00:77::{n}/64 dev fl-noip nodad"])
    cluster.remember_nodes()


@pytest.mark.parametrize("bad,option", INVALID, ids=INVALID_IDS)
def test_invalid_config_blocks_and_leaves_network_alone(two, bad, option):
    settled = two.network_config()
    assert ipaddress.ip_network(settled["Network"]).prefixlen == 16  # subnet-len 8 is invalid
    pids = {m: two.flanneld_pids(m) for m in MACHINES}
    pods = pods_everywhere(two)
    good = {k: two.controller.config_of("flannel").get(k) for k in bad}
    values = {k.replace("-", "_"): v for k, v in bad.items()}
    try:
        with two.timings.phase(f"juju config flannel {bad} (invalid)", two.say):
            two.configure(**values)
            messages = two.wait_for_flannel(timeout=120, state="blocked")
        for unit, message in messages.items():
            assert message.startswith(f"Invalid {option}:"), f"{unit}: {message!r}"
        assert two.network_config() == settled, "etcd's network config changed"
        assert {m: two.flanneld_pids(m) for m in MACHINES} == pids, "flanneld was restarted"
        assert_ping_both_ways(pods["m1"], pods["m2"])
    finally:  # the module's cluster goes on to the next test with a valid config
        with two.timings.phase(f"juju config flannel {good} (fixed)", two.say):
            two.configure(**{k.replace("-", "_"): v for k, v in good.items()})
            two.wait_for_flannel(timeout=120)
    assert two.network_config() == settled
    assert {m: two.flanneld_pids(m) for m in MACHINES} == pids, "flanneld was restarted"
    assert_ping_both_ways(pods["m1"], pods["m2"])


@contextlib.contextmanager
def etcd_publishes(two, **changes):
    """etcd publishes `changes` for the block (each unit waiting when it
    settles), then what it published before; flanneld must run on
    untouched through both. Yields unit -> its waiting message."""
    etcd = two.controller.emulated["etcd"]
    good = {key: getattr(etcd, key) for key in changes}
    pids = {m: two.flanneld_pids(m) for m in MACHINES}
    try:
        with two.timings.phase(f"etcd publishes {sorted(changes)} (malformed)", two.say):
            etcd.update(**{key: value.format(**good) for key, value in changes.items()})
            two.settle()
            yield two.wait_for_flannel(timeout=60, state="waiting")
        assert {m: two.flanneld_pids(m) for m in MACHINES} == pids, "flanneld was restarted"
    finally:
        etcd.update(**good)
        two.settle()
        two.wait_for_flannel(timeout=120)
    assert {m: two.flanneld_pids(m) for m in MACHINES} == pids, "flanneld was restarted"


def test_etcd_tls_material_that_is_not_pem_waits_and_keeps_the_client_files(two):
    key_file = "/etc/ssl/flannel/client-key.pem"
    keys = {m: two.machines[m].read_file(key_file) for m in MACHINES}
    with etcd_publishes(two, client_key="not a key") as messages:
        assert set(messages.values()) == {"etcd relation: the client key is not PEM"}, messages
        assert {m: two.machines[m].read_file(key_file) for m in MACHINES} == keys


# --- 4. etcd relation, upgrade-charm -------------------------------------------------------

def test_etcd_relation_removed_blocks_and_readded_recovers(two):
    pods = pods_everywhere(two)
    with two.timings.phase("remove-relation flannel:etcd etcd:db", two.say):
        two.remove_etcd_relation()
        messages = two.wait_for_flannel(timeout=60, state="blocked")
    assert set(messages.values()) == {"Waiting for etcd relation."}, messages
    assert_ping_both_ways(pods["m1"], pods["m2"])
    with two.timings.phase("add-relation flannel:etcd etcd:db", two.say):
        two.add_etcd_relation()
        messages = two.wait_for_flannel(timeout=120)
    assert all(m.startswith("Flannel subnet ") for m in messages.values()), messages
    new = pods_everywhere(two)
    assert_ping_both_ways(new["m1"], new["m2"])
    assert_ping_both_ways(pods["m1"], new["m2"])


def test_new_etcd_client_certificate_is_picked_up_and_flanneld_restarted(two):
    from sandbox.pki import make_client_cert
    pods = pods_everywhere(two)
    before = {m: two.flanneld_pids(m) for m in two.machines}
    pki = two.etcd.pki
    cert, key = make_client_cert(two.workdir / "pki", pki.ca_cert, pki.ca_key, name="rotated")
    with two.timings.phase("etcd publishes a new client certificate", two.say):
        two.controller.emulated["etcd"].update(client_cert=cert.read_text(),
                                               client_key=key.read_text())
        two.settle()
        messages = two.wait_for_flannel(timeout=60)
    assert all(m.startswith("Flannel subnet ") for m in messages.values()), messages
    for name, machine in two.machines.items():
        written = machine.read_file("/etc/ssl/flannel/client-cert.pem")
        assert written.strip() == cert.read_bytes().strip()
        assert two.flanneld_pids(name) and two.flanneld_pids(name) != before[name], name
    assert_ping_both_ways(pods["m1"], pods["m2"])


COMPACTED = b"required revision has been compacted"
FLANNELD = "/usr/local/bin/flanneld"


def compaction_played(two, pods, seconds: float) -> dict:
    """etcd compacts (two writes no flanneld watches first) and restarts, so
    that every flanneld's watch reconnects from the revision it last had;
    for `seconds` pods ping across the machines. What each machine's
    flanneld logged meanwhile, and whether the echoes and a new pod per
    machine made it."""
    sizes = {m: len(two.machines[m].read_file(FLANNELD_JOURNAL) or b"") for m in MACHINES}
    compacted_at = two.compact_etcd()
    with two.pinging(pods["m1"], pods["m2"].address) as during:
        two.restart_etcd()
        time.sleep(seconds)
    logged = {m: (two.machines[m].read_file(FLANNELD_JOURNAL) or b"")[sizes[m]:]
              for m in MACHINES}
    assert_ping_both_ways(*pods_everywhere(two).values())
    return {"compacted at": compacted_at, "echoes lost": during.lost, "echoes sent": during.sent,
            "bytes per minute": {m: len(text) * 60 / seconds for m, text in logged.items()},
            "compacted lines": {m: text.count(COMPACTED) for m, text in logged.items()}}


def test_etcd_compaction_under_each_flanneld(two, previous_resource):
    """etcd compacts its history and restarts (as the etcd charm's clusters
    do). flanneld v0.28.10 re-reads the leases once and carries on. flanneld
    v0.27.4 (the previous resource) retries the compacted revision without
    end (flannel-io/flannel#2470), a line every 5 s per watch once backed
    off: the pods keep talking and new pods start (nothing flanneld did is
    undone), but it would see no lease event again; the next update-status
    names it and restarts flanneld, which then logs no more of it. Without
    that step the v0.27.4 journal kept growing after update-status.
    It leaves the units on v0.27.4, where the next test starts."""
    pods = pods_everywhere(two)
    pids = {m: two.flanneld_pids(m) for m in MACHINES}
    current = compaction_played(two, pods, seconds=4)
    two.say(f"   flanneld v0.28.10 after compaction: {current}")
    assert current["echoes lost"] == 0, current
    assert all(n <= 4 for n in current["compacted lines"].values()), current
    two.controller.update_status("flannel")
    two.settle()
    assert {m: two.flanneld_pids(m) for m in MACHINES} == pids, "v0.28.10 was restarted"

    with two.timings.phase("upgrade-charm, the previous resource (v0.27.4)", two.say):
        two.upgrade_flannel(previous_resource)
        two.wait_for_flannel(timeout=120)
    pids = {m: two.flanneld_pids(m) for m in MACHINES}
    # 12 s: each of its two watches retries 8 times (backing off from 0.1 s to 5 s)
    previous = compaction_played(two, pods, seconds=12)
    two.say(f"   flanneld v0.27.4 after compaction: {previous}")
    assert previous["echoes lost"] == 0, previous
    assert all(n >= 10 for n in previous["compacted lines"].values()), previous
    for m in MACHINES:
        wait_past_restart_grace(two, m)
    two.controller.update_status("flannel")
    two.settle()
    for m in MACHINES:
        assert two.flanneld_pids(m) and two.flanneld_pids(m) != pids[m], \
            f"{m}: the charm did not restart the stuck flanneld"
        assert "retries a compacted revision without end (flannel-io/flannel#2470" in \
            two.controller.unit_log(two.unit_on(m)), f"{m}: the restart was not named"
    sizes = {m: len(two.machines[m].read_file(FLANNELD_JOURNAL) or b"") for m in MACHINES}
    time.sleep(3)   # a watch stuck again would retry within 0.1 s of its start
    for m in MACHINES:
        after = (two.machines[m].read_file(FLANNELD_JOURNAL) or b"")[sizes[m]:]
        assert COMPACTED not in after, f"{m}: flanneld still loops after its restart"
    assert two.failed_hooks() == [], two.failed_hooks()


def upgraded_while_pinging(two, pods, tarball, charm_dir, label: str):
    """`juju refresh` with `tarball` attached, pods on m1 pinging m2's
    throughout: the Pinger (sent, lost, ...)."""
    with two.timings.phase(label, two.say), \
            two.pinging(pods["m1"], pods["m2"].address) as during:
        two.upgrade_flannel(tarball, charm_dir=charm_dir)
        two.wait_for_flannel(timeout=120)
    two.say(f"   while {label}: {during}")
    return during


def test_upgrade_charm_restarts_flanneld_only_for_a_new_binary(
        two, built_charm, resource, previous_resource, tmp_path):
    """From the previous resource (flanneld v0.27.4, named in the status
    with its known defects): a newer build of the charm with a new resource
    revision whose flanneld is the same bytes leaves flanneld running and
    every echo answered; the current resource (v0.28.10) restarts flanneld
    once per node with every echo answered, and pods old and new talk. The
    failure this guards: after a refresh and a remove/add of the newer
    build, new pods got no address ("open /run/flannel/subnet.env: no such
    file or directory")."""
    if two.machines["m1"].read_file(FLANNELD) != member(previous_resource, "flanneld"):
        two.upgrade_flannel(previous_resource)   # run alone: the compaction test leaves it
        two.wait_for_flannel(timeout=120)
    newer = tmp_path / "flannel"
    shutil.copytree(built_charm, newer, symlinks=True)
    (newer / "NEWER-BUILD").write_text("a newer build of this charm\n")
    pods = pods_everywhere(two)
    pids = {m: two.flanneld_pids(m) for m in MACHINES}
    assert all(pids.values()), f"flanneld is not running: {pids}"

    same = repack_resource(previous_resource, tmp_path / "same", extra_member="NOTICE")
    assert same.read_bytes() != previous_resource.read_bytes()
    during = upgraded_while_pinging(two, pods, same, newer, "upgrade-charm, the same flanneld")
    # every echo answered (a reply a loaded host delays still counts)
    assert during.lost == 0, f"echoes lost while flanneld kept running: {during}"
    assert {m: two.flanneld_pids(m) for m in MACHINES} == pids, \
        "flanneld restarted although its binary did not change"
    for m in MACHINES:
        subnet = two.subnet_env(m)["FLANNEL_SUBNET"]
        assert two.workload(two.unit_on(m)) == (
            "active", f"Flannel subnet {subnet}; flanneld v0.27.4: its etcd watch loops after a "
                      "compaction; it panics recreating a lost vxlan device (fixed in v0.28.9)")

    starts = {m: flanneld_starts(two, m) for m in MACHINES}
    during = upgraded_while_pinging(two, pods, resource, newer, "refreshing v0.27.4 -> v0.28.10")
    assert during.lost == 0, f"echoes lost while flanneld was refreshed: {during}"
    for m in MACHINES:
        assert two.machines[m].read_file(FLANNELD) == member(resource, "flanneld"), \
            f"{m} does not run the new flanneld"
        assert flanneld_starts(two, m) == starts[m] + 1, f"{m}: flanneld started more than once"
        assert two.workload(two.unit_on(m))[1] == \
            f"Flannel subnet {two.subnet_env(m)['FLANNEL_SUBNET']}"
    assert_ping_both_ways(pods["m1"], pods["m2"])
    new = pods_everywhere(two)
    assert_ping_both_ways(new["m1"], new["m2"])
    assert plugin_differences(two.worker_plugins_before, all_plugin_bytes(two),
                              flannel_running=True) == []
    assert two.failed_hooks() == [], two.failed_hooks()


def flanneld_starts(cluster, machine: str) -> int:
    """How many times flanneld started on `machine` (its journal's start lines)."""
    journal = cluster.machines[machine].read_file(FLANNELD_JOURNAL) or b""
    return journal.count(b"Installing signal handlers")
