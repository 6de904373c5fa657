"""The etcd client credentials on disk: root-only, written through the record."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from charms.flannel import paths
from charms.flannel.install_record import InstallRecord


@dataclass(frozen=True)
class ClientFiles:
    ca_file: Path
    cert_file: Path
    key_file: Path


def write_client_credentials(record: InstallRecord, ca: str, cert: str, key: str,
                             directory: Path = paths.ETCD_TLS_DIR) -> tuple[ClientFiles, bool]:
    """Write CA, cert and key (all 0600, directory 0700); True if any changed.

    The key is a secret: it goes to disk only here and is never logged.
    """
    record.ensure_directory(directory, paths.ETCD_TLS_DIR_MODE)
    files = client_files(directory)
    changed = False
    for path, pem in ((files.ca_file, ca), (files.cert_file, cert), (files.key_file, key)):
        changed |= record.install(path, pem.encode(), paths.ETCD_TLS_FILE_MODE)
    return files, changed


def client_files(directory: Path = paths.ETCD_TLS_DIR) -> ClientFiles:
    return ClientFiles(directory / paths.ETCD_CA_NAME,
                       directory / paths.ETCD_CERT_NAME,
                       directory / paths.ETCD_KEY_NAME)
