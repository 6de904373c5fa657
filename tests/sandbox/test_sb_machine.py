"""Machines: private trees, Ubuntu identity, systemctl, clean teardown."""

from __future__ import annotations

import os
import subprocess

import pytest

from sandbox.machine import Machine, resident_kib
from sandbox.waiting import wait_for
from sandbox.network import list_netns, process_alive, run, state_root

pytestmark = pytest.mark.sandbox

SLEEPER_UNIT = """\
[Unit]
Description=a daemon for the test
[Service]
ExecStart=/bin/sleep 3600
[Install]
WantedBy=multi-user.target
"""

PRIVATE = ["/opt/cni/bin/x", "/etc/cni/net.d/x", "/run/flannel/x", "/var/lib/cni/x",
           "/lib/systemd/system/x", "/etc/systemd/system/x", "/usr/local/bin/x",
           "/etc/ssl/flannel/x", "/var/lib/juju/x", "/etc/nagios/x"]


@pytest.fixture
def machines(test_network):
    with Machine("m1", test_network) as m1, Machine("m2", test_network) as m2:
        yield m1, m2


def test_private_trees(machines):
    m1, m2 = machines
    script = "; ".join(f"mkdir -p {os.path.dirname(p)} && echo m1 > {p}" for p in PRIVATE)
    m1.run(["sh", "-ec", script])
    for path in PRIVATE:
        assert m1.read_file(path) == b"m1\n", path
        assert m2.read_file(path) is None, path
        assert not os.path.exists(path), f"{path} leaked to the host"
        assert m1.upper_path(path).read_bytes() == b"m1\n"
    assert not os.path.exists("/opt/cni") and not os.path.exists("/etc/cni")
    # The host's files stay visible inside.
    assert m1.run(["cat", "/etc/debian_version"]).stdout == open("/etc/debian_version").read()
    # Written from the host side, seen inside only.
    m2.write_file("/opt/cni/bin/flannel", b"#!/bin/sh\n", 0o755)
    assert m2.run(["test", "-x", "/opt/cni/bin/flannel"]).returncode == 0
    assert m2.ls("/opt/cni/bin") == ["flannel"] and m1.ls("/opt/cni/bin") == ["x"]


def test_root_s_kube_directory_starts_empty_in_every_machine(machines):
    """Root's kubeconfig is what the machine's principal writes: the host's
    /root/.kube (kubectl's cache, an operator's config) is not seen inside."""
    m1, m2 = machines
    marker = f"/root/.kube/host-only-{os.getpid()}"
    open(marker, "w").close()
    try:
        assert m1.ls("/root/.kube") == [] and m2.ls("/root/.kube") == []
    finally:
        os.unlink(marker)
    m1.write_file("/root/.kube/config", b"m1\n", 0o600)
    assert m1.read_file("/root/.kube/config") == b"m1\n"
    assert m2.read_file("/root/.kube/config") is None
    assert not os.path.exists("/root/.kube/config") or \
        open("/root/.kube/config", "rb").read() != b"m1\n"


def test_ubuntu_identity_and_systemd_marks(machines):
    m1, _ = machines
    os_release = m1.run(["cat", "/etc/os-release"]).stdout
    assert "ID=ubuntu" in os_release and 'VERSION_ID="22.04"' in os_release
    assert "DISTRIB_ID=Ubuntu" in m1.read_file("/etc/lsb-release").decode()
    assert m1.run(["test", "-d", "/run/systemd/system"]).returncode == 0
    which = m1.run(["sh", "-c", "command -v systemctl"]).stdout.strip()
    assert which == "/usr/local/sbin/systemctl"
    assert b"ID=debian" in open("/etc/os-release", "rb").read()   # the host is untouched


def test_network_identity(machines):
    m1, m2 = machines
    assert m1.address == "172.31.254.11" and m2.address == "172.31.254.12"
    assert m1.links() == ["lo", "eth0"]
    addrs = m1.run(["ip", "-br", "-4", "addr", "show", "eth0"]).stdout
    assert "172.31.254.11/24" in addrs
    # sysfs is the machine's own
    assert sorted(m1.run(["ls", "/sys/class/net"]).stdout.split()) == ["eth0", "lo"]


