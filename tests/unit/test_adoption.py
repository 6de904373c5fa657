"""Adoption of the old charm's files, on real files laid out
as charm-flannel leaves a unit at the seed's revision (f79f180) and at HEAD
(a69755c); and the take-over step that runs it in upgrade-charm."""
import json
import os
import stat

import pytest
import stepkit

from charms.flannel.adapters.install_record import InstallRecord
from charms.flannel.adapters.node_files import cni_network_name
from charms.flannel.facts.cni_config import DEFAULT_NETWORK_NAME, PRINCIPAL_PLUGINS
from charms.flannel.steps import adoption
from charms.flannel.steps.adoption import OldCharmLayout, adopt, take_over

OLD_FLAGS = {"flannel.binaries.installed", "flannel.etcd.credentials.installed",
             "flannel.service.installed", "flannel.service.started",
             "flannel.network.configured", "flannel.cni.configured", "flannel.cni.available",
             "flannel.version.set", "etcd.connected", "etcd.available", "etcd.tls.available",
             "cni.connected", "cni.is-worker"}
WORKER = {"bridge": b"bridge v0.7", "host-local": b"host-local v0.7",
          "loopback": b"loopback v0.7", "portmap": b"portmap v0.7"}


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def write(path, data, mode):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, mode)


@pytest.fixture
def layout(tmp_path):
    return OldCharmLayout.under(tmp_path / "root")


@pytest.fixture
def charm_dir(tmp_path):
    path = tmp_path / "agents" / "unit-flannel-0" / "charm"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def record(tmp_path):
    return InstallRecord(tmp_path / "agents" / "unit-flannel-0" / "flannel-install-record")


def old_unit(layout, charm_dir, revision):
    """The files the old charm left: at "a69755c" it copied the plugin from
    its unpacked resource, at "f79f180" the plugin is the worker's."""
    write(layout.flanneld, b"old flanneld", 0o755)
    write(layout.etcdctl, b"old etcdctl", 0o755)
    write(layout.service_file, b"[Service]\nExecStart=/usr/local/bin/flanneld\n", 0o644)
    write(layout.conflist, json.dumps({"name": "CDK-flannel-network"}).encode(), 0o644)
    for name in ("client-ca.pem", "client-cert.pem", "client-key.pem"):
        write(layout.tls_dir / name, f"PEM {name}".encode(), 0o644)
    os.chmod(layout.tls_dir, 0o755)
    for name, data in WORKER.items():
        write(layout.cni_bin_dir / name, data, 0o755)
    write(charm_dir / "files" / "flannel" / "flanneld", b"old flanneld", 0o755)
    write(charm_dir / "files" / "flannel" / "etcdctl", b"old etcdctl", 0o755)
    write(charm_dir / "files" / "flannel" / "cni-plugin" / "flannel", b"old charm's plugin", 0o755)
    plugin = b"old charm's plugin" if revision == "a69755c" else b"worker's flannel v0.7"
    write(layout.cni_plugin, plugin, 0o755)


def test_nothing_is_adopted_where_the_old_charm_never_ran(layout, charm_dir, record):
    old_unit(layout, charm_dir, "a69755c")
    result = adopt(record, {"etcd.available", "flannel.installed"}, charm_dir, layout)
    assert not result.found and not result.adopted
    assert record.recorded_paths() == []


@pytest.mark.parametrize("revision", ["f79f180", "a69755c"])
def test_the_old_charms_files_become_ours_and_the_workers_never(
        layout, charm_dir, record, revision):
    old_unit(layout, charm_dir, revision)
    result = adopt(record, OLD_FLAGS, charm_dir, layout)
    assert result.found
    expected = set(layout.only_the_old_charm_wrote()) | set(layout.old_charms_binaries())
    if revision == "a69755c":
        expected.add(layout.cni_plugin)
    assert set(result.adopted) == expected
    assert set(record.recorded_paths()) == expected
    for name in PRINCIPAL_PLUGINS:
        assert not record.is_recorded(layout.cni_bin_dir / name)
        assert layout.cni_bin_dir / name in result.left
    # The key is root-only now, and so is its directory.
    assert mode_of(layout.tls_dir / "client-key.pem") == 0o600
    assert mode_of(layout.tls_dir) == 0o700
    # No "original" is kept for anything the old charm wrote.
    assert not (record.directory / "originals").exists()


