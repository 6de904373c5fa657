"""Files of the node the charm reads but others write: flanneld's
subnet.env, the CNI plugins and configs the container runtime loads, and
host-local's allocation tables. Each read is a few stat() calls or one
small file, cheap enough for every hook."""
from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Optional

from ..facts.cni_config import (CHAIN, CONFIG_EXTENSIONS, DEFAULT_NETWORK_NAME, LAST_RESERVED,
                                load_problem, network_name_in, valid_network_name)
from ..facts.subnet_env import IncompleteSubnetEnv, SubnetEnv, parse_subnet_env


# --- subnet.env -------------------------------------------------------------------------

def read_subnet_env(path: os.PathLike) -> Optional[SubnetEnv]:
    """The parsed file, or None while it is absent or incomplete (flanneld
    has not got a lease yet). A file with bad values raises ValueError."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    try:
        return parse_subnet_env(text)
    except IncompleteSubnetEnv:
        return None


def read_lease(path: os.PathLike) -> Optional[SubnetEnv]:
    """flanneld's lease as subnet.env states it, None while the file is
    absent, incomplete or garbled: a garbled file is flanneld's to rewrite,
    never a reason for a hook to fail."""
    try:
        return read_subnet_env(path)
    except ValueError:
        return None


# --- the CNI plugins and configs ----------------------------------------------------------

def chain_problem(bin_dir: Path) -> Optional[str]:
    """The first plugin of the chain that is missing or not executable, as
    a status message; None when the chain is complete."""
    for name, provider in CHAIN:
        path = bin_dir / name
        if not path.is_file():
            return f'CNI plugin "{name}" missing from {bin_dir} (provided by {provider})'
        if not os.access(path, os.X_OK):
            return (f'CNI plugin "{name}" in {bin_dir} is not executable '
                    f'(provided by {provider})')
    return None


def runtime_config_problem(conf_dir: Path, ours: Path) -> Optional[str]:
    """A network config the container runtime fails on before it reaches a
    network, as a status message; None when it loads one. containerd
    (go-cni) reads conf_dir's files in name order until one gives a
    network, and gives up on the first that does not load: a dangling link
    or bad JSON sorted before flannel's conflist stops every pod on the
    node. A config of another network that loads first (Multus's, say) is
    the operator's choice, not a problem."""
    try:
        names = sorted(n for n in os.listdir(conf_dir) if n.endswith(CONFIG_EXTENSIONS))
    except OSError:
        names = []
    for name in names:
        path = conf_dir / name
        if path.is_dir():
            continue
        try:
            why = load_problem(path.read_bytes(), conflist=path.suffix == ".conflist")
        except FileNotFoundError:
            why = (f"is a link to the missing {os.readlink(path)}" if path.is_symlink()
                   else "is gone")
        except OSError as error:
            why = f"cannot be read ({error.strerror})"
        if why:
            return f"CNI config {path} {why}: the container runtime starts no pod"
        return None
    return f"CNI config {ours} is missing: the container runtime starts no pod"


def network_name_of(conflist: Path) -> Optional[str]:
    """The "name" of a CNI config file; None if absent or unreadable."""
    try:
        return network_name_in(conflist.read_bytes())
    except OSError:
        return None


# --- host-local's tables ------------------------------------------------------------------

def pod_addresses_in(table: Path) -> list[str]:
    """The pod addresses a host-local table holds (one file each)."""
    try:
        return [name for name in os.listdir(table) if _is_address(name)]
    except OSError:
        return []


def networks_with_allocations(tables_dir: Path) -> list[str]:
    """The networks host-local holds pod addresses for on this machine, sorted."""
    try:
        tables = sorted(tables_dir.iterdir())
    except OSError:
        return []
    return [table.name for table in tables if table.is_dir() and pod_addresses_in(table)]


def handed_out(network_name: str, tables_dir: Path) -> tuple:
    """The addresses host-local's table of a CNI network names: one file per
    pod address, and the last address it reserved in each range (kept
    after the pods are gone)."""
    if not valid_network_name(network_name):
        return ()
    table = tables_dir / network_name
    try:
        entries = os.listdir(table)
    except OSError:
        return ()
    found = []
    for entry in entries:
        text = entry
        if entry.startswith(LAST_RESERVED):
            try:
                text = (table / entry).read_text().strip()
            except OSError:
                continue
        try:
            found.append(ipaddress.ip_address(text))
        except ValueError:
            continue
    return tuple(found)


def cni_network_name(conflist: Path, remembered: Optional[str], tables_dir: Path) -> str:
    """The network name to render: the one the conflist on the unit uses
    (whoever wrote it), else the one charm-flannel's conflist had (adoption
    remembers it), else the one running pods hold addresses in (a unit
    re-added after a remove: its pods are still there), else the default.
    A new name would start an empty allocation table, and new pods would
    get addresses running pods hold."""
    named = network_name_of(conflist) or remembered
    if named:
        return named
    in_use = networks_with_allocations(tables_dir)
    if DEFAULT_NETWORK_NAME in in_use or len(in_use) != 1:
        return DEFAULT_NETWORK_NAME
    return in_use[0]


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
