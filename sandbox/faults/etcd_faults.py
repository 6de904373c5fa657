"""Fault rows of etcd (rows 1-3): etcd away during each kind of
hook, one member of three down, its data wiped, its PKI replaced.

Every row holds the charm to what an operator expects while etcd is away:
the unit's status names etcd (or still honestly says active, where no hook
needed etcd), no hook fails or takes long for it (hooks never wait for
etcd), the pods that ran before keep pinging and keep their node's subnet,
and once etcd is back the units go active with no manual step
(bench.recover()). Rows print the hook durations they measure.
"""
from __future__ import annotations

import ipaddress
import json
import os
import stat
import statistics
import time

from sandbox.cluster import CNI_RELATION, ETCD, ETCD_RELATION, FLANNEL, NETWORK_PREFIX, SUBNET_ENV
from sandbox.etcd import EtcdCluster
from sandbox.faults.core import FaultBench, Outcome, row
from sandbox.network import run as run_command
from sandbox.pki import make_pki
from sandbox.waiting import wait_for

# A hook that took longer than this during a fault waited for etcd (hooks must
# not wait; the charm's own etcd timeout is 5 s per endpoint): SLOW_HOOK, or
# SLOW_FACTOR times the longest flannel hook the same cluster ran before the
# fault, if that is more (a loaded host slows every hook alike).
SLOW_HOOK = 30.0
SLOW_FACTOR = 3.0


def slow_hook(bench: FaultBench, before: int) -> float:
    """The row's bound for one hook during its fault: the row's hooks before
    hook_log index `before` are its baseline (this run, this host; not those
    of the rows before it on a shared cluster, whose faults slowed theirs)."""
    earlier = [run.duration for run in bench.ctl.hook_log[bench.first_hook:before]
               if run.unit.startswith(FLANNEL + "/") and not run.skipped and run.ok]
    return max([SLOW_HOOK] + [SLOW_FACTOR * d for d in earlier])


# --- helpers --------------------------------------------------------------------------

def etcd_app(bench: FaultBench):
    """The emulated etcd charm (sandbox.juju.apps.EtcdApp)."""
    return bench.ctl.emulated["etcd"]


def flannel_hooks(bench: FaultBench, since: int) -> list:
    """The flannel hooks run since hook_log index `since`."""
    return [run for run in bench.ctl.hook_log[since:]
            if run.unit.startswith(FLANNEL + "/") and not run.skipped]


def hook_problems(bench: FaultBench, since: int, during: str) -> list[str]:
    """Flannel hooks since `since` that failed, printed a traceback, or took long."""
    problems = []
    slow = slow_hook(bench, since)
    for run in flannel_hooks(bench, since):
        if not run.ok:
            problems.append(f"{run.unit} {run.hook} failed (exit {run.exit_code}) {during}: "
                            f"{run.stderr_tail[-300:]}")
        elif "Traceback" in (run.stderr_tail or ""):
            problems.append(f"{run.unit} {run.hook} printed a traceback {during}: "
                            f"{run.stderr_tail[-300:]}")
        if run.duration > slow:
            problems.append(f"{run.unit} {run.hook} took {run.duration:.1f}s {during} "
                            f"(the bound: {slow:.0f}s)")
    return problems


def durations(bench: FaultBench, since: int, hook: str | None = None) -> list[float]:
    return [run.duration for run in flannel_hooks(bench, since) if hook in (None, run.hook)]


def show_durations(bench: FaultBench, since: int, label: str) -> str:
    runs = flannel_hooks(bench, since)
    text = ", ".join(f"{r.unit} {r.hook} {r.duration:.2f}s" for r in runs) or "no hook"
    bench.say(f"   hooks {label}: {text}")
    return text


def status_names_etcd(bench: FaultBench, statuses: dict[str, str], during: str) -> list[str]:
    """Every flannel unit's status must say what is wrong: etcd."""
    return [f"{unit} said {text!r} {during}" for unit, text in statuses.items()
            if "etcd" not in text.lower()]


def subnets(bench: FaultBench) -> dict[str, str]:
    """machine -> the gateways of its subnet.env's lease ('' if none):
    "10.1.52.1/24", or dual-stack "10.1.52.1/24&fd10:1:0:5::1/64"."""
    def lease(env: dict) -> str:
        return "&".join(env[key] for key in ("FLANNEL_SUBNET", "FLANNEL_IPV6_SUBNET")
                        if env.get(key))
    return {m: lease(bench.cluster.subnet_env(m)) for m in bench.cluster.worker_machines()}


