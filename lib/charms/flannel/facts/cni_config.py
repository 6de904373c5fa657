"""The CNI side of a node, as rules: the plugin chain flannel's conflist
runs, the network name, and whether libcni would load a config file.

10-flannel.conflist runs `flannel` (which delegates to `bridge` with
`host-local` IPAM) and chains `portmap`; the runtime also runs `loopback`
for every pod. Only `flannel` is this charm's: the others come with the
principal (kubernetes-worker/-control-plane). When one is missing, pods
fail with libcni's "failed to find plugin" in `kubectl describe pod` only;
the unit's status says it instead (LP #1866869).
"""
from __future__ import annotations

import json
import re
from typing import Optional

THIS_CHARM = "this charm"
PRINCIPAL = "the principal"
# plugin -> who provides it, in the order the chain runs them.
CHAIN = (("flannel", THIS_CHARM), ("bridge", PRINCIPAL), ("host-local", PRINCIPAL),
         ("portmap", PRINCIPAL), ("loopback", PRINCIPAL))
# The principals' plugins: never this charm's, whoever wrote them last.
PRINCIPAL_PLUGINS = ("bridge", "host-local", "loopback", "portmap")

# The CNI network name of every cluster this charm or charm-flannel set up:
# host-local keeps its allocations in /var/lib/cni/networks/<name>, so a new
# name would start an empty table beside the running pods' addresses.
DEFAULT_NETWORK_NAME = "CDK-flannel-network"
# libcni's rule for a network name (it names host-local's table directory)
NETWORK_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.\-]*")
# The files libcni takes for network configs (ConfFiles in containerd's go-cni).
CONFIG_EXTENSIONS = (".conf", ".conflist", ".json")
LAST_RESERVED = "last_reserved_ip."


def valid_network_name(name: Optional[str]) -> bool:
    return bool(name) and NETWORK_NAME.fullmatch(name) is not None and name not in (".", "..")


def load_problem(text: bytes, conflist: bool) -> Optional[str]:
    """Why libcni would not load a config file of this content
    (ConfListFromBytes for a .conflist, ConfFromBytes otherwise), None if
    it would."""
    try:
        config = json.loads(text)
    except ValueError as error:
        return f"is not JSON ({error})"
    if not isinstance(config, dict):
        return "is not a JSON object"
    if conflist:
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


def network_name_in(text: bytes) -> Optional[str]:
    """The "name" of a CNI config file's content; None if it has none."""
    try:
        conf = json.loads(text)
    except ValueError:
        return None
    name = conf.get("name") if isinstance(conf, dict) else None
    return name if isinstance(name, str) and name else None
