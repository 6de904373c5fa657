"""The test network: isolated, unrouted, and gone without a trace."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox import network as netmod
from sandbox.network import TestNetwork, cleanup_stale, list_netns, ping_from_netns, run
from sandbox.waiting import wait_for

pytestmark = pytest.mark.sandbox
ROOT = Path(__file__).resolve().parents[2]


def root_ns_addresses() -> set[str]:
    out = json.loads(run(["ip", "-j", "addr", "show"]).stdout)
    return {a["local"] for link in out for a in link.get("addr_info", [])}


def test_attach_addresses_and_reachability(test_network):
    net = test_network
    etcd_ns = net.netns_for("etcd")
    m1 = net.attach("m1", kind="machine")
    m2 = net.attach("m2", kind="machine")
    assert net.netns_for("etcd") == etcd_ns == f"{net.prefix}etcd"
    assert net.address_of("etcd") == "172.31.254.2"
    assert (m1.address, m2.address) == ("172.31.254.11", "172.31.254.12")
    # (tolerant counts: a loaded 2-core host may drop the odd echo's deadline)
    assert ping_from_netns(m1.netns, m2.address, count=3, wait=1.0) >= 2
    assert ping_from_netns(m2.netns, net.address_of("etcd"), count=3, wait=1.0) >= 1
    # Nothing routed: no default route, and the root namespace has no
    # address and no link on the segment.
    for ns in (etcd_ns, m1.netns, m2.netns):
        routes = json.loads(run(["ip", "-n", ns, "-j", "route", "show"]).stdout)
        assert [r["dst"] for r in routes] == [str(net.subnet)]
        assert run(["ip", "-n", ns, "route", "get", "1.1.1.1"], check=False).returncode != 0
    subnet = ipaddress.ip_network(net.subnet)
    assert not [a for a in root_ns_addresses() if ipaddress.ip_address(a) in subnet]
    assert "port1" not in run(["ip", "link", "show"]).stdout


def test_a_routed_segment_is_one_hop_behind_the_router(test_network):
    net = test_network
    m1 = net.attach("m1", kind="machine")
    net.netns_for("etcd")
    seg = net.add_routed_segment()
    m3 = net.attach("m3", kind="machine", segment="routed")
    assert seg.subnet == ipaddress.ip_network(netmod.ROUTED_SUBNET)
    assert ipaddress.ip_address(m3.address) in seg.subnet
    router = net.attachment(netmod.ROUTER)
    # both ways, etcd included, through the router: m1 and etcd got their
    # route when the segment came, m3 when it was attached
    assert ping_from_netns(m1.netns, m3.address, count=3, wait=1.0) >= 2
    assert ping_from_netns(m3.netns, net.address_of("etcd"), count=3, wait=1.0) >= 2
    [to_m3] = json.loads(run(["ip", "-n", m1.netns, "-j", "route", "get", m3.address]).stdout)
    assert to_m3["gateway"] == router.address
    [to_m1] = json.loads(run(["ip", "-n", m3.netns, "-j", "route", "get", m1.address]).stdout)
    assert to_m1["gateway"] == seg.gateway
    # still nothing beyond the two segments
    assert run(["ip", "-n", m3.netns, "route", "get", "1.1.1.1"], check=False).returncode != 0


# Answers ICMP echoes after argv[1] seconds (from inside a namespace whose
# kernel does not answer them itself).
LATE_RESPONDER = r"""
import select, socket, struct, sys, time
delay = float(sys.argv[1])
sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
due = []
print("ready", flush=True)
while True:
    wait = max(0.0, due[0][0] - time.monotonic()) if due else None
    if select.select([sock], [], [], wait)[0]:
        data, addr = sock.recvfrom(2048)
        icmp = data[(data[0] & 0x0f) * 4:]
        if icmp[0] == 8:
            reply = b"\0\0\0\0" + icmp[4:]
            reply = reply[:2] + struct.pack("!H", csum(reply)) + reply[4:]
            due.append((time.monotonic() + delay, reply, addr))
    while due and due[0][0] <= time.monotonic():
        _, reply, addr = due.pop(0)
        sock.sendto(reply, addr)
