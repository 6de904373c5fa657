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

MACHINE = Paths()
SERVICE_ARGS = dict(endpoints=["https://10.0.0.5:2379", "https://10.0.0.6:2379"],
                    ca_file=MACHINE.etcd_ca, cert_file=MACHINE.etcd_cert,
                    key_file=MACHINE.etcd_key)


def unit_file(text):
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keys are case-sensitive in unit files
    parser.read_string(text)
    return parser


def exec_start(text):
    return shlex.split(unit_file(text)["Service"]["ExecStart"])


def test_service_runs_flanneld_against_etcd_with_tls(templates_dir):
    command = exec_start(render_service(templates_dir, iface="", **SERVICE_ARGS))
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


def test_service_runs_flanneld_on_the_kubernetes_api_as_its_node(templates_dir):
    """subnet-manager=kubernetes: no etcd flag, the node's name where
    flanneld reads it outside a pod (NODE_NAME)."""
    text = render_service(templates_dir, iface="eth0", endpoints="", ca_file="", cert_file="",
                          key_file="", kube=("/root/.kube/config",
                                             "/etc/flannel/net-conf.json", "m1"))
    assert exec_start(text) == [
        "/usr/local/bin/flanneld", "-kube-subnet-mgr", "-kubeconfig-file=/root/.kube/config",
        "-net-config-path=/etc/flannel/net-conf.json", "-iface=eth0", "-ip-masq",
        "-subnet-file=/run/flannel/subnet.env", "-healthz-ip=127.0.0.1", "-healthz-port=8474"]
    assert unit_file(text)["Service"]["Environment"] == "NODE_NAME=m1"
    assert "NODE_NAME" not in render_service(templates_dir, iface="", **SERVICE_ARGS)


def test_service_names_the_interface_when_one_is_set(templates_dir):
    command = exec_start(render_service(templates_dir, iface="ens3", **SERVICE_ARGS))
    assert "-iface=ens3" in command
    assert not any(arg.startswith("-iface") for arg in
                   exec_start(render_service(templates_dir, iface="", **SERVICE_ARGS)))


def test_service_prefix_ip_masq_and_a_single_endpoint_string(templates_dir):
    command = exec_start(render_service(
        templates_dir, endpoints="https://127.0.0.1:2379", ca_file="/ca", cert_file="/c",
        key_file="/k", iface="", ip_masq=False, prefix="/test/network"))
    assert "-etcd-endpoints=https://127.0.0.1:2379" in command
    assert "-etcd-prefix=/test/network" in command
    assert "-ip-masq" not in command


def test_service_takes_the_relations_connection_string_as_is(templates_dir):
    args = dict(SERVICE_ARGS, endpoints="https://10.0.0.5:2379, https://10.0.0.6:2379,")
    command = exec_start(render_service(templates_dir, iface="", **args))
    assert "-etcd-endpoints=https://10.0.0.5:2379,https://10.0.0.6:2379" in command
    assert len(command) == 10


def test_service_is_a_plain_restarting_unit(templates_dir):
    unit = unit_file(render_service(templates_dir, iface="eth0", **SERVICE_ARGS))
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


def test_conflist_names_a_subnet_file_other_than_the_plugins_default(templates_dir):
    conf = json.loads(render_conflist(templates_dir, subnet_file='/run/fl "x"/subnet.env'))
    assert conf["plugins"][0]["subnetFile"] == '/run/fl "x"/subnet.env'
    assert conf["plugins"][0]["delegate"] == {"hairpinMode": True, "isDefaultGateway": True}


def test_a_missing_template_variable_is_an_error(tmp_path):
    (tmp_path / "flannel.service").write_text("ExecStart={{ not_passed }}\n")
    with pytest.raises(Exception, match="not_passed"):
        render_service(tmp_path, iface="", **SERVICE_ARGS)


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
        render_service(templates_dir, iface="eth0", flanneld=fake, **SERVICE_ARGS))

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
