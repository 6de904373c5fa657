"""adapters/pod_bridge.py: flannel's old gateways leave cni0, and nothing
else does.

The decisions are checked as plain functions; the rule they stand on (what
the bridge plugin refuses) is checked against Debian's real bridge plugin
in a network namespace, and the steps against a real bridge there."""
from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from pathlib import Path

import pytest
from unitkit import open_netns

from charms.flannel.adapters import node_files, pod_bridge
from charms.flannel.adapters.machine import Machine
from charms.flannel.adapters.pod_bridge import Bridge, FlannelsMarks

BRIDGE_PLUGIN = Path("/usr/lib/cni/bridge")
NET, NET6 = ipaddress.ip_network("10.1.0.0/16"), ipaddress.ip_network("fd10:1::/56")
MARKS = FlannelsMarks(networks=(NET, NET6))


def addr(text: str):
    return ipaddress.ip_interface(text)


def bridge(*addresses: str) -> Bridge:
    return Bridge("cni0", tuple(map(addr, addresses)), 1450)


# --- whose an address is, and what goes ------------------------------------------------

def test_the_gateway_of_an_earlier_lease_goes_and_the_lease_s_own_stays():
    verdict = pod_bridge.judge(bridge("10.1.29.1/24", "10.1.48.1/24"), MARKS,
                               [addr("10.1.48.1/24")])
    assert verdict.stale == (addr("10.1.29.1/24"),) and verdict.foreign == ()


def test_an_address_no_flannel_network_covers_is_never_taken_off():
    """A foreign IPv4 address stops the gateway (the bridge plugin's rule)
    and is named; a foreign IPv6 address of another network does not, and
    is left alone without a word."""
    verdict = pod_bridge.judge(bridge("192.168.9.1/24", "fd99::1/64", "10.1.48.1/24"), MARKS,
                               [addr("10.1.48.1/24"), addr("fd10:1:0:5::1/64")])
    assert verdict.stale == ()
    assert verdict.foreign == (addr("192.168.9.1/24"),)


def test_an_old_cidr_s_gateway_is_flannel_s_by_what_host_local_handed_out():
    """A unit added back after `cidr` changed while it was away knows only
    the new network: host-local's table of flannel's network (its
    last_reserved_ip, kept after the pods went) shows the old gateway is
    flannel's."""
    old = bridge("10.7.29.1/24")
    gateway = [addr("10.1.48.1/24")]
    assert pod_bridge.judge(old, MARKS, gateway).foreign == (addr("10.7.29.1/24"),)
    marked = MARKS.with_handed_out([ipaddress.ip_address("10.7.29.5")])
    assert pod_bridge.judge(old, marked, gateway).stale == (addr("10.7.29.1/24"),)


def test_an_earlier_ipv6_gateway_goes_too():
    """The bridge plugin takes a second IPv6 gateway beside it, but its
    route would send that subnet's traffic (another node's now) to cni0."""
    verdict = pod_bridge.judge(bridge("10.1.48.1/24", "fd10:1:0:5::1/64", "fd10:1:0:9::1/64"),
                               MARKS, [addr("10.1.48.1/24"), addr("fd10:1:0:9::1/64")])
    assert verdict.stale == (addr("fd10:1:0:5::1/64"),)


def test_before_the_lease_is_known_may_stay_keeps_what_pods_may_still_use():
    kept = pod_bridge.judge(bridge("10.1.29.1/24", "10.1.30.1/26"), MARKS, (),
                            may_stay=lambda a: a.network.prefixlen == 24)
    assert kept.stale == (addr("10.1.30.1/26"),)


@pytest.mark.parametrize("address, gateway, refused", [
    ("10.1.29.1/24", "10.1.48.1/24", True),        # any other IPv4 address
    ("192.168.9.1/24", "10.1.48.1/24", True),
    ("10.1.48.1/24", "10.1.48.1/24", False),       # the gateway itself
    ("fd10:1:0:5::1/64", "fd10:1:0:9::1/64", False),  # IPv6: other networks may stay
    ("fd10:1::1/56", "fd10:1:0:9::1/64", True),    # ... overlapping ones may not
    ("fd10:1:0:5::1/64", "10.1.48.1/24", False),   # the other family
])
def test_blocks_is_the_bridge_plugin_s_rule(address, gateway, refused):
    assert pod_bridge.blocks(addr(address), addr(gateway)) is refused


