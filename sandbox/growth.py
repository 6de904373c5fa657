"""What a month of running leaves behind, and what every node's look costs etcd.

    python -m sandbox growth --charm DIR [--resource TARBALL] [--hooks 100]
                             [--leases 16,1000,5000] [--json FILE]

Part one deploys flannel on one sandbox machine, lets it settle, runs
--hooks update-status hooks and prints what each left behind on the node
(the unit's state DB, the charm's log, flanneld's journal at idle, the
install record, the hook tools called) and the 30-day projection (Juju runs
update-status every five minutes: 8,640 hooks).

Part two puts N leases into a real etcd with client TLS (this host's
loopback) and prints what one update-status look asks of it, the first
time (every lease listed) and every time after (the fingerprint only), and
what a whole cluster of N nodes asks per five-minute round.

Figures only; nothing here asserts a time.
"""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from sandbox.cli import charm_parser, resource_for

HOOKS_PER_DAY = 24 * 60 // 5
DAYS = 30
FLANNELD_JOURNAL = "/var/log/journal/flannel.service.log"
LEVELS = ("INFO", "WARNING", "ERROR", "CRITICAL")


def _node_sizes(cluster, unit: str) -> dict:
    machine = cluster.machines[cluster.machine_of(unit)]
    charm_dir = cluster.controller.unit(unit)["charm-dir"]
    log = cluster.controller.unit_log(unit)
    record = machine.run(["sh", "-c", f"cat {charm_dir}/../flannel-install-record/* "
                                      "2>/dev/null | wc -c"], check=False).stdout.strip()
    return {
        "state db bytes": len(machine.read_file(f"{charm_dir}/.unit-state.db") or b""),
        "unit log bytes": len(log.encode()),
        "unit log lines": log.count("\n"),
        # Juju keeps INFO and above by default (logging-config <root>=INFO);
        # the DEBUG lines are charms.reactive's tracer
        "unit log lines >= INFO": sum(1 for line in log.splitlines()
                                      if line[20:].split(" ", 1)[0] in LEVELS),
        "flanneld journal bytes": len(machine.read_file(FLANNELD_JOURNAL) or b""),
        "install record bytes": int(record or 0),
        "hook tool calls": len(cluster.controller.tool_calls(unit)),
    }


def hook_growth(charm: Path, resource: Path, hooks: int, say) -> dict:
    from sandbox.bench import wait_active
    from sandbox.cluster import Cluster

    with Cluster(charm, resource, workers=1, say=say) as cluster:
        cluster.deploy_flannel()
        wait_active(cluster, "flannel", timeout=300)
        [unit] = cluster.controller.units("flannel")
        cluster.controller.update_status("flannel")
        cluster.settle()
        before, start = _node_sizes(cluster, unit), time.monotonic()
        for n in range(hooks):
            cluster.controller.update_status("flannel")
            cluster.settle()
        after, seconds = _node_sizes(cluster, unit), time.monotonic() - start
    rows = {}
    for key in before:
        per_hook = (after[key] - before[key]) / hooks
        rows[key] = {"after deploy": before[key], "per hook": per_hook,
                     "30 days": before[key] + per_hook * HOOKS_PER_DAY * DAYS}
    return {"hooks": hooks, "seconds": seconds, "rows": rows}


def etcd_load(counts: list[int], say) -> dict:
    """One look's cost against etcd holding each count of leases: the
    charm's own look (lib/ is the charm's library, outside this package)."""
    from sandbox import import_charm_library
    import_charm_library()
    from charms.flannel.adapters.etcd_probe import look
    from charms.flannel.facts.etcd_keys import lease_key
    from sandbox.etcd import EtcdServer
    from sandbox.pki import make_pki

    out = {}
    with tempfile.TemporaryDirectory(prefix="flannel-growth-") as tmp:
        pki = make_pki(Path(tmp) / "pki", ["127.0.0.1"])
        with EtcdServer(Path(tmp) / "etcd", pki, host="127.0.0.1") as etcd:
            import etcd3gw
            client = etcd3gw.Etcd3Client(host=etcd.host, port=etcd.port, protocol="https",
                                         timeout=10, session=etcd.session())
            client.put("/coreos.com/network/config", '{"Network": "10.0.0.0/8"}')
            creds = (str(pki.ca_cert), str(pki.client_cert), str(pki.client_key))
            have = 0
            for count in sorted(counts):
                say(f"-- {count} leases in etcd")
                for n in range(have, count):
                    client.put(lease_key(f"10.{n // 256}.{n % 256}.0/24", "/coreos.com/network"),
                               '{"PublicIP": "192.168.0.1", "BackendType": "vxlan"}')
                have = count

                def timed(known):
                    start = time.perf_counter()
                    view = look([etcd.endpoint], *creds, lease_of="10.0.0.0/24", known=known)
                    return view, (time.perf_counter() - start) * 1000
                first, first_ms = timed(None)
                samples = [timed(first.leases) for _ in range(5)]
                again, _ = samples[-1]
                again_ms = sorted(ms for _, ms in samples)[2]
                out[count] = {
                    "keys per look, listing every lease": first.keys_read,
                    "keys per look, fingerprint holds": again.keys_read,
                    "ms per look, listing": round(first_ms, 1),
                    "ms per look, fingerprint": round(again_ms, 1),
                    "cluster keys per round, listing": first.keys_read * count,
                    "cluster keys per round, fingerprint": again.keys_read * count,
                }
    return out


def report(growth: dict | None, load: dict) -> str:
    lines = []
    if growth:
        lines.append(f"update-status growth on one node ({growth['hooks']} hooks, "
                     f"{growth['seconds']:.0f}s); 30 days = {HOOKS_PER_DAY * DAYS} hooks")
        lines.append(f"  {'what':26} {'after deploy':>14} {'per hook':>10} {'30 days':>14}")
        for key, row in growth["rows"].items():
            lines.append(f"  {key:26} {row['after deploy']:>14,} {row['per hook']:>10.1f} "
                         f"{row['30 days']:>14,.0f}")
    if load:
        lines.append("etcd load of update-status's look (N nodes, N leases, every 5 minutes)")
        lines.append(f"  {'N':>6} {'keys/look list':>15} {'keys/look fp':>13} "
                     f"{'ms list':>8} {'ms fp':>6} {'round keys list':>16} {'round keys fp':>14}")
        for count, row in load.items():
            values = list(row.values())
            lines.append(f"  {count:>6} {values[0]:>15,} {values[1]:>13,} {values[2]:>8} "
                         f"{values[3]:>6} {values[4]:>16,} {values[5]:>14,}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = charm_parser("growth", __doc__)
    parser.add_argument("--hooks", type=int, default=100,
                        help="update-status hooks to run on the deployed unit (0: none)")
    parser.add_argument("--leases", default="16,1000,5000",
                        help="lease counts to put in etcd for the load figures ('' for none)")
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    growth = hook_growth(Path(args.charm), resource_for(args), args.hooks, print) \
        if args.hooks else None
    load = etcd_load([int(x) for x in args.leases.split(",") if x.strip()], print)
    print()
    print(report(growth, load))
    if args.json:
        args.json.write_text(json.dumps({"growth": growth, "etcd load": load}, indent=2))
    return 0
