"""The rendered flannel.service and 10-flannel.conflist."""
import configparser
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.waiting import wait_for

from charms.flannel.adapters.render import render_conflist, render_service
from charms.flannel.facts.paths import Paths
from charms.flannel.steps.context import EtcdRelation, HookContext
from charms.flannel.steps.outcome import Outcome
from charms.flannel.steps.subnets.etcd import EtcdSubnets
from charms.flannel.steps.subnets.kube import KubeSubnets
from charms.flannel.steps.unit_state import UnitState
from charmhelpers.core.unitdata import Storage
from stepkit import StubJuju

MACHINE = Paths()
ENDPOINTS = "https://10.0.0.5:2379,https://10.0.0.6:2379"


def unit_file(text):
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keys are case-sensitive in unit files
    parser.read_string(text)
    return parser


def exec_start(text):
    return shlex.split(unit_file(text)["Service"]["ExecStart"])


def on_etcd(tmp_path, connection_string: str = ENDPOINTS):
    """How flanneld runs on etcd (steps/subnets/etcd.py), on a machine's paths."""
    ctx = HookContext(StubJuju(charm_dir=tmp_path, etcd_relation=EtcdRelation(
        connection_string, "CA", "CERT", "KEY")), UnitState(Storage(":memory:")), paths=MACHINE)
    return EtcdSubnets(ctx).flanneld(Outcome())


def on_kubernetes(tmp_path, node: str = "m1"):
    ctx = HookContext(StubJuju(charm_dir=tmp_path), UnitState(Storage(":memory:")),
                      paths=MACHINE)
    ctx.state.node_name = node
    return KubeSubnets(ctx).flanneld(Outcome())


def service(templates_dir, on, **kwargs) -> str:
    return render_service(templates_dir, subnet_manager=on.arguments, preamble=on.preamble,
                          **{"iface": "", **kwargs})


def test_service_runs_flanneld_against_etcd_with_tls(templates_dir, tmp_path):
    command = exec_start(service(templates_dir, on_etcd(tmp_path)))
    assert command == [
        "/usr/local/bin/flanneld",
        "-etcd-endpoints=https://10.0.0.5:2379,https://10.0.0.6:2379",
        "-etcd-prefix=/coreos.com/network",
        "-etcd-cafile=/etc/ssl/flannel/client-ca.pem",
        "-etcd-certfile=/etc/ssl/flannel/client-cert.pem",
        "-etcd-keyfile=/etc/ssl/flannel/client-key.pem",
        "-ip-masq",
        "-subnet-file=/run/flannel/subnet.env",
        # its health server on loopback only: the charm asks /readyz, not the network
        "-healthz-ip=127.0.0.1",
        "-healthz-port=8474",
    ]


def test_service_runs_flanneld_on_the_kubernetes_api_as_its_node(templates_dir, tmp_path):
    """subnet-manager=kubernetes: no etcd flag, the node's name where
    flanneld reads it outside a pod (NODE_NAME)."""
    text = service(templates_dir, on_kubernetes(tmp_path), iface="eth0")
    assert exec_start(text) == [
        "/usr/local/bin/flanneld", "-kube-subnet-mgr", "-kubeconfig-file=/root/.kube/config",
        "-net-config-path=/etc/flannel/net-conf.json", "-iface=eth0", "-ip-masq",
        "-subnet-file=/run/flannel/subnet.env", "-healthz-ip=127.0.0.1", "-healthz-port=8474"]
    assert unit_file(text)["Service"]["Environment"] == "NODE_NAME=m1"
    assert "NODE_NAME" not in service(templates_dir, on_etcd(tmp_path))


def test_service_names_the_interface_when_one_is_set(templates_dir, tmp_path):
    command = exec_start(service(templates_dir, on_etcd(tmp_path), iface="ens3"))
    assert "-iface=ens3" in command
    assert not any(arg.startswith("-iface") for arg in
                   exec_start(service(templates_dir, on_etcd(tmp_path))))


def test_service_without_ip_masq_and_with_a_single_endpoint(templates_dir, tmp_path):
    command = exec_start(service(templates_dir, on_etcd(tmp_path, "https://127.0.0.1:2379"),
                                 ip_masq=False))
    assert "-etcd-endpoints=https://127.0.0.1:2379" in command
    assert "-ip-masq" not in command


