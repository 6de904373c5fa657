"""The CNI chain the conflist needs on this machine, checked cheaply.

10-flannel.conflist runs `flannel` (which delegates to `bridge` with
`host-local` IPAM) and chains `portmap`; the runtime also runs `loopback`
for every pod. Only `flannel` is this charm's: the others come with the
principal (kubernetes-worker/-control-plane). When one is missing, pods fail
with libcni's "failed to find plugin" in `kubectl describe pod` only; the
unit's status says it instead (LP #1866869).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from . import paths

THIS_CHARM = "this charm"
PRINCIPAL = "the principal"
# plugin -> who provides it, in the order the chain runs them.
CHAIN = (("flannel", THIS_CHARM), ("bridge", PRINCIPAL), ("host-local", PRINCIPAL),
         ("portmap", PRINCIPAL), ("loopback", PRINCIPAL))


def chain_problem(bin_dir: Path = paths.CNI_BIN_DIR) -> Optional[str]:
    """The first plugin of the chain that is missing or not executable, as
    a status message; None when the chain is complete. A few stat() calls."""
    for name, provider in CHAIN:
        path = bin_dir / name
        if not path.is_file():
            return f'CNI plugin "{name}" missing from {bin_dir} (provided by {provider})'
        if not os.access(path, os.X_OK):
            return (f'CNI plugin "{name}" in {bin_dir} is not executable '
                    f'(provided by {provider})')
    return None


# The files libcni takes for network configs (ConfFiles in containerd's go-cni).
CONFIG_EXTENSIONS = (".conf", ".conflist", ".json")


def runtime_config_problem(conf_dir: Path = paths.CNI_CONF_DIR,
                           ours: Path = paths.CNI_CONFLIST) -> Optional[str]:
    """A network config the container runtime fails on before it reaches a
    network, as a status message; None when it loads one. containerd (go-cni)
    reads conf_dir's files in name order until one gives a network, and
    gives up on the first that does not load: a dangling link or bad JSON
    sorted before flannel's conflist stops every pod on the node. A config of
    another network that loads first (Multus's, say) is the operator's
    choice, not a problem."""
    try:
        names = sorted(n for n in os.listdir(conf_dir) if n.endswith(CONFIG_EXTENSIONS))
    except OSError:
        names = []
    for name in names:
        path = conf_dir / name
        if path.is_dir():
            continue
        why = _load_problem(path)
        if why:
            return f"CNI config {path} {why}: the container runtime starts no pod"
        return None
    return f"CNI config {ours} is missing: the container runtime starts no pod"


def _load_problem(path: Path) -> Optional[str]:
    """Why libcni would not load a config file (ConfListFromFile,
    ConfFromFile), None if it would."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return f"is a link to the missing {os.readlink(path)}" if path.is_symlink() \
            else "is gone"
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    try:
        config = json.loads(text)
    except ValueError as error:
        return f"is not JSON ({error})"
    if not isinstance(config, dict):
        return "is not a JSON object"
    if path.suffix == ".conflist":
        plugins = config.get("plugins")
        if not isinstance(config.get("name"), str) or not config.get("name"):
            return "names no network"
        if not isinstance(plugins, list) or not plugins:
            return "lists no plugin"
        if not all(isinstance(p, dict) and p.get("type") for p in plugins):
            return "has a plugin without a type"
        return None
    if not config.get("type"):
        return "has no plugin type"
    return None


def published_cidr(confirmed: dict) -> str:
    """The pod network as the cni relation carries it: "10.1.0.0/16", or
    for dual-stack "10.1.0.0/16,fd10:1::/56" (IPv4 first, no spaces), which
    kubernetes-control-plane passes as is to kube-controller-manager's and
    kube-proxy's --cluster-cidr."""
    from .daemon import ipv6_shape
    ipv6 = ipv6_shape(confirmed)
    return ",".join([confirmed["Network"]] + ([str(ipv6[0])] if ipv6 else []))
