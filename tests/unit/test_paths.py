"""The unit paths table of docs/design.md is the code's: an operator who
reads it to find (or clean up) what flannel wrote finds every file there,
at the path and with the mode facts/paths.py gives it. Paths.under(root)
is that same tree below a directory, which the tests run the steps on."""
import re
from pathlib import Path

from charms.flannel.facts import paths
from charms.flannel.facts.paths import Paths

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "reference" / "unit-paths.md"
MACHINE = Paths()


def documented() -> dict[str, str]:
    """path -> mode cell, from the design's "Unit paths" table (a cell of
    several files names the first one's directory once)."""
    text = DESIGN.read_text().split("## Unit paths", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in text.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[1].startswith("/"):
            continue
        first, *others = [c.strip() for c in cells[1].split(",")]
        rows[first] = cells[2]
        for name in others:
            rows[str(Path(first).parent / name)] = cells[2]
    return rows


def test_every_file_the_charm_writes_is_in_the_design_table():
    table = documented()
    for path in (*MACHINE.written_files, MACHINE.subnet_env):
        assert str(path) in table, f"{path} is missing from docs/design.md's unit paths"


def test_the_modes_in_the_table_are_the_ones_the_charm_sets():
    table = documented()
    for path, mode in ((MACHINE.flanneld, paths.FLANNELD_MODE),
                       (MACHINE.cni_plugin, paths.CNI_PLUGIN_MODE),
                       (MACHINE.service_file, paths.SERVICE_FILE_MODE),
                       (MACHINE.cni_conflist, paths.CNI_CONF_MODE),
                       (MACHINE.etcd_key, paths.ETCD_TLS_FILE_MODE)):
        assert f"{mode:04o}" in re.findall(r"0[0-7]{3}", table[str(path)]), (path, table[str(path)])
    assert f"dir {paths.ETCD_TLS_DIR_MODE:04o}" in table[str(MACHINE.etcd_key)]
    assert f"files {paths.ETCD_TLS_FILE_MODE:04o}" in table[str(MACHINE.etcd_key)]


def test_the_machine_s_paths_are_where_earlier_revisions_wrote_them():
    """A unit refreshed from an earlier revision finds its files there."""
    assert [str(p) for p in MACHINE.written_files] == [
        "/usr/local/bin/flanneld", "/opt/cni/bin/flannel", "/etc/ssl/flannel/client-ca.pem",
        "/etc/ssl/flannel/client-cert.pem", "/etc/ssl/flannel/client-key.pem",
        "/lib/systemd/system/flannel.service", "/etc/cni/net.d/10-flannel.conflist",
        "/etc/udev/rules.d/90-flannel-vxlan-checksum.rules", "/etc/modules-load.d/flannel.conf",
        "/etc/flannel/net-conf.json"]
    assert str(MACHINE.subnet_env) == "/run/flannel/subnet.env"
    assert str(MACHINE.host_local_tables) == "/var/lib/cni/networks"
    assert [str(p) for p in MACHINE.runtime_directories] == ["/etc/cni/net.d", "/opt/cni/bin"]


def test_under_a_root_every_path_is_the_machine_s_below_it(tmp_path):
    node = Paths.under(tmp_path / "node")
    for field in Paths._fields:
        machine = getattr(MACHINE, field)
        assert getattr(node, field) == tmp_path / "node" / machine.relative_to("/"), field
    assert node.written_files == tuple(tmp_path / "node" / p.relative_to("/")
                                       for p in MACHINE.written_files)
    assert node.runtime_directories == tuple(tmp_path / "node" / p.relative_to("/")
                                             for p in MACHINE.runtime_directories)


def test_the_install_record_sits_beside_the_charm_directory():
    charm_dir = "/var/lib/juju/agents/unit-flannel-0/charm"
    expected = Path("/var/lib/juju/agents/unit-flannel-0/flannel-install-record")
    assert paths.install_record_dir(charm_dir) == expected
    assert paths.install_record_dir(Path(charm_dir + "/")) == expected
