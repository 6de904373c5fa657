"""The CNI chain check behind the status: real files in
a real directory, as the principal and the charm leave them.

On main there was no such check (ImportError: charms.flannel.cni), and the
unit stayed active while pods failed with libcni's "failed to find plugin"."""
from pathlib import Path

import pytest

from charms.flannel.cni import CHAIN, chain_problem


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
    from charms.flannel.cni import published_cidr
    from charms.flannel.options import network_config, parse_options
    v4 = network_config(parse_options({"cidr": "10.1.0.0/16"}))
    dual = network_config(parse_options({"cidr": "10.1.0.0/16", "ipv6-cidr": "fd10:1::/56"}))
    assert published_cidr(v4) == "10.1.0.0/16"
    assert published_cidr(dual) == "10.1.0.0/16,fd10:1::/56"
