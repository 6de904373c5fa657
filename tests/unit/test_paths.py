"""The unit paths table of docs/design.md."""
from pathlib import Path

from charms.flannel import paths


def test_binaries_config_and_credentials_go_where_the_design_says():
    assert paths.FLANNELD == Path("/usr/local/bin/flanneld")
    assert paths.CNI_PLUGIN == Path("/opt/cni/bin/flannel")
    assert paths.ETCD_CA == Path("/etc/ssl/flannel/client-ca.pem")
    assert paths.ETCD_CERT == Path("/etc/ssl/flannel/client-cert.pem")
    assert paths.ETCD_KEY == Path("/etc/ssl/flannel/client-key.pem")
    assert paths.SERVICE_FILE == Path("/lib/systemd/system/flannel.service")
    assert paths.CNI_CONF == Path("/etc/cni/net.d/10-flannel.conflist")
    assert paths.SUBNET_ENV == Path("/run/flannel/subnet.env")


def test_modes_keep_the_key_private_and_the_binaries_executable():
    assert (paths.FLANNELD_MODE, paths.CNI_PLUGIN_MODE) == (0o755, 0o755)
    assert (paths.ETCD_TLS_DIR_MODE, paths.ETCD_TLS_FILE_MODE) == (0o700, 0o600)
    assert (paths.SERVICE_FILE_MODE, paths.CNI_CONF_MODE) == (0o644, 0o644)


def test_the_install_record_sits_beside_the_charm_directory():
    charm_dir = "/var/lib/juju/agents/unit-flannel-0/charm"
    expected = Path("/var/lib/juju/agents/unit-flannel-0/flannel-install-record")
    assert paths.install_record_dir(charm_dir) == expected
    assert paths.install_record_dir(Path(charm_dir + "/")) == expected