def test_service_takes_only_what_parses_of_the_relations_connection_string(
        templates_dir, tmp_path):
    on = on_etcd(tmp_path, "https://10.0.0.5:2379, https://10.0.0.6:2379,")
    command = exec_start(service(templates_dir, on))
    assert "-etcd-endpoints=https://10.0.0.5:2379,https://10.0.0.6:2379" in command
    assert len(command) == 10


def test_service_is_a_plain_restarting_unit(templates_dir, tmp_path):
    unit = unit_file(service(templates_dir, on_etcd(tmp_path), iface="eth0"))
    assert unit["Unit"]["After"] == "network-online.target"
    assert unit["Service"]["Type"] == "simple"
    assert unit["Service"]["Restart"] == "always"
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    assert sorted(unit.sections()) == ["Install", "Service", "Unit"]


def test_conflist_is_the_flannel_chain_with_portmap(templates_dir):
    assert json.loads(render_conflist(templates_dir)) == {
        "name": "CDK-flannel-network", "cniVersion": "0.3.1",
        "plugins": [
            {"type": "flannel", "delegate": {"hairpinMode": True, "isDefaultGateway": True}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]}


def test_conflist_keeps_the_network_name_it_is_given(templates_dir):
    assert json.loads(render_conflist(templates_dir, network_name="cbr0"))["name"] == "cbr0"


def test_conflist_gives_pods_an_mtu_only_when_told_to(templates_dir):
    """With IPv6 over vxlan the pods' MTU is flannel-v6.<VNI>'s, not
    flanneld's FLANNEL_MTU (steps/cni.py): the flannel plugin hands the
    bridge plugin its delegate's mtu first."""
    conf = json.loads(render_conflist(templates_dir, mtu=1430))
    assert conf["plugins"][0]["delegate"] == {"mtu": 1430, "hairpinMode": True,
                                              "isDefaultGateway": True}


def test_conflist_names_a_subnet_file_other_than_the_plugins_default(templates_dir):
    conf = json.loads(render_conflist(templates_dir, subnet_file='/run/fl "x"/subnet.env'))
    assert conf["plugins"][0]["subnetFile"] == '/run/fl "x"/subnet.env'
    assert conf["plugins"][0]["delegate"] == {"hairpinMode": True, "isDefaultGateway": True}


def test_a_missing_template_variable_is_an_error(tmp_path):
    (tmp_path / "flannel.service").write_text("ExecStart={{ not_passed }}\n")
    with pytest.raises(Exception, match="not_passed"):
        render_service(tmp_path, iface="", subnet_manager=on_etcd(tmp_path).arguments)


def systemctl3():
    found = Path(sys.executable).with_name("systemctl3")
    return str(found) if found.exists() else shutil.which("systemctl3")


@pytest.mark.skipif(not systemctl3(), reason="docker-systemctl-replacement is not installed")
def test_systemctl3_starts_and_stops_the_rendered_service(templates_dir, tmp_path):
    # The sandbox machines run the unit with systemctl3; a fake flanneld
    # records its arguments so we see what systemctl3 actually executed.
    root = tmp_path / "machine" / "root"
    fake = root / "usr" / "local" / "bin" / "flanneld"
    fake.parent.mkdir(parents=True)
    args_file = tmp_path / "args"
    # (written aside and renamed: the test never reads a half-written file)
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {args_file}.part\n'
                    f'mv {args_file}.part {args_file}\nexec sleep 300\n')
    os.chmod(fake, 0o755)
    unit_dir = root / "lib" / "systemd" / "system"
    unit_dir.mkdir(parents=True)
    (unit_dir / "flannel.service").write_text(
        service(templates_dir, on_etcd(tmp_path), iface="eth0", flanneld=fake))

    def ctl(*args):
        return subprocess.run([systemctl3(), f"--root={root}", *args],
                              capture_output=True, text=True, timeout=60)

    try:
        assert ctl("start", "flannel.service").returncode == 0
        assert wait_for(args_file.exists, 60, interval=0.05)
        assert ctl("is-active", "flannel.service").stdout.strip() == "active"
        assert args_file.read_text().splitlines() == exec_start(
            (unit_dir / "flannel.service").read_text())[1:]
    finally:
        ctl("stop", "flannel.service")
    assert ctl("is-active", "flannel.service").stdout.strip() != "active"
