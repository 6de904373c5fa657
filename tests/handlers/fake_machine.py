"""A machine in memory for the handler tier: the `ip`, `iptables`, `nft`,
`ethtool` and `systemctl` calls the charm's adapters make (adapters/machine.py), answered
in the shapes the real tools print. tests/unit/test_machine_contract.py
runs the adapters against a real kernel and against this, and compares.

Paths (flanneld's `-version`, scripts the tests wrote) run for real; the
fake flanneld (`on_start`) is what a test says flanneld does when
flannel.service starts: lease a subnet (write subnet.env), or nothing."""
from __future__ import annotations

import ipaddress
import json
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from charms.flannel.adapters.machine import Machine
from charms.flannel.facts.flanneld import HEALTHZ_IP, HEALTHZ_PORT


@dataclass
class Link:
    name: str
    kind: str = "veth"               # linkinfo.info_kind ("" for a plain device)
    mtu: int = 1500
    # "10.1.52.1/24", "fd10::1/64", "169.254.7.9/16 scope link"
    addresses: list = field(default_factory=list)
    master: Optional[str] = None
    up: bool = True
    loopback: bool = False

    def shown(self, details: bool = False) -> dict:
        entry = {"ifname": self.name, "mtu": self.mtu,
                 "flags": (["LOOPBACK"] if self.loopback else []) + (["UP", "LOWER_UP"]
                                                                     if self.up else []),
                 "operstate": ("UNKNOWN" if self.loopback else "UP") if self.up else "DOWN",
                 "link_type": "loopback" if self.loopback else "ether"}
        if self.master:
            entry["master"] = self.master
        if details and self.kind:
            entry["linkinfo"] = {"info_kind": self.kind}
        return entry

    def with_addresses(self) -> dict:
        """`ip -j addr show` of the link: an address written "... scope link"
        has that scope, and an IPv4 one of scope link is listed before the
        others, as the kernel lists it."""
        entry = self.shown()
        entry["addr_info"] = []
        for text in sorted(self.addresses, key=lambda text: not text.endswith(" scope link")):
            address = ipaddress.ip_interface(text.split()[0])
            scope = "link" if text.endswith(" scope link") else \
                "host" if address.ip.is_loopback else "global"
            entry["addr_info"].append({
                "family": "inet" if address.version == 4 else "inet6",
                "local": str(address.ip), "prefixlen": address.network.prefixlen,
                "scope": scope})
        return entry