"""


def test_a_pinger_counts_late_replies_and_outages(test_network):
    """Cluster.pinging's Pinger: a reply a slow path delays is answered, not
    lost; an echo dropped on the way is lost, and the outage is measured."""
    from sandbox.cluster import Pinger
    net = test_network
    m1, m2 = net.attach("m1", kind="machine"), net.attach("m2", kind="machine")
    # m2 answers every echo 1.5 s late (the kernel's own replies off, a
    # responder of ours instead): past a 1 s deadline, yet answered
    run(["ip", "netns", "exec", m2.netns, "sysctl", "-q", "net.ipv4.icmp_echo_ignore_all=1"])
    responder = subprocess.Popen(["ip", "netns", "exec", m2.netns, sys.executable, "-c",
                                  LATE_RESPONDER, "1.5"], stdout=subprocess.PIPE, text=True)
    try:
        assert responder.stdout.readline() == "ready\n"
        late = Pinger(m1.netns, m2.address, interval=0.2)
        late.start()
        wait_for(lambda: late.sent >= 5, 30, interval=0.05)
        late.stop()
    finally:
        responder.kill()
        responder.wait()
    assert late.sent >= 5 and late.lost == 0, late
    run(["ip", "netns", "exec", m2.netns, "sysctl", "-q", "net.ipv4.icmp_echo_ignore_all=0"])
    cut = Pinger(m1.netns, m2.address, interval=0.2)
    cut.start()
    wait_for(lambda: cut.answered >= 3, 30, interval=0.05)
    drop = ["ip", "netns", "exec", m2.netns, "iptables", "-I", "INPUT", "-p", "icmp", "-j", "DROP"]
    run(drop)
    dropped = cut.sent
    wait_for(lambda: cut.sent >= dropped + 5, 30, interval=0.05)
    run(["ip", "netns", "exec", m2.netns, "iptables", "-D", *drop[6:]])
    wait_for(lambda: cut.answered >= dropped + 2, 30, interval=0.05)
    cut.stop()
    assert cut.lost >= 4 and cut.longest_outage >= 4, cut
    assert cut.answered >= 5, cut


def test_destroy_leaves_nothing(sandbox_host):
    net = TestNetwork().create()
    net.attach("m1", kind="machine")
    sleeper = subprocess.Popen(["nsenter", f"--net=/run/netns/{net.prefix}m1", "sleep", "300"])
    # destroy() kills what is in the namespace when it looks; wait until the
    # sleeper is in it, or a slow nsenter joins after the scan and outlives it.
    deadline = time.monotonic() + 10
    while sleeper.pid not in netmod.netns_pids(f"{net.prefix}m1"):
        assert time.monotonic() < deadline, "nsenter never joined the namespace"
        time.sleep(0.02)
    net.destroy()
    assert sleeper.wait(timeout=10) == -signal.SIGTERM
    # (only our own names: other runs may make and remove theirs meanwhile)
    assert not [n for n in list_netns() if n.startswith(net.prefix)]
    assert not (netmod.state_root() / "owners" / f"{net.tag}.json").exists()


def test_two_networks_are_separate(sandbox_host):
    with TestNetwork() as a, TestNetwork() as b:
        ma = a.attach("m1", kind="machine")
        mb = b.attach("m1", kind="machine")
        assert ma.address == mb.address
        b.detach("m1")
        # a's m1 cannot see b's segment: pinging its own address from b's
        # other namespace fails, a's stays fine.
        ob = b.attach("other")
        assert ping_from_netns(ob.netns, ma.address, count=1, wait=0.5) == 0
        oa = a.attach("other")
        assert ping_from_netns(oa.netns, ma.address, count=3, wait=1.0) >= 1


def test_cleanup_stale_after_a_crash(sandbox_host):
    """A run killed with SIGKILL leaves namespaces, processes and state;
    cleanup_stale removes them all, and spares live networks."""
    script = f"""
import sys, time, subprocess
sys.path.insert(0, {str(ROOT)!r})
from sandbox.network import TestNetwork
from sandbox.machine import Machine
net = TestNetwork().create()
m = Machine("m1", net).start()
m.popen(["sleep", "300"])
print(net.tag, m.holder_pid, flush=True)
time.sleep(300)
"""
    with TestNetwork() as live:
        live.attach("m1", kind="machine")
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        tag, holder = proc.stdout.readline().split()
        proc.kill()
        proc.wait()
        stale = [n for n in list_netns() if n.startswith(f"flsb-{tag}-")]
        assert sorted(stale) == [f"flsb-{tag}-m1", f"flsb-{tag}-switch"]
        assert os.path.exists(f"/proc/{holder}")
        removed = cleanup_stale()
        assert f"netns flsb-{tag}-m1" in removed
        assert not [n for n in list_netns() if n.startswith(f"flsb-{tag}-")]
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/{holder}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{holder}")
        assert not (netmod.state_root() / f"flsb-{tag}-m1").exists()
        assert f"{live.prefix}m1" in list_netns()
