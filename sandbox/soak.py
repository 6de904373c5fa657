"""The soak: remove/add cycles of the flannel:cni /
kubernetes-worker:cni relation with pods and a background ping, and the leak
counters after each cycle.

    python -m sandbox soak --charm build/flannel [--resource T] [--cycles 50]
                           [--json FILE]

One two-machine sandbox cluster. Before the cycles: flannel deployed and
active, a pod on each machine, and a ping from m1's pod to m2's pod every
half second for the whole soak. Each cycle: remove the relation (settled),
add it back (settled), update-status until every unit is active, then a new
pod on m1 that must reach m2's old pod, deleted again. After each cycle it
prints the cycle's time, the pings answered during it, and per machine:

- files: files under the charm's directories (/usr/local/bin, /opt/cni/bin,
  /etc/cni/net.d, /lib/systemd/system, /etc/ssl/flannel), /run/flannel,
  /var/lib/cni and the units' install records; agents: unit agent
  directories under /var/lib/juju/agents;
- links: network links; procs: processes of the machine (its namespaces)
  running for 2 s or more (short-lived helpers left out);
- alloc: host-local allocations (/var/lib/cni/networks/*/<address>);
- rules, routes, units: iptables and ip6tables rules (every table), routes
  of both families and the systemd units the machine lists;
- rss: resident memory of the machine's processes (flanneld, systemctl's
  Restart= supervisor, ...), MiB;

and in etcd: leases (keys under /coreos.com/network/subnets) and etcd's RSS.
At the end: each counter in the first and the last cycle, and whether every
counter stayed flat (counts equal; memory within 20 % or 5 MiB). Figures,
not assertions: the exit status is 1 only if a cycle failed or a counter
grew. Not part of CI (minutes per ten cycles).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from sandbox.cli import charm_parser, resource_for
from sandbox.machine import resident_kib

CHARM_DIRS = ("/usr/local/bin", "/opt/cni/bin", "/etc/cni/net.d", "/lib/systemd/system",
              "/etc/ssl/flannel", "/run/flannel", "/var/lib/cni")
AGENTS = "/var/lib/juju/agents"
RECORD = "flannel-install-record"
SUBNETS = "/coreos.com/network/subnets/"
COUNTS = ("files", "agents", "links", "procs", "alloc", "rules", "routes", "units")
RSS_SLACK = (0.20, 5.0)   # memory counts as flat within 20 % or 5 MiB
# processes younger than this are left out of procs and rss: systemctl's
# Restart= supervisor polls the unit with a short-lived child every 0.2 s
SETTLED = 2.0


def _age(pid: int) -> float:
    """Seconds since the process started (0 if it is gone)."""
    try:
        start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return 0.0
    return uptime - start / os.sysconf("SC_CLK_TCK")


def _count_files(machine, path: str) -> int:
    top = machine.path_on_host(path)
    count = 0
    for _, dirs, files in os.walk(top):
        count += len(files)
    return count


def machine_counters(machine) -> dict:
    files = sum(_count_files(machine, d) for d in CHARM_DIRS)
    agents = machine.ls(AGENTS) or []
    files += sum(_count_files(machine, f"{AGENTS}/{a}/{RECORD}") for a in agents)
    alloc = 0
    for net in machine.ls("/var/lib/cni/networks") or []:
        alloc += sum(1 for name in machine.ls(f"/var/lib/cni/networks/{net}") or []
                     if name[:1].isdigit())
    pids = [p for p in machine.pids() if p != machine.holder_pid]
    lasting = [p for p in pids if _age(p) >= SETTLED]
    return {"files": files, "agents": len(agents), "links": len(machine.links()),
            "procs": len(lasting), "alloc": alloc, "rss": round(resident_kib(lasting) / 1024, 1)}


@dataclass
class Cycle:
    n: int
    seconds: float
    pings: str                                  # "answered/sent" during the cycle
    new_pod_reached_peer: bool
    machines: dict = field(default_factory=dict)  # machine -> counters
    leases: int = 0
    etcd_rss: float = 0.0
    problems: list = field(default_factory=list)


def node_counters(cluster, machine: str) -> dict:
    """iptables rules (both families, every table), routes and systemd units."""
    state = cluster.node_state(machine)
    return {"rules": sum(len(r) for r in state.rules.values()), "routes": len(state.routes),
            "units": len(state.units)}


def counters(cluster) -> tuple[dict, int, float]:
    machines = {m: {**machine_counters(cluster.machines[m]), **node_counters(cluster, m)}
                for m in cluster.worker_machines()}
    leases = len(cluster.etcd_values(SUBNETS))
    from sandbox.cluster import ETCD
    from sandbox.network import netns_pids
    etcd_pids = netns_pids(cluster.network.netns_for(ETCD))
    return machines, leases, round(resident_kib(etcd_pids) / 1024, 1)


def line(c: Cycle) -> str:
    per = "  ".join(
        f"{m}: files {v['files']} agents {v['agents']} links {v['links']} procs {v['procs']} "
        f"alloc {v['alloc']} rules {v['rules']} routes {v['routes']} units {v['units']} "
        f"rss {v['rss']:.1f}" for m, v in c.machines.items())
    flag = "" if not c.problems else "  PROBLEMS: " + "; ".join(c.problems)
    return (f"cycle {c.n:3d} {c.seconds:6.1f}s pings {c.pings:>7} "
            f"new pod {'ok' if c.new_pod_reached_peer else 'FAILED'}  {per}  "
            f"leases {c.leases} etcd rss {c.etcd_rss:.1f}{flag}")


def flat(first: Cycle, last: Cycle) -> list[str]:
    """What grew from the first to the last cycle."""
    grew = []
    for m, a in first.machines.items():
        b = last.machines[m]
        for key in COUNTS:
            if b[key] != a[key]:
                grew.append(f"{m} {key} {a[key]} -> {b[key]}")
        if b["rss"] > max(a["rss"] * (1 + RSS_SLACK[0]), a["rss"] + RSS_SLACK[1]):
            grew.append(f"{m} rss {a['rss']:.1f} -> {b['rss']:.1f} MiB")
    if last.leases != first.leases:
        grew.append(f"leases {first.leases} -> {last.leases}")
    if last.etcd_rss > max(first.etcd_rss * (1 + RSS_SLACK[0]), first.etcd_rss + RSS_SLACK[1]):
        grew.append(f"etcd rss {first.etcd_rss:.1f} -> {last.etcd_rss:.1f} MiB")
    return grew


def soak(charm: Path, resource: Path, cycles: int, say: Callable[[str], None] = print
         ) -> tuple[list[Cycle], list[str]]:
    from sandbox.cluster import Cluster

    results: list[Cycle] = []
    with Cluster(charm, resource, workers=2, say=lambda _: None) as cluster:
        say("-- deploying flannel on two machines")
        cluster.deploy_flannel()
        cluster.wait_for_flannel(timeout=180)
        p1, p2 = cluster.start_pod("m1"), cluster.start_pod("m2")
        say(f"-- pods {p1.name} {p1.address} on m1, {p2.name} {p2.address} on m2; "
            f"pinging {p2.address} from {p1.name} throughout")
        machines, leases, etcd_rss = counters(cluster)
        base = Cycle(0, 0.0, "-", True, machines, leases, etcd_rss)
        say(line(base))
        with cluster.pinging(p1, p2.address) as pinger:
            for n in range(1, cycles + 1):
                sent, answered = pinger.sent, pinger.answered
                started = time.monotonic()
                problems = []
                cluster.remove_cni_relation()
                cluster.add_cni_relation()
                try:
                    cluster.wait_for_flannel(timeout=180)
                except Exception as error:   # noqa: BLE001  (reported, the soak goes on)
                    problems.append(str(error).splitlines()[0])
                reached = False
                pod, error = cluster.try_pod("m1")
                if pod is None:
                    problems.append(f"new pod on m1: {error}")
                else:
                    reached = pod.ping(p2.address)
                    pod.delete()
                    cluster.pods.remove(pod)
                if not p1.ping(p2.address):
                    problems.append(f"{p1.name} on m1 no longer reaches {p2.name} on m2")
                failed = cluster.failed_hooks()
                if failed:
                    problems.append(f"failed hooks: {failed}")
                seconds = time.monotonic() - started
                machines, leases, etcd_rss = counters(cluster)
                c = Cycle(n, seconds, f"{pinger.answered - answered}/{pinger.sent - sent}",
                          reached, machines, leases, etcd_rss, problems)
                results.append(c)
                say(line(c))
    grew = flat(results[0], results[-1]) if results else []
    return [base] + results, grew


def main(argv: list[str]) -> int:
    parser = charm_parser("soak", __doc__)
    parser.add_argument("--cycles", type=int, default=50, help="remove/add cycles (default 50)")
    parser.add_argument("--json", type=Path, help="write every cycle's figures here as JSON")
    args = parser.parse_args(argv)
    resource = resource_for(args)
    started = time.monotonic()
    cycles, grew = soak(args.charm, resource, args.cycles, say=lambda t: print(t, flush=True))
    done = cycles[1:]
    print()
    if done:
        first, last = done[0], done[-1]
        times = sorted(c.seconds for c in done)
        print(f"{len(done)} cycles in {time.monotonic() - started:.0f}s; per cycle: "
              f"median {times[len(times) // 2]:.1f}s, min {times[0]:.1f}s, max {times[-1]:.1f}s")
        print("first cycle: " + line(first))
        print("last cycle:  " + line(last))
    failed = [c for c in done if c.problems or not c.new_pod_reached_peer]
    print(f"cycles with problems: {len(failed)}")
    print("every counter flat (first vs last cycle): " +
          ("yes" if not grew else "NO: " + "; ".join(grew)))
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in cycles], indent=1))
        print(f"figures written to {args.json}")
    return 0 if done and not failed and not grew else 1
