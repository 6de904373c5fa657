"""etcd client credentials land root-only, and go with the rest on stop."""
import stat

import pytest

from charms.flannel.adapters.credentials import (client_files, pem_problem,
                                                 write_client_credentials)
from charms.flannel.adapters.install_record import InstallRecord
from charms.flannel.facts.paths import Paths

CA, CERT, KEY = "-----CA-----\n", "-----CERT-----\n", "-----KEY-----\n"


def test_credentials_are_written_root_only(tmp_path):
    node = Paths.under(tmp_path)
    directory = tmp_path / "etc/ssl/flannel"
    files, changed = write_client_credentials(InstallRecord(tmp_path / "record"), node,
                                              CA, CERT, KEY)
    assert changed
    assert files == client_files(node)
    assert files.ca_file.parent == directory
    assert files.key_file.read_text() == KEY
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for path in (files.ca_file, files.cert_file, files.key_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_same_credentials_again_change_nothing_and_new_ones_do(tmp_path):
    record = InstallRecord(tmp_path / "record")
    node = Paths.under(tmp_path)
    write_client_credentials(record, node, CA, CERT, KEY)
    assert not write_client_credentials(record, node, CA, CERT, KEY)[1]
    assert write_client_credentials(record, node, CA, "-----NEW CERT-----\n", KEY)[1]
    assert node.etcd_cert.read_text() == "-----NEW CERT-----\n"


def test_removal_takes_the_credentials_and_their_directory_only(tmp_path):
    (tmp_path / "etc/ssl/certs").mkdir(parents=True)  # the machine's, not ours
    record = InstallRecord(tmp_path / "record")
    node = Paths.under(tmp_path)
    write_client_credentials(record, node, CA, CERT, KEY)
    record.remove_all()
    assert not node.etcd_tls_dir.exists()
    assert (tmp_path / "etc/ssl/certs").is_dir()


# -- the relation's TLS material is input --------------------------------------

def test_pem_problem_accepts_the_relations_real_credentials(pki):
    assert pem_problem(pki.ca_cert.read_text(), pki.client_cert.read_text(),
                       pki.client_key.read_text()) is None


@pytest.mark.parametrize("which, value, says", [
    ("ca", "not a certificate", "the CA certificate is not PEM"),
    ("cert", "", "the client certificate is not PEM"),
    ("key", None, "the client key is not PEM"),
    ("key", "CERT", "the client key is a PEM CERTIFICATE, not a PRIVATE KEY"),
    ("cert", "-----BEGIN CERTIFICATE-----\n@@@@\n-----END CERTIFICATE-----\n",
     "the client certificate is not PEM"),
])
def test_tls_material_that_is_not_pem_is_named_and_never_shown(pki, which, value, says):
    good = {"ca": pki.ca_cert.read_text(), "cert": pki.client_cert.read_text(),
            "key": pki.client_key.read_text()}
    good[which] = good["cert"] if value == "CERT" else value
    problem = pem_problem(good["ca"], good["cert"], good["key"])
    assert problem == f"etcd relation: {says}"
    assert "BEGIN" not in problem


def test_an_ec_key_with_its_parameters_block_is_pem(pki):
    """`openssl ecparam -genkey` writes EC PARAMETERS before the key."""
    params = "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n"
    assert pem_problem(pki.ca_cert.read_text(), pki.client_cert.read_text(),
                       params + pki.client_key.read_text()) is None
