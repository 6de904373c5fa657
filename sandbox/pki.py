"""A throw-away PKI for a test etcd: a CA, a server certificate and a client
certificate, made with the openssl command line.

Certificates are kept strict (CA basicConstraints/keyUsage, key identifiers,
EKUs) so that both Go (etcd, flanneld) and Python's ssl accept them.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

OPENSSL = "openssl"
DAYS = 30


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    ca_key: Path  # kept so that more certificates can be signed later


def _openssl(*args: str | os.PathLike[str]) -> None:
    result = subprocess.run(
        [OPENSSL, *map(str, args)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _new_key(path: Path) -> None:
    # EC P-256: small and fast, and accepted by Go and OpenSSL alike.
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", path)
    os.chmod(path, 0o600)


def _sign(directory: Path, name: str, subject: str, extensions: str,
          ca_cert: Path, ca_key: Path) -> tuple[Path, Path]:
    """Make name-key.pem and name-cert.pem signed by the CA."""
    key, csr, cert = (directory / f"{name}-key.pem", directory / f"{name}.csr",
                      directory / f"{name}-cert.pem")
    ext = directory / f"{name}.ext"
    ext.write_text(extensions)
    _new_key(key)
    _openssl("req", "-new", "-key", key, "-subj", subject, "-out", csr)
    _openssl("x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key,
             "-set_serial", str(int.from_bytes(os.urandom(8), "big")),
             "-days", str(DAYS), "-sha256", "-extfile", ext, "-out", cert)
    csr.unlink()
    ext.unlink()
    return cert, key


def make_client_cert(directory: str | os.PathLike[str], ca_cert: Path, ca_key: Path,
                     name: str = "client", common_name: str = "flannel") -> tuple[Path, Path]:
    """Another client certificate from the same CA: (cert, key)."""
    return _sign(Path(directory), name, f"/CN={common_name}",
                 "basicConstraints=critical,CA:FALSE\n"
                 "keyUsage=critical,digitalSignature,keyEncipherment\n"
                 "extendedKeyUsage=clientAuth\n"
                 "subjectKeyIdentifier=hash\n"
                 "authorityKeyIdentifier=keyid\n",
                 ca_cert, ca_key)


def make_cert(directory: str | os.PathLike[str], ca_cert: Path, ca_key: Path, name: str,
              common_name: str, *, organisation: str = "", client: bool = True,
              server_ips: Iterable[str] = (), server_names: Iterable[str] = ()
              ) -> tuple[Path, Path]:
    """A certificate from the same CA for a Kubernetes component: (cert, key).
    Kubernetes reads the user from the CN and its groups from O
    (system:node:m1 in system:nodes); with server_ips or server_names it
    serves TLS too."""
    sans = [f"IP:{ipaddress.ip_address(ip)}" for ip in server_ips]
    sans += [f"DNS:{n}" for n in server_names]
    usages = (["clientAuth"] if client else []) + (["serverAuth"] if sans else [])
    subject = f"/CN={common_name}" + (f"/O={organisation}" if organisation else "")
    return _sign(Path(directory), name, subject,
                 "basicConstraints=critical,CA:FALSE\n"
                 "keyUsage=critical,digitalSignature,keyEncipherment\n"
                 f"extendedKeyUsage={','.join(usages)}\n"
                 + (f"subjectAltName={','.join(sans)}\n" if sans else "")
                 + "subjectKeyIdentifier=hash\n"
                 "authorityKeyIdentifier=keyid\n",
                 ca_cert, ca_key)


def make_signing_key(directory: str | os.PathLike[str], name: str) -> tuple[Path, Path]:
    """A key pair that signs tokens (the API server's service-account key):
    (private key, public key)."""
    directory = Path(directory)
    key, pub = directory / f"{name}.key", directory / f"{name}.pub"
    _new_key(key)
    _openssl("pkey", "-in", key, "-pubout", "-out", pub)
    return key, pub


def make_pki(directory: str | os.PathLike[str], server_ips: Iterable[str],
             server_names: Iterable[str] = ("localhost",)) -> Pki:
    """Create a CA, a server certificate valid for server_ips and server_names,
    and a client certificate (clientAuth) in directory. Keys are 0600."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)

    ca_key, ca_cert = directory / "ca-key.pem", directory / "ca-cert.pem"
    _new_key(ca_key)
    _openssl("req", "-x509", "-new", "-key", ca_key, "-sha256", "-days", str(DAYS),
             "-subj", f"/CN=flannel sandbox CA {os.urandom(4).hex()}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-addext", "subjectKeyIdentifier=hash",
             "-out", ca_cert)

    sans = [f"IP:{ipaddress.ip_address(ip)}" for ip in server_ips]
    sans += [f"DNS:{name}" for name in server_names]
    if not sans:
        raise ValueError("the server certificate needs at least one IP or name")
    server_cert, server_key = _sign(
        directory, "server", "/CN=etcd",
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        # etcd also dials itself as a client (grpc-gateway), hence clientAuth.
        "extendedKeyUsage=serverAuth,clientAuth\n"
        f"subjectAltName={','.join(sans)}\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid\n",
        ca_cert, ca_key)
    client_cert, client_key = make_client_cert(directory, ca_cert, ca_key)
    return Pki(ca_cert=ca_cert, server_cert=server_cert, server_key=server_key,
               client_cert=client_cert, client_key=client_key, ca_key=ca_key)
