"""Juju 4.0 as the sandbox plays it (sandbox/juju/versions.py): what it
refuses, omits or changes that a charm meets, each against the same model
on Juju 3.6 where the two differ."""
from __future__ import annotations

import json

import pytest
from jujukit import World

from sandbox.juju import EtcdApp, ModelError
from sandbox.juju.versions import JUJU_4


@pytest.fixture
def world4(tmp_path):
    w = World(tmp_path, juju_version=JUJU_4)
    yield w
    w.ctl.close()


def etcd() -> EtcdApp:
    return EtcdApp("https://10.99.0.2:2379", version="3.5", client_ca="CA", client_cert="C",
                   client_key="K")


def test_a_charm_directory_and_a_charm_without_manifest_bases_are_refused(world4):
    """Juju 4 deploys a packed .charm only, and refuses metadata of the
    series era ("charm metadata without bases in manifest not valid")."""
    ctl = world4.ctl
    m0 = world4.add_machine()
    charm = world4.charm("principal", principal=True)
    with pytest.raises(ModelError, match="deploys a packed charm only"):
        ctl.deploy("principal", charm, to=[m0])
    with pytest.raises(ModelError, match="charm metadata without bases in manifest not valid"):
        ctl.deploy("principal", world4.pack(charm, bases=()), to=[m0])
    ctl.deploy("principal", world4.pack(charm), to=[m0])
    ctl.settle()
    assert ctl.hooks("principal/0")[:1] == ["install"]


def test_juju_3_6_deploys_a_directory_and_a_packed_charm(world):
    ctl = world.ctl
    m0, m1 = world.add_machine(), world.add_machine()
    charm = world.charm("principal", principal=True)
    ctl.deploy("principal", charm, to=[m0])
    ctl.deploy("packed", world.pack(charm, bases=()), to=[m1])
    ctl.settle()
    assert ctl.hooks("packed/0")[:1] == ["install"]


def test_no_leader_settings_tools_and_no_leader_settings_changed(world4):
    ctl = world4.ctl
    m0, m1 = world4.add_machine(), world4.add_machine()
    ctl.deploy("principal", world4.pack(world4.charm("principal", principal=True)),
               to=[m0, m1])
    world4.script("install", f"command -v leader-get > {world4.out}/leader-get || true\n"
                             f"command -v is-leader > {world4.out}/is-leader\n"
                             f"env > {world4.out}/env-${{JUJU_UNIT_NAME/\\//-}}\n")
    ctl.settle()
    assert world4.read_out("leader-get") == "" and world4.read_out("is-leader").strip()
    assert "leader-settings-changed" not in ctl.hooks("principal/1")
    env = world4.read_out("env-principal-0")
    assert "JUJU_VERSION=4.0.15" in env and "JUJU_SLA=" not in env
    assert "JUJU_METER_STATUS" not in env


def test_series_upgrade_hooks_are_gone(world4):
    ctl = world4.ctl
    ctl.deploy("principal", world4.pack(world4.charm("principal", principal=True)),
               to=[world4.add_machine()])
    ctl.settle()
    with pytest.raises(ModelError, match="has no pre-series-upgrade hook"):
        ctl.fire("principal/0", "pre-series-upgrade")


@pytest.mark.parametrize("version, seeded", [
    ("3.6.4", {"private-address", "ingress-address", "egress-subnets"}),
    (JUJU_4, {"ingress-address", "egress-subnets"}),
])
def test_relation_settings_carry_private_address_only_before_juju_4(tmp_path, version, seeded):
    world = World(tmp_path, juju_version=version)
    try:
        ctl = world.ctl
        ctl.deploy("principal", world.pack(world.charm("principal", principal=True)),
                   to=[world.add_machine()])
        ctl.deploy(etcd())
        rid = ctl.add_relation("principal:db", "etcd:db")
        ctl.settle()
        assert set(ctl.relation_data(rid, "principal/0")) == seeded
    finally:
        world.ctl.close()


@pytest.mark.parametrize("version, refused", [("3.6.4", False), (JUJU_4, True)])
def test_an_unknown_action_parameter_is_refused_by_default_from_juju_4(tmp_path, version,
                                                                       refused):
    """actions.yaml that says nothing of additionalProperties: Juju 4 takes
    it as false (internal/charm/actions.go), 3.6 as true."""
    world = World(tmp_path, juju_version=version)
    try:
        ctl = world.ctl
        charm = world.charm("principal", principal=True, extra_files={
            "actions.yaml": json.dumps({"hello": {"params": {"name": {"type": "string"}}}}),
            "actions/hello": "#!/bin/sh\naction-set said=hi\n"})
        (charm / "actions" / "hello").chmod(0o755)
        ctl.deploy("principal", world.pack(charm), to=[world.add_machine()])
        ctl.settle()
        if refused:
            with pytest.raises(ModelError, match='additional property "other" is not allowed'):
                ctl.run_action("principal/0", "hello", {"name": "x", "other": 1})
        else:
            assert ctl.run_action("principal/0", "hello", {"name": "x", "other": 1}).ok
    finally:
        world.ctl.close()