def sleeps(machine, count: int, other_than=(), timeout: float = 30) -> list[int]:
    """The machine's `sleep` processes once there are `count` of them (none
    of other_than): systemctl returns once it forked, before the exec."""
    def found():
        return [p for p in machine.pids_of("sleep") if p not in other_than]
    return wait_for(lambda: len(found()) >= count and found(), timeout, 0.05) or found()


def test_systemctl_runs_units_inside_the_machine(machines):
    m1, m2 = machines
    m1.write_file("/lib/systemd/system/sleeper.service", SLEEPER_UNIT)
    assert not os.path.exists("/lib/systemd/system/sleeper.service")
    assert m1.systemctl("enable", "sleeper").returncode == 0
    assert m1.systemctl("start", "sleeper").returncode == 0
    (pid,) = sleeps(m1, 1)
    assert wait_for(lambda: m1.command_lines("sleep") == [["/bin/sleep", "3600"]], 10, 0.05), \
        m1.command_lines("sleep")
    assert m2.command_lines("sleep") == []
    assert resident_kib([pid]) > 0
    # It outlived systemctl, and lives in the machine's namespaces.
    assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{m1.netns}").st_ino
    assert os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink(f"/proc/{m1.holder_pid}/ns/mnt")
    assert m1.systemctl("is-active", "sleeper").stdout.strip() == "active"
    assert m2.systemctl("is-active", "sleeper").stdout.strip() != "active"
    assert m1.exists("/etc/systemd/system/multi-user.target.wants/sleeper.service")
    assert m1.systemctl("restart", "sleeper").returncode == 0
    (pid2,) = sleeps(m1, 1, other_than={pid})
    assert pid2 != pid and not process_alive(pid)
    assert m1.systemctl("stop", "sleeper").returncode == 0
    assert m1.pids_of("sleep") == []
    # a process gone counts for nothing
    assert resident_kib([pid, pid2]) == 0
    assert m1.systemctl("is-active", "sleeper").stdout.strip() != "active"
    assert m1.systemctl("disable", "sleeper").returncode == 0
    assert not m1.exists("/etc/systemd/system/multi-user.target.wants/sleeper.service")
    # systemctl3's logs stayed in the machine too
    assert not os.path.exists("/var/log/journal/sleeper.service.log")


def test_iptables_is_per_machine(machines):
    m1, m2 = machines
    rule = ["-t", "nat", "-A", "POSTROUTING", "-s", "10.99.0.0/16", "-j", "MASQUERADE"]
    m1.run(["iptables", *rule])
    assert "10.99.0.0/16" in m1.run(["iptables-save", "-t", "nat"]).stdout
    assert "10.99.0.0/16" not in m2.run(["iptables-save", "-t", "nat"]).stdout
    assert "10.99.0.0/16" not in run(["iptables-save", "-t", "nat"]).stdout


def test_host_made_netns_is_visible_inside(machines, test_network):
    m1, _ = machines
    name = m1.pod_prefix + "probe"
    run(["ip", "netns", "add", name])
    try:
        assert name in m1.run(["ls", "/run/netns"]).stdout.split()
    finally:
        run(["ip", "netns", "delete", name])