def pods_ping(bench: FaultBench, during: str) -> list[str]:
    """The pods made before the fault reach each other across machines."""
    return bench.old_pods_problems(during)


def leases_kept(before: dict[str, str], bench: FaultBench, during: str) -> list[str]:
    now = subnets(bench)
    return [f"{m}: subnet {before[m]} became {now.get(m) or 'none'} {during}"
            for m in before if now.get(m) != before[m]]


def start_pods(bench: FaultBench) -> None:
    """A pod per machine, for rows whose fault came before flannel was up."""
    for m in bench.cluster.worker_machines():
        if m not in bench.pods:
            bench.pods[m] = bench.cluster.start_pod(m)


def update_status(bench: FaultBench) -> None:
    bench.ctl.update_status(FLANNEL)
    bench.cluster.settle()


def etcd_down_problems(bench: FaultBench, mark: int, seen: dict[str, str], label: str) -> list[str]:
    """What the hooks since mark and the statuses seen got wrong while etcd
    was down (hook durations shown under label)."""
    show_durations(bench, mark, label)
    problems = hook_problems(bench, mark, "while etcd was down")
    return problems + status_names_etcd(bench, seen, "while etcd was down")


def back_with_new_pods(bench: FaultBench, name: str, problems: list[str]) -> Outcome:
    """etcd started again: the recovery, then pods where there were none."""
    bench.cluster.etcd.start()
    recovery = bench.recover()
    start_pods(bench)
    return bench.outcome(name, recovery, problems)


# --- 1: etcd away ---------------------------------------------------------------------

@row("1a etcd down during install")
def etcd_down_during_install(bench: FaultBench) -> Outcome:
    """etcd stopped before flannel is deployed: install, the relation hooks
    and the first network config all run without etcd."""
    name = "1a etcd down during install"
    bench.snapshot(pods=False)
    bench.cluster.etcd.stop()
    mark = len(bench.ctl.hook_log)
    bench.deploy(settle_active=False)
    update_status(bench)
    seen = bench.observe("etcd stopped through install")
    return back_with_new_pods(bench, name,
                              etcd_down_problems(bench, mark, seen, "with etcd down"))


@row("1b etcd down at the first network config")
def etcd_down_first_network_config(bench: FaultBench) -> Outcome:
    """flannel installed and related to an etcd that has not published its
    credentials yet; etcd stops, then publishes them: the first
    configure_network runs without etcd."""
    name = "1b etcd down at the first network config"
    bench.snapshot(pods=False)
    etcd = etcd_app(bench)
    etcd.ready = False
    bench.ctl.deploy(FLANNEL, bench.cluster.charm_dir,
                     resources={bench.cluster.resource_name: bench.cluster.resource})
    bench.ctl.add_relation(*CNI_RELATION)
    bench.ctl.add_relation(*ETCD_RELATION)
    bench.cluster.settle()
    bench.observe("etcd related, no credentials yet")
    bench.cluster.etcd.stop()
    mark = len(bench.ctl.hook_log)
    etcd.update(ready=True)
    bench.cluster.settle()
    seen = bench.observe("credentials published, etcd stopped")
    return back_with_new_pods(bench, name,
                              etcd_down_problems(bench, mark, seen, "with etcd down"))


@row("1c etcd down during update-status and a config change")
def etcd_down_update_status_and_config_change(bench: FaultBench) -> Outcome:
    """Active with pods; etcd stops; update-status must say so (the node's
    network keeps working: flanneld holds its lease for 24 h); the operator
    changes the vxlan port: the change waits for etcd, flanneld keeps its
    lease and the pods their traffic; once etcd is back the change lands by
    itself."""
    name = "1c etcd down during update-status and a config change"
    bench.deploy()
    before = subnets(bench)
    mark = len(bench.ctl.hook_log)
    update_status(bench)
    show_durations(bench, mark, "update-status with etcd up")
    bench.cluster.etcd.stop()
    mark = len(bench.ctl.hook_log)
    update_status(bench)
    seen = bench.observe("etcd stopped, update-status")
    problems = etcd_down_problems(bench, mark, seen, "update-status with etcd down")
    mark = len(bench.ctl.hook_log)
    bench.cluster.configure(port=8475)
    seen = bench.observe("etcd stopped, port changed")
    problems += etcd_down_problems(bench, mark, seen, "the config change with etcd down")
    problems += pods_ping(bench, "while etcd was down")
    problems += leases_kept(before, bench, "while etcd was down")
    bench.cluster.etcd.start()
    recovery = bench.recover()
    ports = {m: {link: info.get("port") for link, info in bench.cluster.vxlan_links(m).items()}
             for m in bench.cluster.worker_machines()}
    bench.say(f"   vxlan devices after recovery: {ports}")
    problems += [f"{m}: vxlan devices {links} after recovery, not port 8475"
                 for m, links in ports.items() if list(links.values()) != [8475]]
    config = bench.cluster.network_config() or {}
    if (config.get("Backend") or {}).get("Port") != 8475:
        problems.append(f"etcd holds {config} after recovery, not port 8475")
    problems += leases_kept(before, bench, "after recovery")
    return bench.outcome(name, recovery, problems)