class FakeMachine(Machine):
    def __init__(self, address: str = "172.31.254.11/24", address6: Optional[str] = None,
                 sys_class_net: Optional[Path] = None, proc_sys_net_bridge: Optional[Path] = None):
        super().__init__(runner=self._answer, which=lambda command: (
            None if command in self.missing else f"/usr/sbin/{command}"))
        self.missing: set[str] = set()   # commands this machine lacks
        # where the kernel lists links (the charm stats it before asking `ip`)
        self.sys_class_net = sys_class_net
        # br_netfilter's sysctls, there while the module is loaded (it is, at first)
        self.proc_sys_net_bridge = proc_sys_net_bridge
        self.modules_available = {"br_netfilter"}
        if proc_sys_net_bridge is not None:
            self._modprobe(["br_netfilter"])
        self.links: dict[str, Link] = {
            "lo": Link("lo", kind="", mtu=65536, addresses=["127.0.0.1/8", "::1/128"],
                       loopback=True),
            "eth0": Link("eth0", addresses=[address] + ([address6] if address6 else []))}
        network = ipaddress.ip_interface(address).network
        self.routes: list[dict] = [
            {"dst": "default", "gateway": str(next(network.hosts())), "dev": "eth0"},
            {"dst": str(network), "dev": "eth0", "protocol": "kernel", "scope": "link"}]
        self.routes6: list[dict] = []
        self.iptables = {"iptables": "", "ip6tables": ""}   # iptables-save text
        self.nft_tables: set[tuple[str, str]] = set()      # (family, name)
        self.tx_checksum: dict[str, bool] = {}             # vxlan device -> offload on
        self.units: dict[str, dict] = {}        # name -> {"active", "enabled", "masked"}
        self.reloads = 0
        self.calls: list[list[str]] = []
        self.on_start: Callable[[], None] = lambda: None   # the fake flanneld
        # what flanneld's /readyz answers while it runs (None: nothing, a hung flanneld);
        # in the hook that started it, nothing yet (it leases first)
        self.readyz: Optional[int] = 200
        self.starting = False
        self.journal: list[str] = []   # what flanneld logged (journalctl -u flannel -o cat)
        # seconds since this machine booted (the harness moves it with its clock; a
        # test may step the wall clock alone), and each unit's main process:
        # {unit: (pid, started at on that clock)}
        self.since_boot: Callable[[], float] = lambda: 0.0
        self.processes: dict[str, tuple[int, float]] = {}
        self._pids = iter(range(4000, 1 << 22))

    # --- what tests set up ---------------------------------------------------------------
    def bridge(self, *addresses: str, ports: int = 0, mtu: int = 1450) -> None:
        self.links["cni0"] = Link("cni0", kind="bridge", mtu=mtu, addresses=list(addresses))
        for n in range(ports):
            self.links[f"veth{n}"] = Link(f"veth{n}", master="cni0")
        self._listed("cni0", True)

    def vxlan_device(self, name: str, mtu: int = 1450) -> None:
        """A vxlan device as flanneld makes it (offload on)."""
        self.links[name] = Link(name, kind="vxlan", mtu=mtu)
        self.tx_checksum.pop(name, None)
        self._listed(name, True)

    def _listed(self, name: str, there: bool) -> None:
        if self.sys_class_net is not None:
            entry = self.sys_class_net / name
            if there:
                entry.mkdir(parents=True, exist_ok=True)
            elif entry.exists():
                entry.rmdir()

    def started(self, unit: str = "flannel") -> int:
        return sum(1 for call in self.calls if call[:3] == ["systemctl", "start", unit])

    def restarted_by_systemd(self, unit: str = "flannel") -> None:
        """The unit's process died and systemd's Restart= started it again:
        a new process, the charm not asked."""
        self.processes[unit] = (next(self._pids), self.since_boot())

    # --- the tools --------------------------------------------------------------------------
    def process_started(self, pid: int) -> Optional[float]:
        """A unit's main process runs while the unit is active (a test that
        marks it inactive has killed it)."""
        for unit, (started_pid, started_at) in self.processes.items():
            if started_pid == pid and self.units.get(unit, {}).get("active"):
                return started_at
        return None

    def process_age(self, pid: int) -> Optional[float]:
        started = self.process_started(pid)
        return None if started is None else self.since_boot() - started

    def http_status(self, host: str, port: int, path: str, timeout: float = 1.0
                    ) -> Optional[int]:
        """flanneld's health server (the only one the charm asks) while
        flannel.service runs."""
        self.calls.append(["GET", f"http://{host}:{port}{path}"])
        if self.starting or not self.units.get("flannel", {}).get("active") or (
                host, port) != (HEALTHZ_IP, HEALTHZ_PORT):
            return None
        return self.readyz if path == "/readyz" else 200

    def _answer(self, argv: list, *, check: bool, input=None) -> subprocess.CompletedProcess:
        self.calls.append(list(argv))
        if argv[0].startswith("/"):   # a binary of the test's: for real
            return subprocess.run(argv, capture_output=True, text=True, check=check, input=input)
        try:
            out = getattr(self, "_" + argv[0].replace("-", "_"))(argv[1:])
            done = subprocess.CompletedProcess(argv, 0, out or "", "")
        except _Refused as refused:
            done = subprocess.CompletedProcess(argv, refused.code, "", refused.message)
        if check and done.returncode:
            raise subprocess.CalledProcessError(done.returncode, argv, done.stdout, done.stderr)
        return done

    def _ip(self, args: list) -> str:
        words = [a for a in args if a not in ("-j", "-d")]
        family = next((int(w[1]) for w in words if w in ("-4", "-6")), None)
        words = [w for w in words if w not in ("-4", "-6")]
        details = "-d" in args
        if words[:2] == ["addr", "show"]:
            return json.dumps([link.with_addresses() for link in self._pick(words[2:])])
        if words[:2] == ["link", "show"]:
            if words[2:3] == ["master"]:
                return json.dumps([link.shown(details) for link in self.links.values()
                                   if link.master == words[3]])
            return json.dumps([link.shown(details) for link in self._pick(words[2:])])
        if words[:2] == ["addr", "del"]:
            link = self._link(words[words.index("dev") + 1])
            wanted = str(ipaddress.ip_interface(words[2]))
            held = {a: str(ipaddress.ip_interface(a.split()[0])) for a in link.addresses}
            if wanted not in held.values():
                raise _Refused(2, "RTNETLINK answers: Cannot assign requested address")
            link.addresses = [a for a in link.addresses if held[a] != wanted]
            return ""
        if words[:2] == ["link", "delete"]:
            self._link(words[2])
            del self.links[words[2]]
            if (self.sys_class_net / words[2]).exists() if self.sys_class_net else False:
                self._listed(words[2], False)
            for link in self.links.values():
                if link.master == words[2]:
                    link.master = None
            return ""
        if words[:2] == ["link", "set"] and "mtu" in words:
            self._link(words[words.index("dev") + 1]).mtu = int(words[words.index("mtu") + 1])
            return ""
        if words[0] == "route":
            routes = self.routes6 if family == 6 else self.routes
            if words[1:2] == ["show"]:
                if words[2:3] == ["default"]:
                    return json.dumps([r for r in routes if r["dst"] == "default"])
                return json.dumps(routes)
            if words[1:2] == ["del"]:
                before = len(routes)
                routes[:] = [r for r in routes if r["dst"] != words[2]]
                if len(routes) == before:
                    raise _Refused(2, "RTNETLINK answers: No such process")
                return ""
        raise AssertionError(f"the fake machine does not know `ip {' '.join(args)}`")

    def _pick(self, words: list) -> list:
        if words[:1] == ["dev"]:
            return [self._link(words[1])]
        return list(self.links.values())

    def _link(self, name: str) -> Link:
        if name not in self.links:
            raise _Refused(1, f'Device "{name}" does not exist.')
        return self.links[name]

    def _iptables_save(self, args):
        return self.iptables["iptables"]

    def _ip6tables_save(self, args):
        return self.iptables["ip6tables"]

    def _iptables(self, args, which="iptables"):
        """-w -t TABLE -D CHAIN ... | -F CHAIN | -X CHAIN, on the saved text."""
        table = args[args.index("-t") + 1]
        lines, current = [], None
        op = next(a for a in args if a in ("-D", "-F", "-X"))
        rest = args[args.index(op) + 1:]
        for line in self.iptables[which].splitlines():
            if line.startswith("*"):
                current = line[1:]
            if current == table:
                if op == "-D" and line.startswith("-A ") and shlex.split(line)[1:] == rest:
                    op = "done"   # one rule deleted
                    continue
                if op == "-F" and line.startswith(f"-A {rest[0]} "):
                    continue
                if op == "-X" and line.startswith(f":{rest[0]} "):
                    continue
            lines.append(line)
        self.iptables[which] = "\n".join(lines) + "\n"
        return ""

    def _ip6tables(self, args):
        return self._iptables(args, "ip6tables")

    def unload_br_netfilter(self) -> None:
        for sysctl in self.proc_sys_net_bridge.iterdir():
            sysctl.unlink()

    def _modprobe(self, args):
        """modprobe MODULE: br_netfilter's sysctls appear, if it is available"""
        if args[0] not in self.modules_available:
            raise _Refused(1, f"modprobe: FATAL: Module {args[0]} not found in directory "
                              "/lib/modules/6.8.0-49-generic")
        if args[0] == "br_netfilter":
            self.proc_sys_net_bridge.mkdir(parents=True, exist_ok=True)
            for name in ("bridge-nf-call-iptables", "bridge-nf-call-ip6tables"):
                (self.proc_sys_net_bridge / name).write_text("1\n")
        return ""

    def _nft(self, args):
        """list tables | delete table FAMILY NAME"""
        if args == ["list", "tables"]:
            return "".join(f"table {family} {name}\n" for family, name in sorted(self.nft_tables))
        if args[:2] == ["delete", "table"]:
            if (args[2], args[3]) not in self.nft_tables:
                raise _Refused(1, "Error: No such file or directory")
            self.nft_tables.discard((args[2], args[3]))
            return ""
        raise AssertionError(f"the fake machine does not know `nft {' '.join(args)}`")

    def _ethtool(self, args):
        """-k DEV | -K DEV tx-checksum-ip-generic on|off, on vxlan devices"""
        device = args[1]
        if device not in self.links:
            raise _Refused(1, "netlink error: no device matches name")
        if args[0] == "-K":
            self.tx_checksum[device] = args[3] == "on"
            return ""
        on = self.tx_checksum.setdefault(device, True)
        return (f"Features for {device}:\ntx-checksumming: {'on' if on else 'off'}\n"
                f"\ttx-checksum-ip-generic: {'on' if on else 'off'}\n")

    def _journalctl(self, args):
        lines = int(args[args.index("-n") + 1]) if "-n" in args else len(self.journal)
        return "".join(line + "\n" for line in self.journal[-lines:])

    def _systemctl(self, args):
        verb = args[0]
        if verb == "daemon-reload":
            self.reloads += 1
            return ""
        unit = self.units.setdefault(args[1], {"active": False, "enabled": False,
                                               "masked": False})
        if verb == "is-active":
            if not unit["active"]:
                raise _Refused(3, "")
        elif verb == "show":   # show -p ActiveState -p MainPID UNIT
            unit = self.units.setdefault(args[-1], {"active": False, "enabled": False,
                                                    "masked": False})
            pid = self.processes[args[-1]][0] if unit["active"] else 0
            return f"MainPID={pid}\nActiveState={'active' if unit['active'] else 'inactive'}\n"
        elif verb in ("start", "restart"):
            if unit["masked"]:
                raise _Refused(1, f"Failed to start {args[1]}.service: Unit is masked.")
            if not unit["active"] or verb == "restart":
                self.processes[args[1]] = (next(self._pids), self.since_boot())
            unit["active"] = True
            self.starting = True
            self.on_start()
        elif verb == "stop":
            unit["active"] = False
            self.processes.pop(args[1], None)
        elif verb in ("enable", "disable"):
            unit["enabled"] = verb == "enable"
        elif verb in ("mask", "unmask"):
            unit["masked"] = verb == "mask"
        return ""


class _Refused(Exception):
    def __init__(self, code: int, message: str):
        self.code, self.message = code, message