def test_at_the_seed_revision_the_workers_flannel_is_put_back_on_stop(layout, charm_dir, record):
    old_unit(layout, charm_dir, "f79f180")
    adopt(record, OLD_FLAGS, charm_dir, layout)
    record.install(layout.cni_plugin, b"this charm's plugin", 0o755)
    report = record.remove_all()
    assert layout.cni_plugin in report.restored
    assert layout.cni_plugin.read_bytes() == b"worker's flannel v0.7"


def test_at_head_the_old_charms_flannel_goes_on_stop(layout, charm_dir, record):
    old_unit(layout, charm_dir, "a69755c")
    adopt(record, OLD_FLAGS, charm_dir, layout)
    record.install(layout.cni_plugin, b"this charm's plugin", 0o755)
    record.remove_all()
    assert not layout.cni_plugin.exists()


def test_without_the_old_extract_the_plugin_is_not_adopted(layout, charm_dir, record):
    old_unit(layout, charm_dir, "a69755c")
    (charm_dir / adoption.OLD_EXTRACT_PLUGIN).unlink()
    result = adopt(record, OLD_FLAGS, charm_dir, layout)
    assert layout.cni_plugin not in result.adopted
    assert layout.cni_plugin in result.left


@pytest.mark.parametrize("binary", ["etcdctl", "flanneld"])
def test_a_binary_someone_installed_since_is_theirs_and_stays_after_stop(
        layout, charm_dir, record, binary):
    """Adoption by content: an etcdctl the operator installed after the old
    charm (or a flanneld of their own) is not the extract's bytes, so it is
    never claimed: the old charm's flags alone do not make it flannel's, nor
    stop delete it."""
    old_unit(layout, charm_dir, "a69755c")
    theirs = getattr(layout, binary)
    write(theirs, b"the operator's own " + binary.encode(), 0o755)
    result = adopt(record, OLD_FLAGS, charm_dir, layout)
    assert theirs not in result.adopted and theirs in result.left
    record.remove_all()
    assert theirs.read_bytes() == b"the operator's own " + binary.encode()


@pytest.mark.parametrize("revision", ["f79f180", "a69755c"])
def test_stop_after_adoption_leaves_nothing_of_flannel_and_every_worker_plugin(
        layout, charm_dir, record, revision):
    old_unit(layout, charm_dir, revision)
    adopt(record, OLD_FLAGS, charm_dir, layout)
    record.remove_all()
    for path in layout.only_the_old_charm_wrote() + layout.old_charms_binaries():
        assert not path.exists(), path
    assert not layout.tls_dir.exists()
    for name, data in WORKER.items():
        assert (layout.cni_bin_dir / name).read_bytes() == data


def test_flags_to_clear_are_the_old_charms_and_its_interfaces_not_etcds(layout, charm_dir,
                                                                        record):
    old_unit(layout, charm_dir, "a69755c")
    result = adopt(record, OLD_FLAGS | {"nrpe-external-master.initial-config"}, charm_dir, layout)
    assert "flannel.network.configured" in result.flags_to_clear
    assert "flannel.cni.configured" in result.flags_to_clear
    assert "flannel.binaries.installed" in result.flags_to_clear
    assert "nrpe-external-master.initial-config" in result.flags_to_clear
    assert "cni.is-worker" in result.flags_to_clear
    for kept in ("etcd.available", "etcd.tls.available", "etcd.connected", "cni.connected"):
        assert kept not in result.flags_to_clear


def test_adoption_twice_changes_nothing(layout, charm_dir, record):
    old_unit(layout, charm_dir, "a69755c")
    adopt(record, OLD_FLAGS, charm_dir, layout)
    again = adopt(record, OLD_FLAGS, charm_dir, layout)
    assert again.adopted == []


def test_the_network_name_in_use_is_kept(layout, charm_dir, record):
    old_unit(layout, charm_dir, "a69755c")
    layout.conflist.write_text(json.dumps({"name": "cbr0"}))
    assert adopt(record, OLD_FLAGS, charm_dir, layout).network_name == "cbr0"
    assert cni_network_name(layout.conflist, None, layout.conflist.parent / "networks") == "cbr0"


def test_the_older_conf_gives_its_name_and_goes(layout, charm_dir, record):
    old_unit(layout, charm_dir, "f79f180")
    layout.conflist.unlink()
    write(layout.old_conf, json.dumps({"name": "CDK-flannel-network"}).encode(), 0o644)
    result = adopt(record, OLD_FLAGS, charm_dir, layout)
    assert result.network_name == "CDK-flannel-network"
    assert layout.old_conf in result.deleted and not layout.old_conf.exists()


