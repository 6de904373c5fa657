"""Taking over a unit from the previous flannel charm (charm-flannel).

Operators reach this charm with `juju refresh flannel` on a running cluster:
the old charm's files, its running flanneld and its flags in the unit's state
DB are this charm's starting point. adopt() runs once, in the upgrade-charm
hook, before anything is installed.

The rule that tells "the old charm wrote this" from "the worker shipped this":

1. Nothing is adopted unless the unit's state DB holds a flag only the old
   charm ever set (OLD_ONLY_FLAGS): the evidence that the old charm ran here.
2. Paths no principal ever ships are the old charm's: flannel.service,
   10-flannel.conflist (and the older 10-flannel.conf), the etcd client
   credentials in /etc/ssl/flannel. The binaries flanneld and etcdctl in
   /usr/local/bin are the old charm's only if their bytes are the ones it
   unpacked into $CHARM_DIR/files/flannel/ (an operator may have installed
   an etcdctl of their own there since): otherwise they stay theirs.
3. The worker's plugins (bridge, host-local, loopback, portmap) are never
   adopted, whoever deleted or wrote them last.
4. /opt/cni/bin/flannel is the old charm's only if it is byte for byte the
   `cni-plugin/flannel` the old charm unpacked from its resource into
   $CHARM_DIR/files/flannel/ (a refresh keeps files the charm wrote there):
   at charm-flannel HEAD (a69755c) the old charm copied exactly that file.
   At the seed's revision (f79f180) the old charm never installed the plugin
   (the worker's cni-plugins did), so the file differs from the extract, or
   there is no extract: it stays the worker's, and this charm's install keeps
   it as the original to put back on stop.

Adopted files are recorded as the charm's own with no original: stop removes
them. The client key (0644 as interface-etcd wrote it) becomes 0600 and its
directory 0700. The old charm's 10-flannel.conf is superseded by the
conflist and deleted at once (the old charm itself deleted it on upgrade).
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from . import paths
from .install_record import InstallRecord

# The CNI network name of every cluster this charm or the old one set up:
# host-local keeps its allocations in /var/lib/cni/networks/<name>, so a new
# name would start an empty table beside the running pods' addresses.
DEFAULT_NETWORK_NAME = "CDK-flannel-network"
HOST_LOCAL_TABLES = Path("/var/lib/cni/networks")

# Flags only the old charm set (this charm has none of these names).
OLD_ONLY_FLAGS = (
    "flannel.binaries.installed",
    "flannel.etcd.credentials.installed",
    "flannel.service.installed",
    "flannel.service.started",
    "flannel.cni.available",
    "flannel.version.set",
    "nrpe-external-master.initial-config",
)
# Flags the old charm set under names this charm uses with another meaning:
# kept, they would make this charm skip writing its network config (and die
# in run_flanneld with no confirmed config) or its conflist.
SHARED_NAME_FLAGS = ("flannel.network.configured", "flannel.cni.configured")
# The old interfaces' flags this charm's interfaces never manage.
OLD_INTERFACE_FLAGS = ("cni.is-worker", "cni.is-master", "cni.configured")
# charms.reactive's data_changed keys the old charm kept in unitdata.
OLD_DATA_KEYS = ("reactive.data_changed.flannel_etcd_connections",
                 "reactive.data_changed.flannel_etcd_client_cert")

WORKER_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
# Where the old charm unpacked its resource, relative to $CHARM_DIR.
OLD_EXTRACT = Path("files") / "flannel"
OLD_EXTRACT_PLUGIN = OLD_EXTRACT / "cni-plugin" / "flannel"


@dataclass(frozen=True)
class OldCharmLayout:
    """Where the old charm put things (paths.py's paths, or a test's)."""
    flanneld: Path = paths.FLANNELD
    etcdctl: Path = Path("/usr/local/bin/etcdctl")
    service_file: Path = paths.SERVICE_FILE
    conflist: Path = paths.CNI_CONFLIST
    old_conf: Path = paths.CNI_CONF_DIR / "10-flannel.conf"
    tls_dir: Path = paths.ETCD_TLS_DIR
    cni_bin_dir: Path = paths.CNI_BIN_DIR

    @classmethod
    def under(cls, root: Path) -> "OldCharmLayout":
        """The same layout below `root` (for tests on real files)."""
        return cls(**{name: root / str(value).lstrip("/")
                      for name, value in cls().__dict__.items()})

    def only_the_old_charm_wrote(self) -> tuple[Path, ...]:
        return (self.service_file, self.conflist,
                self.tls_dir / paths.ETCD_CA_NAME, self.tls_dir / paths.ETCD_CERT_NAME,
                self.tls_dir / paths.ETCD_KEY_NAME)

    def old_charms_binaries(self) -> tuple[Path, ...]:
        """Installed from its resource's extract: the old charm's by content."""
        return (self.flanneld, self.etcdctl)

    @property
    def cni_plugin(self) -> Path:
        return self.cni_bin_dir / "flannel"


@dataclass
class Adoption:
    found: bool = False                       # the old charm's flags were there
    adopted: list[Path] = field(default_factory=list)
    left: dict[Path, str] = field(default_factory=dict)  # not adopted: why
    deleted: list[Path] = field(default_factory=list)
    network_name: Optional[str] = None        # the name in the old conflist
    flags_to_clear: list[str] = field(default_factory=list)


def old_charm_ran(flags: Iterable[str]) -> bool:
    return any(flag in OLD_ONLY_FLAGS for flag in flags)


def network_name_of(conflist: Path) -> Optional[str]:
    """The "name" of a CNI config file; None if absent or unreadable."""
    try:
        conf = json.loads(conflist.read_text())
    except (OSError, ValueError):
        return None
    name = conf.get("name") if isinstance(conf, dict) else None
    return name if isinstance(name, str) and name else None


def networks_with_allocations(tables_dir: Path) -> list[str]:
    """The networks host-local holds pod addresses for on this machine
    (/var/lib/cni/networks/<name>/<address> files), sorted."""
    found = []
    try:
        entries = sorted(tables_dir.iterdir())
    except OSError:
        return found
    for table in entries:
        try:
            names = [entry.name for entry in table.iterdir()] if table.is_dir() else []
        except OSError:
            continue
        if any(is_address(name) for name in names):
            found.append(table.name)
    return found


def is_address(name: str) -> bool:
    """Whether a host-local table entry's name is a pod address."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def cni_network_name(conflist: Path, remembered: Optional[str] = None,
                     tables_dir: Path = HOST_LOCAL_TABLES) -> str:
    """The network name to render: the one the conflist on the unit uses
    (whoever wrote it), else the one adoption found, else the one running
    pods hold addresses in (a unit re-added after a remove: its pods are still
    there), else the default. A new name would start an empty allocation
    table, and new pods would get addresses running pods hold."""
    named = network_name_of(conflist) or remembered
    if named:
        return named
    in_use = networks_with_allocations(tables_dir)
    if DEFAULT_NETWORK_NAME in in_use or len(in_use) != 1:
        return DEFAULT_NETWORK_NAME
    return in_use[0]