def uptime_ticks() -> int:
    """Now, in clock ticks since boot (the unit of a process's start time)."""
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def started_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def test_destroy_kills_everything_and_cleans_up(test_network):
    m = Machine("gone", test_network).start()
    m.write_file("/lib/systemd/system/sleeper.service", SLEEPER_UNIT)
    m.systemctl("start", "sleeper")
    background = m.popen(["sleep", "3600"])
    run(["ip", "netns", "add", m.pod_prefix + "p"])
    sleeps(m, 2)
    pids = m.pids()
    assert len(pids) >= 3           # holder, the unit's sleep, the popen'ed one
    holder_mnt = os.readlink(f"/proc/{m.holder_pid}/ns/mnt")
    # (counted from before the destroy: a test beside this one may make a
    # namespace of the same inode number while it runs, a CI run saw it)
    destroying = uptime_ticks()
    m.destroy()
    background.wait(timeout=5)
    assert not [p for p in pids if process_alive(p)]
    assert not [n for n in list_netns() if n.startswith(m.netns) or n.startswith(m.pod_prefix)]
    assert not m.state_dir.exists()
    # No process is left in the machine's mount namespace. (A namespace made
    # since, by a test running beside this one, may get the same inode
    # number: a process started once the destroy began is not a leftover.)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                same = os.readlink(f"/proc/{entry}/ns/mnt") == holder_mnt
                assert not (same and started_ticks(int(entry)) < destroying), entry
            except OSError:   # gone, or not ours to look at (pid 1 here)
                pass
    assert str(state_root()) not in open("/proc/self/mountinfo").read()


def test_reboot_empties_run_kills_everything_and_keeps_the_disks(machines):
    """A power cycle: processes, links, routes, rules and /run go; the disks
    stay; enabled units start again; the other machine is untouched."""
    m1, m2 = machines
    m1.write_file("/lib/systemd/system/sleeper.service", SLEEPER_UNIT)
    m1.write_file("/lib/systemd/system/idle.service", SLEEPER_UNIT)
    m1.run(["systemctl", "daemon-reload"])
    m1.run(["systemctl", "enable", "sleeper"])
    m1.run(["systemctl", "start", "sleeper", "idle"])
    before = set(sleeps(m1, 2))
    assert len(before) == 2
    stray = m1.popen(["sleep", "3600"], stdin=subprocess.DEVNULL)
    m1.run(["sh", "-ec", "mkdir -p /run/flannel && echo FLANNEL_SUBNET=10.1.5.1/24 "
            "> /run/flannel/subnet.env; echo 1 > /run/flannel/x; touch /run/y; "
            "mkdir -p /opt/cni/bin && echo kept > /opt/cni/bin/kept; "
            "ip link add cni0 type bridge; "
            "ip link add flannel.1 type vxlan id 1 dev eth0 dstport 8472; "
            "ip link set cni0 up; ip addr add 10.1.5.1/24 dev cni0; "
            "ip route add 10.1.9.0/24 via 172.31.254.12 dev eth0; "
            "echo 1 > /proc/sys/net/ipv4/ip_forward; "
            "nft add table ip flsbtest"])
    m2.run(["sh", "-ec", "mkdir -p /run/flannel && echo m2 > /run/flannel/x"])
    pod_ns = m1.pod_prefix + "p1"
    run(["ip", "netns", "add", pod_ns])

    gone = m1.reboot()

    assert f"pod namespace {pod_ns}" in gone and pod_ns not in list_netns()
    assert not any(process_alive(p) for p in before) and stray.wait(timeout=10) == -9
    assert m1.links() == ["lo", "eth0"]
    routes = m1.run(["ip", "route", "show"]).stdout
    assert "10.1.9.0" not in routes and "172.31.254.0/24" in routes
    assert m1.run(["cat", "/proc/sys/net/ipv4/ip_forward"]).stdout.strip() == "0"
    assert "flsbtest" not in m1.run(["nft", "list", "tables"]).stdout
    assert m1.read_file("/run/flannel/subnet.env") is None and not m1.exists("/run/y")
    assert not m1.exists("/run/flannel")
    assert m1.run(["test", "-d", "/run/systemd/system"]).returncode == 0
    assert m1.exists("/run/netns") and m1.read_file("/opt/cni/bin/kept") == b"kept\n"
    # systemd's boot: the enabled unit runs again, the merely started one not
    assert len(sleeps(m1, 1)) == 1
    assert m1.run(["systemctl", "is-active", "sleeper"]).stdout.strip() == "active"
    idle = m1.run(["systemctl", "is-active", "idle"], check=False).stdout.strip()
    assert idle != "active"
    assert m2.read_file("/run/flannel/x") == b"m2\n"
    assert m1.holder is not None and m1.run(["true"]).returncode == 0