def test_a_fresh_unit_uses_the_old_charms_network_name(tmp_path):
    tables = tmp_path / "networks"
    assert cni_network_name(tmp_path / "absent.conflist", None, tables) == "CDK-flannel-network"
    assert cni_network_name(tmp_path / "absent", "cbr0", tables) == "cbr0"


def test_a_readded_unit_keeps_the_network_its_running_pods_hold_addresses_in(tmp_path):
    tables = tmp_path / "networks"
    (tables / "my-pods").mkdir(parents=True)
    (tables / "my-pods" / "last_reserved_ip.0").write_text("10.1.5.3")
    (tables / "my-pods" / "lock").write_text("")
    assert cni_network_name(tmp_path / "absent", None, tables) == \
        DEFAULT_NETWORK_NAME   # no pod holds an address there
    (tables / "my-pods" / "10.1.5.3").write_text("container\neth0")
    assert cni_network_name(tmp_path / "absent", None, tables) == "my-pods"
    (tables / "other").mkdir()
    (tables / "other" / "10.2.0.2").write_text("x")
    assert cni_network_name(tmp_path / "absent", None, tables) == \
        DEFAULT_NETWORK_NAME   # two tables in use: nothing says which


# -- take_over: the upgrade-charm step ----------------------------------------------------

def flanneld_saying(version: str) -> bytes:
    """A stand-in for the old charm's flanneld: `flanneld -version` prints
    its version to stderr, as flanneld does."""
    return f"#!/bin/sh\necho {version} >&2\n".encode()


def refreshed_unit(tmp_path, revision, flanneld_version):
    """A unit as `juju refresh` from charm-flannel hands it over: the old
    charm's files below the context's node, its extract in the charm dir."""
    ctx = stepkit.context(tmp_path, hook="upgrade-charm")
    layout = OldCharmLayout.of(ctx.paths)
    charm_dir = ctx.juju.charm_dir
    old_unit(layout, charm_dir, revision)
    for path in (layout.flanneld, charm_dir / "files" / "flannel" / "flanneld"):
        write(path, flanneld_saying(flanneld_version), 0o755)
    layout.conflist.write_text(json.dumps({"name": "cbr0"}))
    for key in adoption.OLD_DATA_KEYS:
        ctx.state.kv.set(key, "the old charm's")
    return ctx, layout


def test_take_over_from_flannel_v011_remembers_its_rules_name_and_clears_its_flags(tmp_path):
    """At f79f180 the old charm ran flanneld v0.11, whose iptables rules sit
    in the built-in chains: the unit remembers to take them away."""
    ctx, layout = refreshed_unit(tmp_path, "f79f180", "v0.11.0")
    out = take_over(ctx, OLD_FLAGS)
    assert ctx.state.v011_rules is True
    assert ctx.state.cni_network_name == "cbr0"
    assert ctx.cni_network_name() == "cbr0"
    for key in adoption.OLD_DATA_KEYS:
        assert ctx.state.kv.get(key) is None
    assert "flannel.network.configured" in out.clear_flags
    assert "etcd.available" not in out.clear_flags
    assert ctx.record.is_recorded(layout.flanneld) and ctx.record.is_recorded(layout.conflist)
    [(message, warning)] = out.log
    assert message.startswith("Took over from the previous flannel charm: adopted ")
    assert str(layout.service_file) in message and not warning


def test_take_over_from_a_flanneld_of_the_v3_era_has_no_old_rules_to_remember(tmp_path):
    ctx, layout = refreshed_unit(tmp_path, "a69755c", "v0.22.0")
    take_over(ctx, OLD_FLAGS)
    assert ctx.state.v011_rules is None
    assert ctx.record.is_recorded(layout.cni_plugin)


def test_take_over_where_the_old_charm_never_ran_changes_nothing(tmp_path):
    ctx, layout = refreshed_unit(tmp_path, "f79f180", "v0.11.0")
    out = take_over(ctx, {"etcd.available", "flannel.installed"})
    assert out.log == [] and out.clear_flags == []
    assert ctx.state.v011_rules is None and ctx.state.cni_network_name is None
    assert ctx.record.recorded_paths() == []
    assert all(ctx.state.kv.get(key) == "the old charm's" for key in adoption.OLD_DATA_KEYS)