def _sha256(path: Path) -> Optional[str]:
    if path.is_symlink() or not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def unpacked_by_old_charm(path: Path, extract: Path) -> bool:
    """The file is byte for byte the one the old charm unpacked (rules 2, 4)."""
    ours = _sha256(path)
    return ours is not None and ours == _sha256(extract)


def old_charm_installed_plugin(plugin: Path, charm_dir: Path) -> bool:
    """Rule 4: the plugin is the very file the old charm unpacked."""
    return unpacked_by_old_charm(plugin, charm_dir / OLD_EXTRACT_PLUGIN)


def adopt(record: InstallRecord, flags: Iterable[str], charm_dir: Path,
          layout: OldCharmLayout = OldCharmLayout()) -> Adoption:
    """Take the old charm's files as this charm's own (see the module doc).
    Idempotent; does nothing on a unit the old charm never ran on."""
    flags = set(flags)
    result = Adoption(found=old_charm_ran(flags))
    if not result.found:
        return result
    result.network_name = network_name_of(layout.conflist) or network_name_of(layout.old_conf)
    for path in layout.only_the_old_charm_wrote():
        # The client key was 0644 (interface-etcd wrote it so): root-only now.
        mode = paths.ETCD_TLS_FILE_MODE if path.parent == layout.tls_dir else None
        if record.adopt(path, mode):
            result.adopted.append(path)
    for path in layout.old_charms_binaries():
        if unpacked_by_old_charm(path, charm_dir / OLD_EXTRACT / path.name):
            if record.adopt(path):
                result.adopted.append(path)
        elif path.exists():
            result.left[path] = ("not the binary the old charm unpacked: someone else's, "
                                 "never deleted")
    if layout.tls_dir.is_dir():
        record.adopt_directory(layout.tls_dir, paths.ETCD_TLS_DIR_MODE)
    plugin = layout.cni_plugin
    if old_charm_installed_plugin(plugin, charm_dir):
        if record.adopt(plugin):
            result.adopted.append(plugin)
    elif plugin.exists():
        result.left[plugin] = ("not the plugin the old charm unpacked: the principal's, "
                               "kept to be put back on stop")
    for name in WORKER_PLUGINS:
        if (layout.cni_bin_dir / name).exists():
            result.left[layout.cni_bin_dir / name] = "the principal's plugin: never adopted"
    if layout.old_conf.exists():
        layout.old_conf.unlink()
        result.deleted.append(layout.old_conf)
    result.flags_to_clear = sorted(
        f for f in flags if f in OLD_ONLY_FLAGS + SHARED_NAME_FLAGS + OLD_INTERFACE_FLAGS)
    return result
