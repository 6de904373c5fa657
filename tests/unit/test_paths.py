"""The unit paths table of docs/design.md is the code's: an operator who
reads it to find (or clean up) what flannel wrote finds every file there,
at the path and with the mode paths.py gives it."""
import re
from pathlib import Path

from charms.flannel import paths

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"


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
    for path in (*paths.WRITTEN_FILES, paths.SUBNET_ENV):
        assert str(path) in table, f"{path} is missing from docs/design.md's unit paths"


def test_the_modes_in_the_table_are_the_ones_the_charm_sets():
    table = documented()
    for path, mode in ((paths.FLANNELD, paths.FLANNELD_MODE),
                       (paths.CNI_PLUGIN, paths.CNI_PLUGIN_MODE),
                       (paths.SERVICE_FILE, paths.SERVICE_FILE_MODE),
                       (paths.CNI_CONF, paths.CNI_CONF_MODE),
                       (paths.ETCD_KEY, paths.ETCD_TLS_FILE_MODE)):
        assert f"{mode:04o}" in re.findall(r"0[0-7]{3}", table[str(path)]), (path, table[str(path)])
    assert f"dir {paths.ETCD_TLS_DIR_MODE:04o}" in table[str(paths.ETCD_KEY)]
    assert f"files {paths.ETCD_TLS_FILE_MODE:04o}" in table[str(paths.ETCD_KEY)]


def test_the_install_record_sits_beside_the_charm_directory():
    charm_dir = "/var/lib/juju/agents/unit-flannel-0/charm"
    expected = Path("/var/lib/juju/agents/unit-flannel-0/flannel-install-record")
    assert paths.install_record_dir(charm_dir) == expected
    assert paths.install_record_dir(Path(charm_dir + "/")) == expected
