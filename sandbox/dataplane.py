"""The data-plane benchmark: what flannel's network gives pods, against the nodes' own.

    python -m sandbox dataplane --charm build/flannel [--resource T] [--seconds 3]
                                [--json F] [--only TEXT ...]

For each backend setting, one two-worker sandbox (both workers on one
subnet; `--only` picks settings by name): a pod on each worker, then TCP
throughput (one stream for `--seconds`, the bytes the receiver got) and TCP
round-trip time (median of 200 one-byte request/response exchanges) from
m1 to m2, pod to pod and node to node (eth0 to eth0), in the same run.
Printed as a table with the pod/node ratios and written as JSON; figures,
never asserted.

Settings: vxlan; vxlan with direct routing; vxlan with flanneld's rules in
nftables (enable-nftables); vxlan with transmit checksum offload off
(disable-vxlan-tx-checksumming true; the default, auto, leaves it on where
the kernel has Linux 5.7's fix, as the sandbox's does: the vxlan row, whose
name says which applied); host-gw; and
vxlan on a network
whose switch carries 1400 bytes while each node's eth0 says 1500 (a path
smaller than the interface, as through a tunnel) with `mtu` 0, flanneld's
own choice (pods get 1450: full-size packets vanish on the way, so one TCP
stream stalls), then with `mtu` 1400 (pods get 1350, and it flows); the
nodes' baseline there is taken with their eth0 set to the path's 1400.
Dual-stack (`ipv6-cidr`), over vxlan and host-gw, is measured in each family
on the same cluster: IPv4 pod to pod against IPv4 node to node, IPv6 pod to
pod against the nodes' IPv6 twins.

Everything runs in the sandbox's namespaces: the TCP ends are the host's
python3 entered into the pods' and machines' network namespaces.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

from sandbox.cli import charm_parser, resource_for
from sandbox.cluster import IPV6_CIDR
from sandbox.network import NETNS_DIR, run

PORT = 5201
RTT_ROUNDS = 200

# One TCP end, run by the host's python3 inside a namespace.
#   server sink ADDR SECONDS: accept one connection, count bytes until EOF or
#     SECONDS + 5 s, print the count.
#   server echo ADDR: accept one connection, echo until EOF.
#   client source ADDR SECONDS: send as fast as it can for SECONDS, then close.
#   client rtt ADDR ROUNDS: ROUNDS one-byte exchanges, print each round's seconds.
_END = r"""
import select, socket, sys, time
role, mode, addr = sys.argv[1], sys.argv[2], sys.argv[3]
arg = float(sys.argv[4]) if len(sys.argv) > 4 else 0
port = %d
if role == "server":
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    listener = socket.socket(family); listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((addr, port)); listener.listen(1)
    print("ready", flush=True)
    conn, _ = listener.accept()
    if mode == "sink":
        total, deadline = 0, time.monotonic() + arg + 5
        while time.monotonic() < deadline:
            if not select.select([conn], [], [], max(0, deadline - time.monotonic()))[0]:
                break
            data = conn.recv(1 << 20)
            if not data:
                break
            total += len(data)
        print(total, flush=True)
    else:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            data = conn.recv(1)
            if not data:
                break
            conn.sendall(data)
else:
    conn = socket.create_connection((addr, port), timeout=10)
    if mode == "source":
        chunk, end = b"x" * (1 << 16), time.monotonic() + arg
        conn.setblocking(False)
        while time.monotonic() < end:
            if select.select([], [conn], [], max(0, end - time.monotonic()))[1]:
                try:
                    conn.send(chunk)
                except BlockingIOError:
                    pass
        conn.close()
    else:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(int(arg)):
            started = time.perf_counter()
            conn.sendall(b"x")
            conn.recv(1)
            print(time.perf_counter() - started)
        conn.close()
