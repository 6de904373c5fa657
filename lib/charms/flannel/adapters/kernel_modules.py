"""br_netfilter, the kernel module flanneld needs, loaded now and at boot.

flanneld >= 0.26 exits at start when /proc/sys/net/bridge/bridge-nf-call-
iptables (and, with IPv6, bridge-nf-call-ip6tables) is missing, that is
when br_netfilter is not loaded: pods on one node bridged through cni0
would otherwise skip iptables (kube-proxy's Services, flanneld's forward
rules). The charm loads it with modprobe, and lists it in
/etc/modules-load.d/flannel.conf (through the install record, removed with
flannel) so that systemd-modules-load loads it at every boot. The module
itself stays loaded on removal: others (kube-proxy, another CNI) need it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from .machine import Machine

BR_NETFILTER = "br_netfilter"
MODULES_LOAD = (b"# Written by the flannel charm, removed with it: flanneld needs br_netfilter.\n"
                + BR_NETFILTER.encode() + b"\n")


def bridge_sysctls(ipv6: bool) -> tuple[str, ...]:
    return ("bridge-nf-call-iptables",) + (("bridge-nf-call-ip6tables",) if ipv6 else ())


def br_netfilter_loaded(proc_sys_net_bridge: Path, ipv6: bool) -> bool:
    return all((proc_sys_net_bridge / name).exists() for name in bridge_sysctls(ipv6))


def load_br_netfilter(machine: Machine) -> Optional[str]:
    """modprobe br_netfilter: None when it loaded, else what modprobe said."""
    try:
        done = machine.run(["modprobe", BR_NETFILTER], check=False)
    except OSError as error:   # no modprobe at all
        return str(error)
    if done.returncode:
        return (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
    return None