# --- 1e: one member of three down --------------------------------------------------------

# A hook that meets the dead member pays a connect timeout (the charm's are
# 3 s for update-status's look, 5 s otherwise). The charm remembers the
# endpoint that answered last and tries it first (etcd_probe, unit-tested):
# the row checks that every unit's remembered endpoint is a live member once
# it has met the dead one, and prints the hooks' durations with every member
# up and with one down (medians after each unit's first hook), as figures.
ETCD_ANSWERED_KEY = "flannel.etcd-answered"


def blackhole(bench: FaultBench, netns: str) -> None:
    """The member's machine is gone: nothing answers its address (SYNs
    dropped, not refused), so a client waits for its connect timeout."""
    run_command(["ip", "netns", "exec", netns, "iptables", "-I", "INPUT", "-p", "tcp",
                 "--dport", "2379", "-j", "DROP"])


def etcd_hooks(bench: FaultBench, config_values) -> int:
    """update-status, then for each value a vxlan port change (which writes
    the network config to etcd) and update-status; returns the hook_log mark."""
    mark = len(bench.ctl.hook_log)
    update_status(bench)
    for port in config_values:
        bench.cluster.configure(port=port)
        update_status(bench)
    return mark


@row("1e one of three etcd members down")
def one_member_of_three_down(bench: FaultBench) -> Outcome:
    """A three-member etcd; the member listed first dies (its machine
    gone). The charm and flanneld carry on, and the hooks that talk to etcd
    pay the dead member's timeout once, not every time: hook durations with
    every member up and with one down are printed and compared."""
    name = "1e one of three etcd members down"
    c = bench.cluster
    c.etcd.stop()
    names = [ETCD, "etcd-2", "etcd-3"]
    for n in names[1:]:
        c.network.attach(n, kind="service")
    hosts = [c.network.address_of(n) for n in names]
    pki = make_pki(c.workdir / "pki-3", server_ips=hosts)
    members = EtcdCluster(c.workdir / "etcd-3", pki, hosts, [c.network.netns_for(n) for n in names])
    members.start()
    try:
        c.etcd = members.members[1]   # the bench reads etcd through a member that stays
        text = {k: getattr(pki, k).read_text() for k in ("ca_cert", "client_cert", "client_key")}
        etcd_app(bench).update(connection_string=members.connection_string,
                               client_ca=text["ca_cert"], client_cert=text["client_cert"],
                               client_key=text["client_key"])
        bench.cluster.settle()
        bench.deploy()
        before = subnets(bench)
        up = etcd_hooks(bench, [8475, 8477])
        up_runs = flannel_hooks(bench, up)
        show_durations(bench, up, "with three members up")
        members.members[0].stop()
        blackhole(bench, c.network.netns_for(ETCD))
        down = etcd_hooks(bench, [8476, 0])
        down_runs = flannel_hooks(bench, down)
        seen = bench.observe("first member dead")
        show_durations(bench, down, "with the first member dead")
        problems = hook_problems(bench, down, "with one member dead")
        problems += [f"{u} said {t!r} with two members of three up"
                     for u, t in seen.items() if not t.startswith("active")]
        problems += pods_ping(bench, "with one member dead")
        problems += leases_kept(before, bench, "with one member dead")
        units = {r.unit for r in down_runs}
        firsts = {id(next(r for r in down_runs if r.unit == u)) for u in units}
        for kind in ("update-status", "config-changed"):
            base = statistics.median(r.duration for r in up_runs if r.hook == kind)
            later = [r.duration for r in down_runs if r.hook == kind and id(r) not in firsts]
            bench.say(f"   {kind}: median {base:.2f}s with all up, "
                      f"{statistics.median(later):.2f}s with one dead after each unit's "
                      "first hook (all: "
                      + ", ".join(f"{r.duration:.2f}s" for r in down_runs if r.hook == kind) + ")")
        dead = members.members[0].endpoint
        live = {m.endpoint for m in members.members[1:]}
        for unit in sorted(units):
            answered = bench.cluster.unit_kv(unit).get(ETCD_ANSWERED_KEY)
            bench.say(f"   {unit} tries {answered} first")
            if answered not in live:
                problems.append(f"{unit} would try {answered or 'no remembered endpoint'} first "
                                f"with {dead} dead: every hook would pay its timeout")
        # the member's machine comes back
        run_command(["ip", "netns", "exec", c.network.netns_for(ETCD), "iptables", "-F", "INPUT"])
        members.members[0].start()
        recovery = bench.recover()
        return bench.outcome(name, recovery, problems)
    finally:
        members.stop()