@pytest.mark.parametrize("held, subnet", [
    (["10.1.29.1/24"], "10.1.48.0/24"),
    (["192.168.9.1/24"], "10.1.48.0/24"),
    (["fd10:1:0:5::1/64"], "fd10:1:0:9::/64"),
    (["fd10:1::1/56"], "fd10:1:0:9::/64"),
    # the plugin reads the bridge's addresses in order and stops at the gateway
    (["10.1.48.1/24", "192.168.9.1/24"], "10.1.48.0/24"),
    (["192.168.9.1/24", "10.1.48.1/24"], "10.1.48.0/24"),
    # IPv4 link-local (avahi-autoipd, systemd-networkd): scope link sorts first
    (["169.254.7.9/16 scope link"], "10.1.48.0/24"),
    (["10.1.48.1/24", "169.254.7.9/16 scope link"], "10.1.48.0/24"),
    (["10.1.48.1/24", "169.254.7.9/16"], "10.1.48.0/24"),
])
def test_blocks_agrees_with_the_real_bridge_plugin(held, subnet, tmp_path):
    """Debian's bridge plugin (containernetworking-plugins) on a cni0 that
    holds each set of addresses, as the kernel lists them to read_bridge,
    asked for a pod of `subnet`: it refuses exactly when blocks() says so."""
    if not BRIDGE_PLUGIN.exists():
        pytest.skip("needs Debian's containernetworking-plugins")
    gateway = addr(str(next(ipaddress.ip_network(subnet).hosts())) + "/" + subnet.split("/")[1])
    with open_netns() as node, open_netns() as pod:
        node(["ip", "link", "add", "cni0", "type", "bridge"])
        for address in held:
            node(["ip", "addr", "add", *address.split(" ", 1)[:1], "dev", "cni0",
                  *address.split()[1:], *(["nodad"] if ":" in address else [])])
        shown = pod_bridge.read_bridge(Machine(runner=lambda argv, check, input=None:
                                               subprocess.run(["nsenter", f"--net={node.path}",
                                                               *argv], check=check, text=True,
                                                              capture_output=True)))
        error = _bridge_plugin_add(node, pod, subnet, tmp_path / "ipam")
    assert len(shown.addresses) == len(held)
    refused = any(pod_bridge.blocks(address, gateway, shown.addresses)
                  for address in shown.addresses)
    assert (error is not None) is refused, (shown.addresses, error)
    if error is not None:
        assert "already has an IP address different from" in error


