"""Pods: libcni's real errors, and a pod-to-pod ping across flannel's vxlan
between two machines, with a real etcd, flanneld run by systemctl, the
built CNI plugin and Debian's plugins -- no charm involved."""

from __future__ import annotations

import json
import os
import sys
import tarfile

import pytest

from sandbox.machine import Machine
from sandbox.network import list_netns, process_alive, run, state_root
from sandbox.pod import Pod, PodFailed

pytestmark = [pytest.mark.sandbox, pytest.mark.gobuild]

DEBIAN_CNI = "/usr/lib/cni"
CONFLIST = {
    "name": "cbr0", "cniVersion": "0.3.1",
    "plugins": [
        {"type": "flannel", "delegate": {"hairpinMode": True, "isDefaultGateway": True}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}
NETWORK_CONFIG = {"Network": "10.1.0.0/16", "Backend": {"Type": "vxlan"}}
UNIT = """\
[Unit]
Description=flannel (sandbox test)
After=network.target
[Service]
ExecStart=/usr/local/bin/flanneld -etcd-endpoints={endpoint} \
 -etcd-cafile=/etc/ssl/flannel/client-ca.pem -etcd-certfile=/etc/ssl/flannel/client-cert.pem \
 -etcd-keyfile=/etc/ssl/flannel/client-key.pem -iface={iface} -ip-masq
Restart=on-failure
[Install]
WantedBy=multi-user.target
"""

# etcd's v3 JSON gateway, from inside a namespace of the test network.
_ETCD_PUT = r"""
import base64, json, ssl, sys, urllib.request
url, ca, cert, key, k, v = sys.argv[1:7]
ctx = ssl.create_default_context(cafile=ca)
ctx.load_cert_chain(cert, key)
body = json.dumps({"key": base64.b64encode(k.encode()).decode(),
                   "value": base64.b64encode(v.encode()).decode()}).encode()
req = urllib.request.Request(url + "/v3/kv/put", data=body, method="POST")
with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
    print(r.read().decode())
"""


def write_conflist(machine: Machine) -> None:
    machine.write_file("/etc/cni/net.d/10-flannel.conflist", json.dumps(CONFLIST, indent=2))


def install_plugins(machine: Machine, tarball) -> dict[str, bytes]:
    with tarfile.open(tarball) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    machine.write_file("/usr/local/bin/flanneld", members["flanneld"], 0o755)
    machine.write_file("/opt/cni/bin/flannel", members["cni-plugin/flannel"], 0o755)
    for name in ("bridge", "host-local", "loopback", "portmap"):
        with open(os.path.join(DEBIAN_CNI, name), "rb") as f:
            machine.write_file(f"/opt/cni/bin/{name}", f.read(), 0o755)
    return members


def test_missing_plugin_is_libcnis_own_error(test_network):
    with Machine("nocni", test_network) as m:
        write_conflist(m)
        with pytest.raises(PodFailed) as failed:
            Pod.create(m, "busybox")
        assert 'failed to find plugin "flannel" in path [/opt/cni/bin]' in str(failed.value)
        # the half-made pod is gone
        assert not [n for n in list_netns() if n.startswith(m.pod_prefix)]


def test_no_conflist(test_network):
    with Machine("noconf", test_network) as m:
        with pytest.raises(PodFailed) as failed:
            Pod.create(m, "busybox")
        assert str(failed.value) == "no net configurations found in /etc/cni/net.d"


@pytest.fixture
def etcd(test_network, tmp_path):
    from sandbox.etcd import EtcdServer
    from sandbox.pki import make_pki
    netns = test_network.netns_for("etcd")
    host = test_network.address_of("etcd")
    pki = make_pki(tmp_path / "pki", [host], ["etcd"])
    with EtcdServer(tmp_path / "etcd", pki, host=host, netns=netns) as server:
        yield server


def etcd_put(etcd, netns: str, key: str, value: str) -> None:
    pki = etcd.pki
    run(["nsenter", f"--net=/run/netns/{netns}", "--", sys.executable, "-c", _ETCD_PUT,
         etcd.endpoint, str(pki.ca_cert), str(pki.client_cert), str(pki.client_key), key, value])


def start_flannel(machine: Machine, etcd, tarball) -> None:
    install_plugins(machine, tarball)
    write_conflist(machine)
    for name, path in (("client-ca.pem", etcd.pki.ca_cert),
                       ("client-cert.pem", etcd.pki.client_cert),
                       ("client-key.pem", etcd.pki.client_key)):
        machine.write_file(f"/etc/ssl/flannel/{name}", open(path, "rb").read(), 0o600)
    machine.write_file("/lib/systemd/system/flannel.service",
                       UNIT.format(endpoint=etcd.endpoint, iface=machine.iface))
    assert machine.systemctl("enable", "flannel").returncode == 0
    started = machine.systemctl("start", "flannel")
    assert started.returncode == 0, started.stderr


def test_pod_to_pod_across_vxlan(test_network, etcd, resource_tarball):
    net = test_network
    etcd_put(etcd, net.netns_for("etcd"), "/coreos.com/network/config", json.dumps(NETWORK_CONFIG))
    with Machine("m1", net) as m1, Machine("m2", net) as m2:
        for m in (m1, m2):
            start_flannel(m, etcd, resource_tarball)
        envs = {}
        for m in (m1, m2):
            try:
                text = m.wait_for_file("/run/flannel/subnet.env", timeout=30).decode()
            except TimeoutError:
                log = m.read_file("/var/log/journal/flannel.service.log") or b""
                pytest.fail(f"{m.name}: no subnet.env; flanneld log:\n{log.decode()[-3000:]}")
            envs[m.name] = dict(line.split("=", 1) for line in text.split())
            assert envs[m.name]["FLANNEL_NETWORK"] == "10.1.0.0/16"
            assert "flannel.1" in m.links()
            (pid,) = m.pids_of("flanneld")
            assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{m.netns}").st_ino
            assert m.systemctl("is-active", "flannel").stdout.strip() == "active"
        assert envs["m1"]["FLANNEL_SUBNET"] != envs["m2"]["FLANNEL_SUBNET"]
        # flanneld -ip-masq wrote its rules in the machine, not on the host
        assert "10.1.0.0/16" in m1.run(["iptables-save", "-t", "nat"]).stdout
        assert "10.1.0.0/16" not in run(["iptables-save", "-t", "nat"]).stdout

        p1 = Pod.create(m1, "busybox")
        p2 = Pod.create(m2, "busybox")
        assert p1.address.startswith(envs["m1"]["FLANNEL_SUBNET"].rsplit(".", 1)[0] + ".")
        assert p2.address.startswith(envs["m2"]["FLANNEL_SUBNET"].rsplit(".", 1)[0] + ".")
        assert p1.ping(p2.address, count=3) and p2.ping(p1.address, count=3)
        # a second pod on the same machine works too
        p3 = Pod.create(m1, "second")
        assert p3.address != p1.address and p3.ping(p2.address, count=2)
        for p in (p1, p2, p3):
            assert p.delete() == ""
        assert m1.systemctl("stop", "flannel").returncode == 0
        assert m1.pids_of("flanneld") == []
        flanneld_m2 = m2.pids_of("flanneld")
    # Torn down: no flanneld, no namespace of the machines or pods, no mounts.
    assert flanneld_m2 and not [p for p in flanneld_m2 if process_alive(p)]
    left = [n for n in list_netns() if n.startswith(net.prefix)]
    assert sorted(left) == sorted([net.switch, net.netns_for("etcd")])
    assert str(state_root()) not in open("/proc/self/mountinfo").read()
    assert not os.path.exists("/opt/cni/bin/flannel") and not os.path.exists("/run/flannel")