# --- 2: etcd rebuilt from nothing --------------------------------------------------------

def expected_leases(before: dict[str, str]) -> set[str]:
    """flanneld's lease keys of subnets() ("...10.1.52.0-24&fd10:1:0:5::-64")."""
    return {f"{NETWORK_PREFIX}/subnets/" + "&".join(
                str(ipaddress.ip_interface(gateway).network).replace("/", "-")
                for gateway in lease.split("&"))
            for lease in before.values()}


@row("2 etcd data wiped")
def etcd_data_wiped(bench: FaultBench) -> Outcome:
    """etcd loses its data and restarts empty (a disaster recovery without a
    backup). flanneld does not notice; the charm must: write the network
    config again and have flanneld lease its subnet again, by itself."""
    name = "2 etcd data wiped"
    bench.deploy()
    before = subnets(bench)
    config = bench.cluster.network_config()
    bench.cluster.rebuild_etcd_empty()
    problems = []
    if bench.cluster.etcd_values():
        problems.append("etcd still held flannel's keys after the wipe (the row proves nothing)")
    started = time.monotonic()
    mark = len(bench.ctl.hook_log)
    update_status(bench)
    bench.observe("etcd restarted empty, update-status")
    wanted = expected_leases(before)
    deadline = started + 120
    while True:
        values = bench.cluster.etcd_values()
        stored = values.get(f"{NETWORK_PREFIX}/config")
        if stored is not None and wanted <= set(values):
            break
        if time.monotonic() > deadline:
            problems.append(f"after {deadline - started:.0f}s of update-status etcd holds "
                            f"{sorted(values)}, not the config and the leases {sorted(wanted)}")
            break
        time.sleep(1.0)
        update_status(bench)
    repaired = time.monotonic() - started
    bench.say(f"   config and leases back in etcd after {repaired:.1f}s: "
              f"{sorted(bench.cluster.etcd_values())}")
    show_durations(bench, mark, "after the wipe")
    if stored is not None and ipaddress.ip_network(
            json.loads(stored)["Network"]) != ipaddress.ip_network(config["Network"]):
        problems.append(f"etcd's config became {stored}, was {config}")
    problems += hook_problems(bench, mark, "after the wipe")
    problems += leases_kept(before, bench, "after the wipe")
    recovery = repaired + bench.recover()
    return bench.outcome(name, recovery, problems)


# --- 3: etcd rebuilt with a new PKI --------------------------------------------------------

TLS_FILES = {"ca_cert": "/etc/ssl/flannel/client-ca.pem",
             "client_cert": "/etc/ssl/flannel/client-cert.pem",
             "client_key": "/etc/ssl/flannel/client-key.pem"}


