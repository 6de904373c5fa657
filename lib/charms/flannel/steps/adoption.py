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
   At the bug report's revision (f79f180) the old charm never installed the plugin
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, NamedTuple, Optional

from ..adapters.install_record import InstallRecord
from ..adapters.node_files import network_name_of
from ..facts import paths
from ..facts.cni_config import PRINCIPAL_PLUGINS
from ..facts.flanneld import of_the_v2_era
from ..facts.paths import Paths
from .context import HookContext
from .outcome import Outcome

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

# Where the old charm unpacked its resource, relative to $CHARM_DIR.
OLD_EXTRACT = Path("files") / "flannel"
OLD_EXTRACT_PLUGIN = OLD_EXTRACT / "cni-plugin" / "flannel"


class OldCharmLayout(NamedTuple):
    """Where the old charm put things (the machine's, or below a test's root)."""
    flanneld: Path
    etcdctl: Path
    service_file: Path
    conflist: Path
    old_conf: Path
    tls_dir: Path
    cni_bin_dir: Path

    @classmethod
    def of(cls, where: Paths) -> "OldCharmLayout":
        return cls(flanneld=where.flanneld, etcdctl=where.flanneld.parent / "etcdctl",
                   service_file=where.service_file, conflist=where.cni_conflist,
                   old_conf=where.cni_conf_dir / "10-flannel.conf", tls_dir=where.etcd_tls_dir,
                   cni_bin_dir=where.cni_bin_dir)

    @classmethod
    def under(cls, root: Path) -> "OldCharmLayout":
        """The same layout below `root` (for tests on real files)."""
        return cls.of(Paths.under(root))

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
          layout: OldCharmLayout) -> Adoption:
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
    for name in PRINCIPAL_PLUGINS:
        if (layout.cni_bin_dir / name).exists():
            result.left[layout.cni_bin_dir / name] = "the principal's plugin: never adopted"
    if layout.old_conf.exists():
        layout.old_conf.unlink()
        result.deleted.append(layout.old_conf)
    result.flags_to_clear = sorted(
        f for f in flags if f in OLD_ONLY_FLAGS + SHARED_NAME_FLAGS + OLD_INTERFACE_FLAGS)
    return result


def take_over(ctx: HookContext, flags: Iterable[str]) -> Outcome:
    """A refresh from charm-flannel: its files become this charm's before
    the install handler writes anything (upgrade-charm's first handler)."""
    out = Outcome()
    found = adopt(ctx.record, flags, Path(ctx.juju.charm_dir), OldCharmLayout.of(ctx.paths))
    if not found.found:
        return out
    # still the old charm's flanneld (the install replaces it after this)
    if of_the_v2_era(ctx.machine.flanneld_version(ctx.paths.flanneld)):
        ctx.state.v011_rules = True
    for key in OLD_DATA_KEYS:
        ctx.state.kv.unset(key)
    if found.network_name:
        ctx.state.cni_network_name = found.network_name
    out.clear(*found.flags_to_clear)
    return out.say("Took over from the previous flannel charm: adopted {}; left {}; cleared "
                   "{}".format(", ".join(map(str, found.adopted)) or "nothing",
                               ", ".join(map(str, found.left)) or "nothing",
                               ", ".join(found.flags_to_clear)))
