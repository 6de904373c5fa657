"""Every path the charm writes on a unit, in one place (see docs/design.md)."""

from __future__ import annotations

import os
from pathlib import Path

SERVICE_NAME = "flannel"

FLANNELD = Path("/usr/local/bin/flanneld")
FLANNELD_MODE = 0o755

CNI_BIN_DIR = Path("/opt/cni/bin")
CNI_PLUGIN = CNI_BIN_DIR / "flannel"
CNI_PLUGIN_MODE = 0o755

# The etcd client credentials from the relation; the key is a secret.
ETCD_TLS_DIR = ETCD_CREDENTIALS_DIR = Path("/etc/ssl/flannel")
ETCD_TLS_DIR_MODE = 0o700
ETCD_CA_NAME = "client-ca.pem"
ETCD_CERT_NAME = "client-cert.pem"
ETCD_KEY_NAME = "client-key.pem"
ETCD_CA = ETCD_TLS_DIR / ETCD_CA_NAME
ETCD_CERT = ETCD_TLS_DIR / ETCD_CERT_NAME
ETCD_KEY = ETCD_TLS_DIR / ETCD_KEY_NAME
ETCD_TLS_FILE_MODE = 0o600

SERVICE_FILE = Path("/lib/systemd/system") / f"{SERVICE_NAME}.service"
SERVICE_FILE_MODE = 0o644

CNI_CONF_DIR = Path("/etc/cni/net.d")
CNI_CONF_NAME = "10-flannel.conflist"
CNI_CONF = CNI_CONFLIST = CNI_CONF_DIR / CNI_CONF_NAME
CNI_CONF_MODE = 0o644

# Every file the charm writes (through its install record): what a stop that
# cannot trust its record names as left in place.
WRITTEN_FILES = (FLANNELD, CNI_PLUGIN, ETCD_CA, ETCD_CERT, ETCD_KEY, SERVICE_FILE, CNI_CONFLIST)

# Directories the container runtime owns and watches, kept on stop even if the
# charm created them: containerd watches conf_dir with inotify and loses the
# watch when it is removed, so a conflist written there later is never loaded
# ("cni plugin not initialized" for every new pod until containerd restarts).
RUNTIME_DIRECTORIES = (CNI_CONF_DIR, CNI_BIN_DIR)

# flanneld writes this; the charm only reads it.
SUBNET_ENV = Path("/run/flannel/subnet.env")

INSTALL_RECORD_DIR_NAME = "flannel-install-record"


def install_record_dir(charm_dir: str | os.PathLike[str]) -> Path:
    """The install record lives beside the charm directory, not inside it,
    so that an upgrade-charm (which replaces the charm directory) keeps it."""
    return Path(charm_dir).parent / INSTALL_RECORD_DIR_NAME