@row("3 etcd CA and client certificate replaced")
def etcd_pki_replaced(bench: FaultBench) -> Outcome:
    """etcd is rebuilt with a new CA, server and client certificate and
    restarted with them (its data kept); then the etcd charm publishes the
    new CA, cert and key. The charm rewrites its TLS files (0600), restarts
    flanneld with them, goes active; the old pods keep pinging across the
    machines, every echo answered from etcd's restart to active (flanneld's
    restart leaves the routes and the vxlan device), and nothing on a node
    holds the old client key afterwards."""
    name = "3 etcd CA and client certificate replaced"
    bench.deploy()
    before = subnets(bench)
    pids = {m: bench.cluster.flanneld_pids(m) for m in before}
    etcd = bench.cluster.etcd
    old_key = etcd.pki.client_key.read_text().strip()
    pki = make_pki(bench.cluster.workdir / "pki-rebuilt", server_ips=[etcd.host])
    (a, pod_a), (_, pod_b) = sorted(bench.pods.items())[:2]
    # the probe for the old key finds it where it is before the change
    held = old_key_problems(bench, before, old_key)
    with bench.cluster.pinging(pod_a, pod_b.address) as echoes:
        problems = _replace_pki(bench, name, etcd, pki, before, pids)
    bench.say(f"   {a}'s pod to the other machine's while the PKI changed: {echoes}")
    if echoes.lost:
        problems.append(f"{echoes.lost} of {echoes.sent} echoes lost across the machines "
                        "while the PKI changed")
    if not any(TLS_FILES["client_key"] in problem for problem in held):
        problems.append(f"the probe for the old key did not find it before the change: {held}")
    problems += old_key_problems(bench, before, old_key)
    return bench.outcome(name, problems.recovery, problems)


def old_key_problems(bench: FaultBench, machines, old_key: str) -> list[str]:
    """Files of flannel's on each machine that still hold the old client key
    (a line of its base64 body): the TLS files, the unit's state, the
    install record."""
    line = old_key.splitlines()[1]
    out = []
    for m in machines:
        charm_dir = bench.ctl.unit(bench.cluster.unit_on(m))["charm-dir"]
        found = bench.machine(m).run(
            ["grep", "-rlF", line, "/etc/ssl/flannel", f"{charm_dir}/.unit-state.db",
             f"{charm_dir}/../flannel-install-record"], check=False).stdout
        out += [f"{m}: {path} still holds the old client key" for path in found.split()]
    return out


# flanneld restarted by a unit's last hook writes subnet.env once it holds its
# lease again: moments later (0.3 s on a quiet machine), after the unit shows
# active on the subnet.env it had
LEASE_WAIT = 30.0


def written_since(path: str, since: float) -> bool:
    """Whether the file at path is written at or after `since` (time.time())
    within LEASE_WAIT seconds."""
    def written() -> bool:
        try:
            return os.stat(path).st_mtime >= since
        except FileNotFoundError:
            return False
    return bool(wait_for(written, LEASE_WAIT))


class _Problems(list):
    recovery: float = 0.0


def _replace_pki(bench: FaultBench, name: str, etcd, pki, before, pids) -> _Problems:
    etcd.stop()
    etcd.pki = pki
    etcd.start()
    mark = len(bench.ctl.hook_log)
    update_status(bench)
    seen = bench.observe("etcd on a new PKI, the relation still has the old one")
    problems = _Problems(status_names_etcd(bench, seen, "while the relation had the old PKI"))
    problems += pods_ping(bench, "while the relation had the old PKI")
    published, started = time.time(), time.monotonic()
    text = {k: getattr(pki, k).read_text() for k in TLS_FILES}
    etcd_app(bench).update(client_ca=text["ca_cert"], client_cert=text["client_cert"],
                           client_key=text["client_key"])
    bench.cluster.settle()
    bench.recover()
    problems.recovery = time.monotonic() - started   # from the etcd charm publishing it
    show_durations(bench, mark, "from the new PKI to active")
    problems += hook_problems(bench, mark, "after the PKI change")
    for m in before:
        machine = bench.machine(m)
        for key, path in TLS_FILES.items():
            # the relation's values are stripped text: the file has no final newline
            if (machine.read_file(path) or b"").decode().strip() != text[key].strip():
                problems.append(f"{m}: {path} is not the new {key}")
            mode = stat.S_IMODE(os.stat(machine.path_on_host(path)).st_mode)
            if mode != 0o600:
                problems.append(f"{m}: {path} has mode {oct(mode)}, not 0600")
        if bench.cluster.flanneld_pids(m) == pids[m]:
            problems.append(f"{m}: flanneld was not restarted with the new credentials")
        if not written_since(machine.path_on_host(SUBNET_ENV), published):
            problems.append(f"{m}: flanneld wrote no subnet.env within {LEASE_WAIT:.0f}s of the "
                            "new PKI: it did not get its lease from etcd")
    problems += leases_kept(before, bench, "after the PKI change")
    return problems