def _bridge_plugin_add(node, pod, subnet: str, data_dir: Path):
    """ADD through the bridge plugin with host-local IPAM, run in `node`
    for a pod in `pod`; None if it worked, else the plugin's error."""
    config = {"cniVersion": "0.3.1", "name": "CDK-flannel-network", "type": "bridge",
              "bridge": "cni0", "isDefaultGateway": True,
              "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                       "dataDir": str(data_dir)}}
    env = dict(os.environ, CNI_COMMAND="ADD", CNI_CONTAINERID="pod", CNI_NETNS=pod.path,
               CNI_IFNAME="eth0", CNI_PATH=str(BRIDGE_PLUGIN.parent))
    try:
        node([str(BRIDGE_PLUGIN)], input=json.dumps(config), env=env)
    except subprocess.CalledProcessError as failed:
        return json.loads(failed.stdout or "{}").get("msg") or failed.stderr
    return None


def test_handed_out_reads_host_local_s_table(tmp_path):
    table = tmp_path / "CDK-flannel-network"
    table.mkdir()
    (table / "10.1.29.5").write_text("container\neth0")
    (table / "last_reserved_ip.0").write_text("10.7.3.9")
    (table / "last_reserved_ip.1").write_text("fd10:1:0:5::4")
    (table / "lock").write_text("")
    assert sorted(map(str, node_files.handed_out("CDK-flannel-network", tmp_path))) == \
        ["10.1.29.5", "10.7.3.9", "fd10:1:0:5::4"]
    assert node_files.handed_out("../etc", tmp_path) == ()
    assert node_files.handed_out("missing", tmp_path) == ()


# --- on a real bridge -------------------------------------------------------------------

def _addresses(node) -> set[str]:
    shown = json.loads(node.netns(["ip", "-j", "addr", "show", "dev", "cni0"]))
    return {f"{a['local']}/{a['prefixlen']}" for a in shown[0]["addr_info"]
            if a.get("scope") != "link"}


@pytest.fixture
def node(netns_machine):
    """A Machine in a namespace with a bridge the plugin made, no pod yet."""
    netns_machine.netns(["ip", "link", "add", "cni0", "type", "bridge"])
    netns_machine.netns(["ip", "link", "set", "cni0", "up"])
    return netns_machine


def _put(node, *addresses: str) -> None:
    for address in addresses:
        node.netns(["ip", "addr", "add", address, "dev", "cni0"]
                   + (["nodad"] if ":" in address else []))


def test_settle_on_lease_takes_flannel_s_old_gateways_off(node, tmp_path):
    _put(node, "10.1.29.1/24", "192.168.9.1/24", "10.1.48.1/24", "fd10:1:0:5::1/64")
    settled = pod_bridge.settle_on_lease([addr("10.1.48.1/24")], MARKS, lambda: "net",
                                         machine=node, tables_dir=tmp_path)
    assert set(map(str, settled.removed)) == {"10.1.29.1/24", "fd10:1:0:5::1/64"}
    assert _addresses(node) == {"10.1.48.1/24", "192.168.9.1/24"}
    # listed before the gateway: the bridge plugin stops there
    assert settled.foreign == (addr("192.168.9.1/24"),)
    assert "192.168.9.1/24" in settled.problem and "ip addr del" in settled.problem


def test_an_ipv4_link_local_address_on_cni0_is_seen_and_named(node, tmp_path):
    """169.254.x.y of scope link sorts before the gateway whenever it was
    added: the bridge plugin refuses every new pod (case 7 above)."""
    _put(node, "10.1.48.1/24")
    node.netns(["ip", "addr", "add", "169.254.7.9/16", "dev", "cni0", "scope", "link"])
    assert addr("169.254.7.9/16") in pod_bridge.read_bridge(node).addresses
    settled = pod_bridge.settle_on_lease([addr("10.1.48.1/24")], MARKS, lambda: "net",
                                         machine=node, tables_dir=tmp_path)
    assert settled.foreign == (addr("169.254.7.9/16"),) and not settled.removed
    assert settled.problem.startswith("cni0 holds 169.254.7.9/16, which is not flannel's")


def test_settle_on_lease_takes_an_old_cidr_s_gateway_host_local_s_table_names(node, tmp_path):
    """A unit added back after `cidr` changed while it was away: 10.7.29.1
    is in no network flannel serves, but flannel's CNI network handed out
    10.7.29.5, so it is flannel's old gateway and goes."""
    _put(node, "10.7.29.1/24")
    table = tmp_path / "CDK-flannel-network"
    table.mkdir()
    (table / "last_reserved_ip.0").write_text("10.7.29.5")
    settled = pod_bridge.settle_on_lease([addr("10.1.48.1/24")], MARKS,
                                         lambda: "CDK-flannel-network", machine=node,
                                         tables_dir=tmp_path)
    assert settled.removed == (addr("10.7.29.1/24"),) and settled.problem is None
    assert _addresses(node) == set()


def test_settle_on_lease_without_a_bridge_does_nothing(netns_machine, tmp_path):
    assert pod_bridge.settle_on_lease([addr("10.1.48.1/24")], MARKS, lambda: "net",
                                      machine=netns_machine, tables_dir=tmp_path) == \
        pod_bridge.Settled()
    assert pod_bridge.read_bridge(netns_machine) is None   # none made either


def test_before_start_with_no_lease_known_and_no_pod_every_flannel_address_goes(node, tmp_path):
    """A unit added back after its lease expired: flanneld will lease anew."""
    _put(node, "10.1.29.1/24", "192.168.9.1/24")
    done = pod_bridge.settle_before_start(MARKS, lambda: "net", could_be_gateway=lambda a: True,
                                          machine=node, tables_dir=tmp_path)
    assert done.removed == (addr("10.1.29.1/24"),)
    assert _addresses(node) == {"192.168.9.1/24"}


def test_before_start_pods_keep_a_gateway_flanneld_may_lease_again(node, tmp_path):
    _put(node, "10.1.29.1/24", "10.1.30.1/26")
    node.netns(["ip", "link", "add", "vethpod", "type", "veth", "peer", "name", "vethpodp"])
    node.netns(["ip", "link", "set", "vethpod", "master", "cni0"])
    done = pod_bridge.settle_before_start(
        MARKS, lambda: "net", could_be_gateway=lambda a: a.network.prefixlen == 24,
        pod_mtu=1400, machine=node, tables_dir=tmp_path)
    assert done.removed == (addr("10.1.30.1/26"),)
    assert done.mtu == (1500, 1400)
    assert _addresses(node) == {"10.1.29.1/24"}


def test_before_start_a_kept_lease_s_gateway_stays_and_a_dropped_one_goes(node, tmp_path):
    _put(node, "10.1.29.1/24")
    kept = pod_bridge.settle_before_start(MARKS, lambda: "net", kept=[addr("10.1.29.1/24")],
                                          machine=node, tables_dir=tmp_path)
    assert not kept and _addresses(node) == {"10.1.29.1/24"}
    dropped = pod_bridge.settle_before_start(MARKS, lambda: "net",
                                             dropped=[addr("10.1.29.1/24")],
                                             could_be_gateway=lambda a: True,
                                             machine=node, tables_dir=tmp_path)
    assert dropped.removed == (addr("10.1.29.1/24"),) and _addresses(node) == set()
