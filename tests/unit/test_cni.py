"""The CNI checks behind the status (adapters/node_files.py on the rules of
facts/cni_config.py): real files in a real directory, as the principal and
the charm leave them.

Without the chain check the unit stays active while pods fail with libcni's
"failed to find plugin", which only `kubectl describe pod` shows."""
import json
from pathlib import Path

import pytest

from charms.flannel.adapters.node_files import chain_problem, runtime_config_problem
from charms.flannel.facts.cni_config import CHAIN
from charms.flannel.facts.options import parse_options


def full_chain(directory: Path) -> Path:
    directory.mkdir(exist_ok=True)
    for name, _ in CHAIN:
        (directory / name).write_bytes(b"\x7fELF")
        (directory / name).chmod(0o755)
    return directory


def test_a_complete_chain_is_no_problem(tmp_path):
    assert chain_problem(full_chain(tmp_path / "bin")) is None


@pytest.mark.parametrize("name, provider", [("flannel", "this charm"),
                                            ("bridge", "the principal"),
                                            ("host-local", "the principal"),
                                            ("portmap", "the principal"),
                                            ("loopback", "the principal")])
def test_a_missing_plugin_is_named_with_who_provides_it(tmp_path, name, provider):
    bin_dir = full_chain(tmp_path / "bin")
    (bin_dir / name).unlink()
    assert chain_problem(bin_dir) == (
        f'CNI plugin "{name}" missing from {bin_dir} (provided by {provider})')


def test_a_plugin_that_is_not_executable_is_named(tmp_path):
    bin_dir = full_chain(tmp_path / "bin")
    (bin_dir / "bridge").chmod(0o644)
    assert chain_problem(bin_dir) == (
        f'CNI plugin "bridge" in {bin_dir} is not executable (provided by the principal)')


def test_a_dangling_symlink_counts_as_missing(tmp_path):
    bin_dir = full_chain(tmp_path / "bin")
    (bin_dir / "portmap").unlink()
    (bin_dir / "portmap").symlink_to(tmp_path / "gone")
    assert "\"portmap\" missing" in chain_problem(bin_dir)


def test_the_problem_clears_when_the_plugin_comes_back(tmp_path):
    bin_dir = full_chain(tmp_path / "bin")
    (bin_dir / "host-local").unlink()
    assert chain_problem(bin_dir)
    full_chain(bin_dir)
    assert chain_problem(bin_dir) is None


def test_the_cni_relation_carries_both_pod_networks_ipv4_first():
    """kubernetes-control-plane passes `cidr` as is to --cluster-cidr: dual-stack
    is "v4,v6" with no spaces, as Calico publishes it."""
    v4 = parse_options({"cidr": "10.1.0.0/16"}).network_config()
    dual = parse_options({"cidr": "10.1.0.0/16", "ipv6-cidr": "fd10:1::/56"}).network_config()
    assert v4.published_cidr == "10.1.0.0/16"
    assert dual.published_cidr == "10.1.0.0/16,fd10:1::/56"


# --- the config the container runtime loads first -----------------------------------------

FLANNEL_CONFLIST = {"name": "CDK-flannel-network", "cniVersion": "0.3.1",
                    "plugins": [{"type": "flannel", "delegate": {"isDefaultGateway": True}},
                                {"type": "portmap", "capabilities": {"portMappings": True}}]}


def conf_dir(tmp_path, **files) -> Path:
    """/etc/cni/net.d with flannel's conflist and `files` (name -> text; a
    value starting with "->" is a symlink to the rest)."""
    d = tmp_path / "net.d"
    d.mkdir()
    (d / "10-flannel.conflist").write_text(json.dumps(FLANNEL_CONFLIST))
    for name, text in files.items():
        name = name.replace("_", "-") + (".conflist" if "." not in name else "")
        if text.startswith("->"):
            (d / name).symlink_to(text[2:])
        else:
            (d / name).write_text(text)
    return d


def runtime_problem(d: Path):
    """What the status says of the conf dir, flannel's conflist its own file."""
    return runtime_config_problem(d, d / "10-flannel.conflist")


def test_flannel_s_conflist_alone_loads(tmp_path):
    assert runtime_problem(conf_dir(tmp_path)) is None


def test_a_link_to_flannel_s_conflist_loads(tmp_path):
    """kubernetes-worker links 05-default.conflist (the reactive worker) or
    01-default.conflist (the ops principals) to the CNI's file."""
    linked = conf_dir(tmp_path, **{"05_default": "->10-flannel.conflist"})
    assert runtime_problem(linked) is None


@pytest.mark.parametrize("files, said", [
    ({"05_default": "->10-flannel.conflist.gone"}, "is a link to the missing"),
    ({"01_broken": "{not json"}, "is not JSON"),
    ({"01_empty": json.dumps({"name": "x", "plugins": []})}, "lists no plugin"),
    ({"01_untyped": json.dumps({"name": "x", "plugins": [{}]})}, "has a plugin without a type"),
    ({"01-conf.conf": json.dumps({"name": "x"})}, "has no plugin type"),
])
def test_a_config_before_flannel_s_that_does_not_load_stops_every_pod(tmp_path, files, said):
    problem = runtime_problem(conf_dir(tmp_path, **files))
    assert said in problem and "starts no pod" in problem


def test_a_broken_file_after_flannel_s_or_of_another_kind_is_never_read(tmp_path):
    d = conf_dir(tmp_path, **{"99_broken": "{", "00-notes.txt": "{"})
    assert runtime_problem(d) is None


def test_another_network_first_is_the_operator_s_choice(tmp_path):
    multus = {"name": "multus-cni-network", "type": "multus", "delegates": [FLANNEL_CONFLIST]}
    d = conf_dir(tmp_path, **{"00-multus.conf": json.dumps(multus)})
    assert runtime_problem(d) is None


def test_flannel_s_conflist_broken_or_gone_is_named(tmp_path):
    d = conf_dir(tmp_path)
    (d / "10-flannel.conflist").write_text('{"name": "CDK-flannel-network"')
    assert "10-flannel.conflist is not JSON" in runtime_problem(d)
    (d / "10-flannel.conflist").unlink()
    assert "10-flannel.conflist is missing" in runtime_problem(d)
