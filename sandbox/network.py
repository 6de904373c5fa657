"""The sandbox's test network: an isolated L2 segment between namespaces.

A :class:`TestNetwork` is a dedicated "switch" network namespace holding a
Linux bridge.  Every namespace attached to it (a machine, etcd's namespace)
gets a veth pair whose one end is a port of that bridge and whose other end,
``eth0`` in the attached namespace, carries an address of the test subnet.
No namespace gets a default route, the root namespace gets no address and
no link on the segment, so no packet can leave to a real network; a second
segment (add_routed_segment) is reached only through the network's own
router namespace.  Several networks may exist at once (each engineer's test run has its
own): they are fully separate, even with the same subnet.

Names: every namespace is ``flsb-<tag>-<name>`` (the switch is
``flsb-<tag>-switch``), where ``tag`` is 4 hex chars unique per network.  The
owning process is recorded in ``$FLANNEL_SANDBOX_STATE/owners/<tag>.json``
(default state root ``/var/lib/flannel-sandbox``); :func:`cleanup_stale`
removes everything of networks whose owner is gone (a crashed earlier run):
the processes inside their namespaces, the namespaces (and so their veths)
and the machines' state directories.

Addresses (subnet 172.31.254.0/24 by default): ``.1`` is left unused (there
is no gateway), ``etcd`` gets ``.2``, other service namespaces ``.3``-``.10``,
machines ``.11``, ``.12``, ... in order of attachment. Every address has its
IPv6 twin in the segment's ULA /64 (ipv6_twin: 172.31.254.11 is
fdf1:31:254::11), as a dual-stack data centre network gives both families.

API::

    with TestNetwork(subnet="172.31.254.0/24") as net:     # create() / destroy()
        net.tag, net.prefix ("flsb-<tag>-"), net.subnet, net.switch
        net.netns_for("etcd") -> "flsb-<tag>-etcd"   # attached on first use
        net.address_of("etcd") -> "172.31.254.2"
        net.address6_of("etcd") -> "fdf1:31:254::2"     # its IPv6 twin (ipv6_twin)
        net.attach(name, address=None, kind="machine") -> Attachment
        net.add_interface(name, "eth1") -> address    # a second NIC on the segment
        net.add_routed_segment() -> Segment           # 172.31.253.0/24 behind a router
        net.attach(name, kind="machine", segment="routed")
        net.detach(name)                              # kills its processes, deletes it
    cleanup_stale(force=False) -> list[str]           # what it removed
    netns_pids(netns) -> list[int]; kill_netns_processes(netns); delete_netns(netns)
    ping_from_netns(netns, address, count=3, wait=1.0) -> int   # echoes answered
    run(argv, check=True, input=None, timeout=60, env=None, text=None)
        -> CompletedProcess       # output captured; raises CommandFailed, whose
                                  # str() carries stderr
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "flsb-"
DEFAULT_SUBNET = "172.31.254.0/24"
NETNS_DIR = Path("/run/netns")
IFNAME = "eth0"
BRIDGE = "br0"
# add_routed_segment: the second segment's subnet, and the router between them
ROUTED_SUBNET = "172.31.253.0/24"
ROUTER = "router"
ULA_PREFIX = "fdf1"   # the IPv6 twins' ULA prefix (RFC 4193: fd00::/8)


def ipv6_twin(address: str) -> str:
    """The IPv6 address that goes with an IPv4 one of the test network: the
    octets after the first, written as they read in decimal, in ULA_PREFIX
    (172.31.254.11 -> fdf1:31:254::11; a /24's twin network is a /64)."""
    octets = str(ipaddress.IPv4Address(address)).split(".")
    return str(ipaddress.IPv6Address(f"{ULA_PREFIX}:{octets[1]}:{octets[2]}::{octets[3]}"))


def ipv6_twin_network(subnet: ipaddress.IPv4Network) -> ipaddress.IPv6Network:
    """The /64 that holds the IPv6 twins of `subnet`'s addresses."""
    return ipaddress.IPv6Network(f"{ipv6_twin(str(subnet.network_address))}/64")


def state_root() -> Path:
    return Path(os.environ.get("FLANNEL_SANDBOX_STATE", "/var/lib/flannel-sandbox"))


class CommandFailed(subprocess.CalledProcessError):
    """A failed command; str() includes its stderr."""

    def __str__(self) -> str:
        argv = " ".join(map(str, self.cmd))
        err, out = self.stderr or "", self.output or ""
        if isinstance(err, bytes):
            err, out = err.decode(errors="replace"), out.decode(errors="replace")
        err = err.strip() or out.strip()
        return f"`{argv}` exited {self.returncode}: {err}"


def run(argv, check=True, input=None, timeout=60, env=None,
        text: bool | None = None) -> subprocess.CompletedProcess:
    """subprocess.run with captured output, text unless `input` is bytes (or
    text=False); raises CommandFailed."""
    if text is None:
        text = not isinstance(input, (bytes, bytearray))
    stdin = subprocess.DEVNULL if input is None else None
    proc = subprocess.run(argv, input=input, stdin=stdin, capture_output=True, text=text,
                          timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise CommandFailed(proc.returncode, argv, proc.stdout, proc.stderr)
    return proc


def list_netns() -> list[str]:
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def _ns_id(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def pids_in_namespaces(ns_ids: set[tuple[int, int]], kinds=("net", "mnt")) -> list[int]:
    """Pids of processes whose net or mount namespace is one of `ns_ids`."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        for kind in kinds:
            if _ns_id(f"/proc/{entry}/ns/{kind}") in ns_ids:
                found.append(int(entry))
                break
    return sorted(found)


def netns_pids(netns: str) -> list[int]:
    ns = _ns_id(NETNS_DIR / netns)
    return pids_in_namespaces({ns}, kinds=("net",)) if ns else []


def process_alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie waiting for its reaper counts as gone.
    (sandbox/systemctl.py has its own: it runs inside machines, alone.)"""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def kill_pids(find, timeout: float = 5.0) -> None:
    """SIGTERM what `find()` returns, then SIGKILL whatever is left after
    `timeout` seconds; returns once `find()` is empty (or gives up after a
    further few seconds: a process in uninterruptible sleep).  A dead process
    leaves its namespaces at exit, so zombies are not found (no reaping of
    other people's children needed)."""
    pids = find()
    if not pids:
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not find():
            return
        time.sleep(0.05)
    for _ in range(100):
        pids = find()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def kill_netns_processes(netns: str, timeout: float = 5.0) -> None:
    ns = _ns_id(NETNS_DIR / netns)
    if ns:
        kill_pids(lambda: pids_in_namespaces({ns}, kinds=("net",)), timeout)


def delete_netns(netns: str) -> None:
    """Kill every process inside `netns`, then delete it (its veths go with it)."""
    kill_netns_processes(netns)
    if (NETNS_DIR / netns).exists():
        run(["ip", "netns", "delete", netns], check=False)


def _proc_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _remove_empty_state_dirs() -> None:
    """Leave no empty directories of ours behind on the host."""
    for d in (state_root() / "owners", state_root()):
        try:
            d.rmdir()
        except OSError:
            pass


def _entries(directory: Path) -> list[Path]:
    """What `directory` holds; nothing once it is gone."""
    try:
        return list(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _owner_file(tag: str) -> Path:
    return state_root() / "owners" / f"{tag}.json"


def owner_alive(tag: str) -> bool:
    try:
        owner = json.loads(_owner_file(tag).read_text())
    except (OSError, ValueError):
        return False
    return _proc_start_time(owner["pid"]) == owner.get("start")


def _tag_of(name: str) -> str | None:
    m = re.match(rf"^{PREFIX}([0-9a-f]+)-", name)
    return m.group(1) if m else None


def cleanup_stale(force: bool = False) -> list[str]:
    """Remove leftovers of sandbox networks whose owning process is dead (all
    of them with force=True): processes in their namespaces, the namespaces,
    machine state dirs and owner records.  Returns what it removed.
    Namespaces named ``flsb-`` but not ``flsb-<hex tag>-`` were not made by
    this module: only force=True removes them."""
    removed = []
    tags = set()
    for name in list_netns():
        tag = _tag_of(name)
        if not name.startswith(PREFIX):
            continue
        if force or (tag is not None and not owner_alive(tag)):
            tags.add(tag)
    root = state_root()
    for d in _entries(root):
        tag = _tag_of(d.name)
        if tag and (force or not owner_alive(tag)):
            tags.add(tag)
    for f in _entries(root / "owners"):
        if f.suffix == ".json" and (force or not owner_alive(f.stem)):
            tags.add(f.stem)
    for tag in tags:
        prefix = f"{PREFIX}{tag}-" if tag else PREFIX
        names = [n for n in list_netns() if n.startswith(prefix) and (tag or _tag_of(n) is None)]
        # Kill the processes of all of the tag's namespaces at once, then delete.
        ids = {i for i in (_ns_id(NETNS_DIR / n) for n in names) if i}
        if ids:
            kill_pids(lambda: pids_in_namespaces(ids, kinds=("net",)))
        for n in names:
            delete_netns(n)
            removed.append(f"netns {n}")
        # (another process's cleanup may remove the same stale tag's files
        # at the same time: the early tiers start side by side)
        if tag:
            for d in _entries(root):
                if d.name.startswith(prefix) and d.is_dir():
                    shutil.rmtree(d, ignore_errors=True)
                    removed.append(f"state {d}")
            owner = _owner_file(tag)
            with contextlib.suppress(FileNotFoundError):
                owner.unlink()
                removed.append(f"owner {owner}")
    _remove_empty_state_dirs()
    return removed


@dataclass(frozen=True)
class Attachment:
    name: str          # logical name ("etcd", "m1", ...)
    netns: str         # network namespace name ("flsb-<tag>-m1")
    address: str       # its address on the test subnet
    prefixlen: int
    ifname: str        # its interface on the segment, inside netns ("eth0")
    port: str          # the veth end in the switch namespace
    segment: str = "main"   # the segment it is on (add_routed_segment)
    address6: str = ""   # its IPv6 twin (ipv6_twin), on the same link


def _add_addresses(netns: str, ifname: str, address: str, prefixlen: int) -> None:
    """`address`/`prefixlen` and its IPv6 twin/64 on `ifname`; the twin
    without duplicate address detection, which would hold it "tentative"
    (unusable) for a second or more on a segment where no one else has it."""
    inside = ["ip", "-n", netns]
    run(inside + ["addr", "add", f"{address}/{prefixlen}", "dev", ifname])
    run(inside + ["-6", "addr", "add", f"{ipv6_twin(address)}/64", "dev", ifname, "nodad"])


@dataclass
class Segment:
    """One L2 segment of the network: a bridge in the switch namespace."""
    name: str
    subnet: ipaddress.IPv4Network
    bridge: str
    gateway: str | None = None   # the router's address on it, once there is one

    @property
    def subnet6(self) -> ipaddress.IPv6Network:
        return ipv6_twin_network(self.subnet)


class TestNetwork:
    __test__ = False   # not a pytest test class

    def __init__(self, subnet: str = DEFAULT_SUBNET, tag: str | None = None):
        self.subnet = ipaddress.ip_network(subnet)
        if self.subnet.num_addresses < 32:
            raise ValueError("the test subnet needs at least 32 addresses")
        while tag is None:
            tag = secrets.token_hex(2)
            if _owner_file(tag).exists() or any(
                    n.startswith(f"{PREFIX}{tag}-") for n in list_netns()):
                tag = None
        self.tag = tag
        self.prefix = f"{PREFIX}{self.tag}-"
        self.switch = self.prefix + "switch"
        self.segments: dict[str, Segment] = {"main": Segment("main", self.subnet, BRIDGE)}
        self._attached: dict[str, Attachment] = {}
        self._extra_addresses: dict[str, str] = {}   # "m1-eth1" -> address (add_interface)
        self._extra_links: list[tuple[str, str]] = []   # (attachment, ifname) (add_interface)
        self._ports = 0
        self.created = False

    # --- lifecycle ----------------------------------------------------------
    def create(self) -> "TestNetwork":
        if self.created:
            return self
        cleanup_stale()
        owner = _owner_file(self.tag)
        # Written whole under another name, then renamed: a run beside this
        # one (another xdist worker) cleaning up reads either no owner file
        # (and no namespace of ours yet) or a complete one. A file caught
        # half-written read as a dead owner: that run removed the record, and
        # its next cleanup killed this network's etcd mid-test.
        pending = owner.parent / f".{self.tag}.{os.getpid()}.pending"
        for _ in range(50):
            try:
                owner.parent.mkdir(parents=True, exist_ok=True)
                pending.write_text(json.dumps({"pid": os.getpid(),
                                               "start": _proc_start_time(os.getpid())}))
                os.replace(pending, owner)
                break
            except FileNotFoundError:
                # that run removed the empty state root between our mkdir
                # and our write: again
                continue
        try:
            run(["ip", "netns", "add", self.switch])
            self.created = True
            ip = ["ip", "-n", self.switch]
            run(ip + ["link", "set", "lo", "up"])
            run(ip + ["link", "add", BRIDGE, "type", "bridge"])
            run(ip + ["link", "set", BRIDGE, "up"])
        except Exception:
            self.destroy()
            raise
        return self

    def destroy(self) -> None:
        for name in list(self._attached):
            self.detach(name)
        # Anything else named after this network (pods, machines made by others).
        for n in list_netns():
            if n.startswith(self.prefix) and n != self.switch:
                delete_netns(n)
        delete_netns(self.switch)
        self.created = False
        _owner_file(self.tag).unlink(missing_ok=True)
        _remove_empty_state_dirs()

    def __enter__(self) -> "TestNetwork":
        return self.create()

    def __exit__(self, *exc) -> None:
        self.destroy()

    # --- attachments --------------------------------------------------------
    def _pick_address(self, name: str, kind: str, segment: str = "main") -> str:
        subnet = self.segments[segment].subnet
        hosts = list(subnet.hosts())
        used = {a.address for a in self._attached.values()} | set(self._extra_addresses.values())
        used |= {seg.gateway for seg in self.segments.values() if seg.gateway}
        if name == "etcd":
            candidates = [hosts[1]]
        elif kind == "machine":
            candidates = hosts[10:]
        else:
            candidates = hosts[2:10]
        for addr in candidates:
            if str(addr) not in used:
                return str(addr)
        raise RuntimeError(f"no free {kind} address left on {subnet}")

    def attach(self, name: str, address: str | None = None, kind: str = "service",
               segment: str = "main") -> Attachment:
        """Create namespace `flsb-<tag>-<name>` with eth0 on `segment` (routes
        to the other segments through the router, if there is one)."""
        if not self.created:
            raise RuntimeError("TestNetwork.create() first")
        if name in self._attached:
            raise ValueError(f"{name!r} is already attached")
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
            raise ValueError(f"bad name {name!r}: lowercase letters, digits and '-' only")
        seg = self.segments[segment]
        address = address or self._pick_address(name, kind, segment)
        if ipaddress.ip_address(address) not in seg.subnet:
            raise ValueError(f"{address} is not in {seg.subnet}")
        netns = self.prefix + name
        self._ports += 1
        port = f"port{self._ports}"
        att = Attachment(name, netns, address, seg.subnet.prefixlen, IFNAME, port, segment,
                         ipv6_twin(address))
        run(["ip", "netns", "add", netns])
        self._attached[name] = att
        try:
            sw = ["ip", "-n", self.switch]
            inside = ["ip", "-n", netns]
            # Both ends are born in namespaces of ours: the root namespace
            # never holds a link of the segment, not even for a moment.
            run(sw + ["link", "add", port, "type", "veth", "peer", "name", IFNAME, "netns", netns])
            run(sw + ["link", "set", port, "master", seg.bridge])
            run(sw + ["link", "set", port, "up"])
            run(inside + ["link", "set", "lo", "up"])
            _add_addresses(netns, IFNAME, address, seg.subnet.prefixlen)
            run(inside + ["link", "set", IFNAME, "up"])
            self._route_to_other_segments(att)
        except Exception:
            self.detach(name)
            raise
        return att

    def _route_to_other_segments(self, att: Attachment) -> None:
        gateway = self.segments[att.segment].gateway
        if gateway is None or att.name == ROUTER:
            return
        for seg in self.segments.values():
            if seg.name != att.segment:
                run(["ip", "-n", att.netns, "route", "add", str(seg.subnet), "via", gateway])
                run(["ip", "-n", att.netns, "-6", "route", "add", str(seg.subnet6), "via",
                     ipv6_twin(gateway)])

    def add_routed_segment(self, subnet: str = ROUTED_SUBNET, name: str = "routed") -> Segment:
        """A second segment (`subnet`, its own bridge) behind a router
        namespace on the main one: machines attached to it reach the main
        segment's (and etcd) through the router, one hop away, as nodes in
        another rack or availability zone do. Every attachment, before and
        after, gets a route to the other segment through the router."""
        main = self.segments["main"]
        seg = Segment(name, ipaddress.ip_network(subnet), f"br-{name}"[:15])
        sw = ["ip", "-n", self.switch]
        run(sw + ["link", "add", seg.bridge, "type", "bridge"])
        run(sw + ["link", "set", seg.bridge, "up"])
        router = self.attach(ROUTER, kind="service")
        self.segments[name] = seg
        seg.gateway = str(next(seg.subnet.hosts()))
        self._ports += 1
        port = f"port{self._ports}"
        inside = ["ip", "-n", router.netns]
        run(sw + ["link", "add", port, "type", "veth", "peer", "name", "eth1", "netns",
                  router.netns])
        run(sw + ["link", "set", port, "master", seg.bridge])
        run(sw + ["link", "set", port, "up"])
        _add_addresses(router.netns, "eth1", seg.gateway, seg.subnet.prefixlen)
        run(inside + ["link", "set", "eth1", "up"])
        run(["ip", "netns", "exec", router.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1",
             "net.ipv6.conf.all.forwarding=1"])
        self._extra_links.append((ROUTER, "eth1"))
        main.gateway = router.address
        for att in self._attached.values():
            self._route_to_other_segments(att)
        return seg

    def add_interface(self, name: str, ifname: str, address: str | None = None) -> str:
        """One more link of attachment `name` on the segment (`ifname`, up,
        with a free machine address or `address`): a machine's second NIC.
        Returns its address; it goes with the attachment's namespace."""
        att = self._attached[name]
        address = address or self._pick_address(f"{name}-{ifname}", "machine", att.segment)
        self._ports += 1
        port = f"port{self._ports}"
        sw = ["ip", "-n", self.switch]
        inside = ["ip", "-n", att.netns]
        run(sw + ["link", "add", port, "type", "veth", "peer", "name", ifname, "netns", att.netns])
        run(sw + ["link", "set", port, "master", self.segments[att.segment].bridge])
        run(sw + ["link", "set", port, "up"])
        _add_addresses(att.netns, ifname, address, att.prefixlen)
        run(inside + ["link", "set", ifname, "up"])
        self._extra_addresses[f"{name}-{ifname}"] = address
        self._extra_links.append((name, ifname))
        return address

    def set_mtu(self, mtu: int) -> None:
        """The segment's MTU (a jumbo-frame LAN, a tunnel's smaller one): the
        bridge, every port and every attachment's links on the segment."""
        sw = ["ip", "-n", self.switch]
        for seg in self.segments.values():
            ports = [link["ifname"] for link in json.loads(
                run(sw + ["-j", "link", "show", "master", seg.bridge]).stdout or "[]")]
            for port in ports:
                run(sw + ["link", "set", port, "mtu", str(mtu)])
            run(sw + ["link", "set", seg.bridge, "mtu", str(mtu)])
        for att in self._attached.values():
            run(["ip", "-n", att.netns, "link", "set", att.ifname, "mtu", str(mtu)])
        for name, ifname in self._extra_links:
            if name in self._attached:
                run(["ip", "-n", self._attached[name].netns, "link", "set", ifname, "mtu",
                     str(mtu)])

    def set_port_mtu(self, name: str, mtu: int) -> None:
        """The MTU of `name`'s port on its segment's bridge: the bridge drops
        frames to and from `name` bigger than that, silently."""
        run(["ip", "-n", self.switch, "link", "set", self.attachment(name).port, "mtu",
             str(mtu)])

    def detach(self, name: str) -> None:
        att = self._attached.pop(name, None)
        if att is not None:
            delete_netns(att.netns)

    def netns_for(self, name: str) -> str:
        """The namespace of `name` on this network, attached on first use
        (`etcd` always gets the subnet's second address, .2)."""
        if name not in self._attached:
            self.attach(name)
        return self._attached[name].netns

    def address_of(self, name: str) -> str:
        return self._attached[name].address

    def address6_of(self, name: str) -> str:
        return self._attached[name].address6

    def attachment(self, name: str) -> Attachment:
        return self._attached[name]

    @property
    def attached(self) -> dict[str, Attachment]:
        return dict(self._attached)


# An ICMP (or ICMPv6, for an IPv6 address) echo client run by the host's Python
# inside a namespace: one echo
# every INTERVAL seconds, COUNT of them (0: until a line or EOF on stdin);
# prints "s SEQ" when it sends and "a SEQ" when SEQ is answered, however late;
# after the last echo (or the stop) it waits up to GRACE seconds for late replies.
# SIZE (optional) is the echo's data length (ping -s), DF 1 forbids fragmenting
# it (ping -M do); an echo the kernel refuses to send prints "e SEQ <why>".
_PING_LOOP = r"""
import ipaddress, os, select, socket, struct, sys, time
dst, interval, grace, count = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
size = int(sys.argv[5]) if len(sys.argv) > 5 else 0
df = len(sys.argv) > 6 and sys.argv[6] == "1"
v6 = ipaddress.ip_address(dst).version == 6
ECHO, REPLY = (128, 129) if v6 else (8, 0)
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
if v6:   # the kernel fills in ICMPv6's checksum and strips the IPv6 header
    sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    if df:   # IPV6_MTU_DISCOVER = IPV6_PMTUDISC_DO: no local fragmenting
        sock.setsockopt(socket.IPPROTO_IPV6, 23, 2)
else:
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    if df:   # IP_MTU_DISCOVER = IP_PMTUDISC_DO: DF set, no local fragmenting
        sock.setsockopt(socket.IPPROTO_IP, 10, 2)
ident = os.getpid() & 0xffff
sent, answered, refused, seq = set(), set(), set(), 0
next_send, stop_at = time.monotonic(), None
def say(text):
    sys.stdout.write(text + "\n"); sys.stdout.flush()
while True:
    now = time.monotonic()
    if stop_at is None and now >= next_send:
        seq += 1
        hdr = struct.pack("!BBHHH", ECHO, 0, 0, ident, seq & 0xffff)
        payload = (b"flsb-ping" * (size // 9 + 1))[:size] if size else b"flsb-ping"
        check = 0 if v6 else csum(hdr + payload)
        try:
            sock.sendto(struct.pack("!BBHHH", ECHO, 0, check, ident, seq & 0xffff)
                        + payload, (dst, 0))
        except OSError as error:   # refused here: no reply can come
            say("e %d %s" % (seq, error.strerror))
            refused.add(seq & 0xffff)
        sent.add(seq & 0xffff)
        say("s %d" % seq)
        next_send = max(next_send + interval, now)
        if count and seq >= count:
            stop_at = now + grace
    if stop_at is not None and (now >= stop_at or (answered | refused) >= sent):
        break
    wait = (stop_at if stop_at is not None else next_send) - now
    watched = [sock] if count or stop_at is not None else [sock, sys.stdin]
    ready = select.select(watched, [], [], max(0.0, wait))[0]
    if sock in ready:
        data, addr = sock.recvfrom(65535)
        ihl = 0 if v6 else (data[0] & 0x0f) * 4
        typ, code, _, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
        if (typ == REPLY and rid == ident and ipaddress.ip_address(addr[0].split("%")[0])
                == ipaddress.ip_address(dst) and rseq in sent - answered):
            answered.add(rseq)
            say("a %d" % rseq)
    if sys.stdin in ready and stop_at is None:
        sys.stdin.readline()
        stop_at = time.monotonic() + grace
"""


def ping_loop(netns: str, address: str, interval: float, grace: float = 2.0,
              count: int = 0, size: int = 0, dont_fragment: bool = False) -> subprocess.Popen:
    """Start pinging `address` from inside `netns` (a namespace of ours):
    `count` echoes, or until a line is written to the process's stdin (or it
    is closed); see _PING_LOOP for its output."""
    return subprocess.Popen(["nsenter", f"--net={NETNS_DIR / netns}", "--", "python3", "-c",
                             _PING_LOOP, address, str(interval), str(grace), str(count),
                             str(size), "1" if dont_fragment else "0"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1)


def ping_from_netns(netns: str, address: str, count: int = 3, wait: float = 1.0) -> int:
    """Send `count` ICMP echo requests to `address` from inside `netns`
    (a namespace of ours), 0.05 s apart; returns how many were answered, each
    given `wait` seconds (the last waits for them all: count * wait)."""
    proc = ping_loop(netns, address, interval=0.05, grace=count * wait, count=count)
    try:
        out, err = proc.communicate(timeout=count * (0.05 + wait) + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    if proc.returncode != 0:
        raise CommandFailed(proc.returncode, ["ping", address], out, err)
    return sum(1 for line in out.splitlines() if line.startswith("a "))


def ping_unfragmented(netns: str, address: str, size: int, count: int = 3,
                      wait: float = 2.0) -> str:
    """`ping -M do -s SIZE` from inside `netns`: "answered" when an echo of
    `size` data bytes (a packet of size + 28) came back unfragmented, the
    kernel's refusal to send it ("Message too long" when it exceeds the
    route's MTU), or "no answer" (dropped on the way: silence)."""
    proc = ping_loop(netns, address, interval=0.05, grace=count * wait, count=count,
                     size=size, dont_fragment=True)
    out, err = proc.communicate(timeout=count * (0.05 + wait) + 30)
    if proc.returncode != 0:
        raise CommandFailed(proc.returncode, ["ping", address], out, err)
    lines = out.splitlines()
    if any(line.startswith("a ") for line in lines):
        return "answered"
    refused = [line.split(" ", 2)[2] for line in lines if line.startswith("e ")]
    return refused[0] if refused else "no answer"
