"""The stop hook's lease give-back (teardown.release_lease_for_backend_change)
against the session's real TLS etcd and a real subnet.env."""
import json
import subprocess
import sys

from charms.flannel.credentials import ClientFiles
from charms.flannel.network import EtcdClientSettings, NetworkStore
from charms.flannel.teardown import release_lease_for_backend_change

VXLAN = {"Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan"}}
HOST_GW = {**VXLAN, "Backend": {"Type": "host-gw"}}
SUBNET_ENV = ("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.52.1/24\nFLANNEL_MTU=1450\n"
              "FLANNEL_IPMASQ=false\n")


def etcd_with_a_lease(etcd, pki, prefix, tmp_path):
    store = NetworkStore(EtcdClientSettings((etcd.endpoint,), str(pki.ca_cert),
                                            str(pki.client_cert), str(pki.client_key)), prefix)
    store.write_config(VXLAN)
    store._call(lambda client: client.put(f"{prefix}/subnets/10.1.52.0-24",
                                          json.dumps({"PublicIP": "192.0.2.10"})))
    env = tmp_path / "subnet.env"
    env.write_text(SUBNET_ENV)
    return store, env


def release(etcd, pki, prefix, env, wanted, logged):
    return release_lease_for_backend_change(
        wanted=wanted, confirmed=VXLAN, endpoints=etcd.endpoint,
        files=ClientFiles(pki.ca_cert, pki.client_cert, pki.client_key), preferred=None,
        log=lambda message, warning: logged.append(message), subnet_env=env, prefix=prefix)


def test_a_node_leaving_during_a_backend_change_gives_its_lease_back(etcd, pki, prefix,
                                                                     tmp_path):
    """`juju config flannel backend=host-gw` waits for every node to leave:
    a removed unit that kept its lease (24 h) would keep the change refused."""
    store, env = etcd_with_a_lease(etcd, pki, prefix, tmp_path)
    logged = []
    assert release(etcd, pki, prefix, env, HOST_GW, logged) == "10.1.52.0/24"
    assert store.leases() == []
    assert logged == ["Released the lease of 10.1.52.0/24 in etcd"]


def test_without_a_backend_change_the_lease_stays_for_the_unit_added_back(
        etcd, pki, prefix, tmp_path):
    store, env = etcd_with_a_lease(etcd, pki, prefix, tmp_path)
    assert release(etcd, pki, prefix, env, VXLAN, []) is None
    assert [lease["Subnet"] for lease in store.leases()] == ["10.1.52.0/24"]


def test_etcd_gone_is_logged_not_raised(pki, prefix, tmp_path):
    env = tmp_path / "subnet.env"
    env.write_text(SUBNET_ENV)
    logged = []
    gone = release_lease_for_backend_change(
        wanted=HOST_GW, confirmed=VXLAN, endpoints="https://127.0.0.1:9",
        files=ClientFiles(pki.ca_cert, pki.client_cert, pki.client_key), preferred=None,
        log=lambda message, warning: logged.append((message, warning)), subnet_env=env)
    assert gone is None
    assert logged and logged[0][1] is True and "10.1.52.0/24" in logged[0][0]


def test_a_stop_without_a_backend_change_loads_no_etcd_client():
    """etcd3gw and requests cost a stop hook 0.15 s of imports: only a
    pending backend change needs them."""
    code = ("import sys; from pathlib import Path; from charms.flannel import teardown; "
            "from charms.flannel.credentials import ClientFiles; "
            "teardown.release_lease_for_backend_change(wanted={'Network': '10.1.0.0/16'}, "
            "confirmed={'Network': '10.1.0.0/16'}, endpoints='https://127.0.0.1:9', "
            "files=ClientFiles(Path('/x'), Path('/y'), Path('/z')), preferred=None, "
            "log=print); "
            "print(sorted(m for m in ('etcd3gw', 'requests', 'urllib3') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": ":".join(sys.path)}).stdout
    assert out.strip() == "[]"
