"""The etcd client credentials on disk: root-only, written through the record."""
from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path
from typing import NamedTuple, Optional

from ..facts import paths
from ..facts.paths import Paths
from .install_record import InstallRecord


class ClientFiles(NamedTuple):
    ca_file: Path
    cert_file: Path
    key_file: Path


def write_client_credentials(record: InstallRecord, where: Paths, ca: str, cert: str,
                             key: str) -> tuple[ClientFiles, bool]:
    """Write CA, cert and key (all 0600, directory 0700); True if any changed.

    The key is a secret: it goes to disk only here and is never logged.
    """
    record.ensure_directory(where.etcd_tls_dir, paths.ETCD_TLS_DIR_MODE)
    files = client_files(where)
    changed = False
    for path, pem in ((files.ca_file, ca), (files.cert_file, cert), (files.key_file, key)):
        changed |= record.install(path, pem.encode(), paths.ETCD_TLS_FILE_MODE, sole=True)
    return files, changed


def client_files(where: Paths) -> ClientFiles:
    return ClientFiles(where.etcd_ca, where.etcd_cert, where.etcd_key)


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\s*\n([A-Za-z0-9+/=\s]+?)\n?"
                        r"-----END \1-----")


def pem_problem(ca: str, cert: str, key: str) -> Optional[str]:
    """What is wrong with the relation's TLS material, for a waiting status
    (never its content: the key is a secret), or None. Each must hold a PEM
    block of its kind whose body is base64: the CA and the certificate a
    CERTIFICATE, the key a PRIVATE KEY (PKCS#8, RSA or EC)."""
    for what, text, kinds in (("CA certificate", ca, ("CERTIFICATE",)),
                              ("client certificate", cert, ("CERTIFICATE",)),
                              ("client key", key, ("PRIVATE KEY", "RSA PRIVATE KEY",
                                                   "EC PRIVATE KEY"))):
        blocks = _PEM_BLOCK.findall(text or "") if isinstance(text, str) else []
        # `openssl ecparam -genkey` writes EC PARAMETERS before the key; Go's
        # X509KeyPair (flanneld's) skips such blocks
        blocks = [(kind, body) for kind, body in blocks if kind != "EC PARAMETERS"]
        if not blocks:
            return f"etcd relation: the {what} is not PEM"
        for kind, body in blocks:
            if kind not in kinds:
                return f"etcd relation: the {what} is a PEM {kind}, not a {kinds[0]}"
            try:
                base64.b64decode("".join(body.split()), validate=True)
            except (binascii.Error, ValueError):
                return f"etcd relation: the {what} is not valid PEM (bad base64)"
    return None
