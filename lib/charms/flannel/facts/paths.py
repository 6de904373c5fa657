"""Every path the charm reads or writes on a unit, in one place
(docs/reference/unit-paths.md lists them for operators).

`Paths()` is the machine's; `Paths.under(root)` the same tree below a
directory, for tests that run the charm's steps on real files without
root. The paths are part of a refresh's contract: a unit refreshed from an
earlier revision finds its files where that one wrote them.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

SERVICE_NAME = "flannel"
CNI_CONF_NAME = "10-flannel.conflist"
INSTALL_RECORD_DIR_NAME = "flannel-install-record"

FLANNELD_MODE = 0o755
CNI_PLUGIN_MODE = 0o755
ETCD_TLS_DIR_MODE = 0o700
ETCD_TLS_FILE_MODE = 0o600
SERVICE_FILE_MODE = 0o644
CNI_CONF_MODE = 0o644
ETCD_CA_NAME = "client-ca.pem"
ETCD_CERT_NAME = "client-cert.pem"
ETCD_KEY_NAME = "client-key.pem"
OFFLOAD_UDEV_RULE_NAME = "90-flannel-vxlan-checksum.rules"
MODULES_LOAD_NAME = "flannel.conf"
MODULES_LOAD_MODE = 0o644
UDEV_RULE_MODE = 0o644
NET_CONF_NAME = "net-conf.json"
NET_CONF_MODE = 0o644


class _Below:
    """A file of a known name in one of the tree's directories."""

    def __init__(self, directory: str, name: str):
        self.directory, self.name = directory, name

    def __get__(self, paths, owner=None) -> Path:
        return getattr(paths, self.directory) / self.name


class Paths(NamedTuple):
    flanneld: Path = Path("/usr/local/bin/flanneld")
    cni_bin_dir: Path = Path("/opt/cni/bin")
    # the etcd client credentials from the relation; the key is a secret
    etcd_tls_dir: Path = Path("/etc/ssl/flannel")
    service_file: Path = Path("/lib/systemd/system") / f"{SERVICE_NAME}.service"
    cni_conf_dir: Path = Path("/etc/cni/net.d")
    # flanneld writes it; the charm only reads it (and drops a stale one)
    subnet_env: Path = Path("/run/flannel/subnet.env")
    # host-local's allocation tables, one directory per CNI network name
    host_local_tables: Path = Path("/var/lib/cni/networks")
    # where `ip` finds links (a stat tells whether there is a bridge)
    sys_class_net: Path = Path("/sys/class/net")
    # udev turns checksum offload off on a vxlan device flanneld makes anew
    udev_rules_dir: Path = Path("/etc/udev/rules.d")
    # the kernel modules systemd loads at boot (br_netfilter for flanneld)
    modules_load_dir: Path = Path("/etc/modules-load.d")
    # br_netfilter's sysctls: there only while the module is loaded
    proc_sys_net_bridge: Path = Path("/proc/sys/net/bridge")
    # the running kernel's release ("6.8.0-45-generic"): whether it has the
    # NAT fix that makes checksum offload safe (facts/offload.py)
    kernel_release: Path = Path("/proc/sys/kernel/osrelease")
    # root's kubeconfig, the principal's: subnet-manager=kubernetes reads it
    kubeconfig: Path = Path("/root/.kube/config")
    # flanneld's network config in subnet-manager=kubernetes (-net-config-path)
    net_conf_dir: Path = Path("/etc/flannel")
    # the machine's name, which kubelet registers its Node under by default
    hostname: Path = Path("/etc/hostname")

    @classmethod
    def under(cls, root: os.PathLike) -> "Paths":
        """The same tree below `root`."""
        return cls(**{f: Path(root) / str(getattr(cls(), f)).lstrip("/")
                      for f in cls._fields})

    cni_plugin = _Below("cni_bin_dir", "flannel")
    cni_conflist = _Below("cni_conf_dir", CNI_CONF_NAME)
    etcd_ca = _Below("etcd_tls_dir", ETCD_CA_NAME)
    etcd_cert = _Below("etcd_tls_dir", ETCD_CERT_NAME)
    etcd_key = _Below("etcd_tls_dir", ETCD_KEY_NAME)
    offload_udev_rule = _Below("udev_rules_dir", OFFLOAD_UDEV_RULE_NAME)
    modules_load_file = _Below("modules_load_dir", MODULES_LOAD_NAME)
    net_conf = _Below("net_conf_dir", NET_CONF_NAME)

    @property
    def written_files(self) -> tuple[Path, ...]:
        """Every file the charm writes (through its install record): what a
        stop that cannot trust its record names as left in place."""
        return (self.flanneld, self.cni_plugin, self.etcd_ca, self.etcd_cert, self.etcd_key,
                self.service_file, self.cni_conflist, self.offload_udev_rule,
                self.modules_load_file, self.net_conf)

    @property
    def runtime_directories(self) -> tuple[Path, ...]:
        """Directories the container runtime owns and watches, kept on stop
        even if the charm created them: containerd watches the conf dir with
        inotify and loses the watch when it is removed, so a conflist
        written there later is never loaded ("cni plugin not initialized"
        for every new pod until containerd restarts)."""
        return (self.cni_conf_dir, self.cni_bin_dir)


def install_record_dir(charm_dir: os.PathLike) -> Path:
    """The install record lives beside the charm directory, not inside it,
    so that an upgrade-charm (which replaces the charm directory) keeps it."""
    return Path(charm_dir).parent / INSTALL_RECORD_DIR_NAME