""" % PORT


@dataclass
class Figures:
    setting: str
    pod_mtu: Optional[int]   # the pods' path MTU in this family
    pod_mbit_s: float
    node_mbit_s: float
    pod_rtt_ms: float
    node_rtt_ms: float
    family: int = 4   # the IP version pods and nodes talked over
    tx_checksum: str = "-"   # flannel.1's transmit checksum offload on m1: on, off, "-"

    @property
    def throughput_ratio(self) -> float:
        return self.pod_mbit_s / self.node_mbit_s if self.node_mbit_s else 0.0

    @property
    def rtt_ratio(self) -> float:
        return self.pod_rtt_ms / self.node_rtt_ms if self.node_rtt_ms else 0.0


def _in_netns(netns: str, *args: str) -> list[str]:
    return ["nsenter", f"--net={NETNS_DIR / netns}", "--", sys.executable, "-c", _END, *args]


def _serve(netns: str, mode: str, address: str, seconds: float = 0) -> subprocess.Popen:
    server = subprocess.Popen(_in_netns(netns, "server", mode, address, str(seconds)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if server.stdout.readline().strip() != "ready":
        server.kill()
        raise RuntimeError(f"the {mode} server in {netns} did not start: {server.stderr.read()}")
    return server


def throughput(server_ns: str, address: str, client_ns: str, seconds: float) -> float:
    """Mbit/s one TCP stream carried from client_ns to address (in server_ns)."""
    server = _serve(server_ns, "sink", address, seconds)
    try:
        subprocess.run(_in_netns(client_ns, "client", "source", address, str(seconds)),
                       capture_output=True, timeout=seconds + 30)
        out, _ = server.communicate(timeout=seconds + 30)
    finally:
        server.kill()
    return int(out.strip() or 0) * 8 / seconds / 1e6


def round_trip(server_ns: str, address: str, client_ns: str, rounds: int = RTT_ROUNDS) -> float:
    """Median milliseconds of one-byte TCP request/response exchanges."""
    server = _serve(server_ns, "echo", address)
    try:
        done = subprocess.run(_in_netns(client_ns, "client", "rtt", address, str(rounds)),
                              capture_output=True, text=True, timeout=120)
    finally:
        server.kill()
        server.wait()
    times = [float(line) for line in done.stdout.split()]
    return statistics.median(times) * 1000 if times else float("nan")


DUAL_STACK = {"ipv6-cidr": IPV6_CIDR}
# (name, flannel options, switch MTU or None, nodes' eth0 MTU or None); a
# dual-stack setting is measured in each family
SETTINGS = [
    ("vxlan", {}, None, None),
    ("vxlan, direct routing", {"direct-routing": True}, None, None),
    ("vxlan, nftables", {"enable-nftables": True}, None, None),
    ("vxlan, tx checksum offload off", {"disable-vxlan-tx-checksumming": "true"}, None, None),
    ("host-gw", {"backend": "host-gw"}, None, None),
    ("vxlan, 1400-byte path, mtu 0 (wrong)", {}, 1400, 1500),
    ("vxlan, 1400-byte path, mtu 1400", {"mtu": 1400}, 1400, 1500),
    ("vxlan, dual-stack", DUAL_STACK, None, None),
    ("host-gw, dual-stack", {**DUAL_STACK, "backend": "host-gw"}, None, None),
]


def _narrow_the_path(cluster, switch_mtu: int, eth0_mtu: int) -> None:
    """The switch carries `switch_mtu` while every node's eth0 says `eth0_mtu`:
    frames bigger than the path are dropped on it, silently."""
    cluster.set_underlay_mtu(switch_mtu)
    for machine in cluster.machines.values():
        run(["ip", "-n", machine.netns, "link", "set", machine.iface, "mtu", str(eth0_mtu)])


def measure(charm_dir: Path, resource: Path, setting: tuple, seconds: float,
            say: Callable[[str], None]) -> list[Figures]:
    """One row per family the setting's pods have (IPv4, and IPv6 for a
    dual-stack one), pods and nodes measured in the same family."""
    from sandbox.cluster import Cluster

    name, options, switch_mtu, eth0_mtu = setting
    rows = []
    with Cluster(charm_dir, resource, workers=2, say=lambda t: say(f"[{name}] {t}")) as cluster:
        if switch_mtu:
            _narrow_the_path(cluster, switch_mtu, eth0_mtu)
        cluster.deploy_flannel(config=options)
        cluster.wait_for_flannel(timeout=180)
        pods = {m: cluster.start_pod(m) for m in ("m1", "m2")}
        m1, m2 = cluster.machines["m1"], cluster.machines["m2"]
        env = cluster.subnet_env("m1")
        families = [(4, pods["m2"].address, m2.address)]
        if pods["m2"].address6:
            families.append((6, pods["m2"].address6, m2.address6))
        for family, pod_address, node_address in families:
            label = f"{name}, IPv{family}" if len(families) > 1 else name
            pod_mbit_s = throughput(pods["m2"].netns, pod_address, pods["m1"].netns, seconds)
            pod_rtt_ms = round_trip(pods["m2"].netns, pod_address, pods["m1"].netns)
            if switch_mtu:
                # the nodes' own baseline with eth0 told the path's MTU: on the
                # narrowed path their full-size frames vanish as the pods' do
                for machine in (m1, m2):
                    run(["ip", "-n", machine.netns, "link", "set", machine.iface, "mtu",
                         str(switch_mtu)])
            pod_mtu = int(env["FLANNEL_MTU"]) if "FLANNEL_MTU" in env else None
            v6_device = cluster.vxlan_links("m1").get("flannel-v6.1") if family == 6 else None
            if v6_device:   # the IPv6 path: flannel-v6.1 is 20 bytes smaller than FLANNEL_MTU
                pod_mtu = v6_device["mtu"]
            figures = Figures(
                setting=label, pod_mtu=pod_mtu, tx_checksum=tx_checksum(m1),
                pod_mbit_s=pod_mbit_s,
                node_mbit_s=throughput(m2.netns, node_address, m1.netns, seconds),
                pod_rtt_ms=pod_rtt_ms,
                node_rtt_ms=round_trip(m2.netns, node_address, m1.netns), family=family)
            say(f"[{label}] pods {figures.pod_mbit_s:.0f} Mbit/s, nodes "
                f"{figures.node_mbit_s:.0f} Mbit/s; rtt pods {figures.pod_rtt_ms:.3f} ms, "
                f"nodes {figures.node_rtt_ms:.3f} ms")
            rows.append(figures)
    return rows


def tx_checksum(machine) -> str:
    """Whether flannel.1 offloads transmit checksums on `machine` (ethtool
    -k): on, off, or "-" without the device (host-gw)."""
    shown = machine.run(["ethtool", "-k", "flannel.1"], check=False)
    return next((line.split(":", 1)[1].split()[0] for line in shown.stdout.splitlines()
                 if line.strip().startswith("tx-checksum-ip-generic:")), "-")


def table(rows: list[Figures]) -> str:
    header = (f"{'setting':40}  {'tx csum':>7}  {'pod MTU':>7}  {'pod Mbit/s':>10}  "
              f"{'node Mbit/s':>11}  {'ratio':>5}  {'pod rtt ms':>10}  {'node rtt ms':>11}  "
              f"{'ratio':>5}")
    lines = [header, "-" * len(header)]
    for f in rows:
        lines.append(f"{f.setting:40}  {f.tx_checksum:>7}  {f.pod_mtu or '-':>7}  "
                     f"{f.pod_mbit_s:10.0f}  "
                     f"{f.node_mbit_s:11.0f}  {f.throughput_ratio:5.2f}  {f.pod_rtt_ms:10.3f}  "
                     f"{f.node_rtt_ms:11.3f}  {f.rtt_ratio:5.2f}")
    return "\n".join(lines)


def picked(only: list[str]) -> list[tuple]:
    """The settings `--only` names: each text is a setting's whole name, or
    else text in the names of the settings it picks; none: every setting."""
    names = {setting[0] for setting in SETTINGS}
    return [setting for setting in SETTINGS if not only or any(
        text == setting[0] if text in names else text in setting[0] for text in only)]


def main(argv: list[str]) -> int:
    parser = charm_parser("dataplane", __doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per TCP stream")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    parser.add_argument("--only", action="append", default=[],
                        help="a setting's name, or text in the names of those to run "
                             "(repeatable)")
    args = parser.parse_args(argv)
    resource = resource_for(args)
    rows = [figures for setting in picked(args.only)
            for figures in measure(args.charm, resource, setting, args.seconds, print)]
    print()
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(
            [dict(asdict(f), throughput_ratio=f.throughput_ratio, rtt_ratio=f.rtt_ratio)
             for f in rows], indent=2))
        print(f"figures written to {args.json}")
    return 0
