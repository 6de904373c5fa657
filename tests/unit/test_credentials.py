"""etcd client credentials land root-only, and go with the rest on stop."""
import stat

from charms.flannel.credentials import client_files, write_client_credentials
from charms.flannel.install_record import InstallRecord

CA, CERT, KEY = "-----CA-----\n", "-----CERT-----\n", "-----KEY-----\n"


def test_credentials_are_written_root_only(tmp_path):
    directory = tmp_path / "etc/ssl/flannel"
    files, changed = write_client_credentials(InstallRecord(tmp_path / "record"),
                                              CA, CERT, KEY, directory)
    assert changed
    assert files == client_files(directory)
    assert files.key_file.read_text() == KEY
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for path in (files.ca_file, files.cert_file, files.key_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_same_credentials_again_change_nothing_and_new_ones_do(tmp_path):
    record = InstallRecord(tmp_path / "record")
    directory = tmp_path / "ssl"
    write_client_credentials(record, CA, CERT, KEY, directory)
    assert not write_client_credentials(record, CA, CERT, KEY, directory)[1]
    assert write_client_credentials(record, CA, "-----NEW CERT-----\n", KEY, directory)[1]


def test_removal_takes_the_credentials_and_their_directory_only(tmp_path):
    (tmp_path / "ssl/certs").mkdir(parents=True)  # the machine's, not ours
    record = InstallRecord(tmp_path / "record")
    directory = tmp_path / "ssl/flannel"
    write_client_credentials(record, CA, CERT, KEY, directory)
    record.remove_all()
    assert not directory.exists()
    assert (tmp_path / "ssl/certs").is_dir()
