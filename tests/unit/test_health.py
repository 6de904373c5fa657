"""update-status's look at etcd (health.look_at_etcd), against the session's
real TLS etcd and a real subnet.env: what an idle hook must act on."""
import socket

from charms.flannel.credentials import ClientFiles
from charms.flannel.etcd_probe import lease_key
from charms.flannel.health import EtcdHealth, look_at_etcd
from charms.flannel.network import EtcdClientSettings, NetworkStore

NETWORK = {"Network": "10.1.0.0/16", "SubnetLen": 24, "Backend": {"Type": "vxlan"}}
SUBNET_ENV = ("FLANNEL_NETWORK=10.1.0.0/16\nFLANNEL_SUBNET=10.1.52.1/24\n"
              "FLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n")


def files(pki) -> ClientFiles:
    return ClientFiles(pki.ca_cert, pki.client_cert, pki.client_key)


def store(etcd, pki, prefix) -> NetworkStore:
    return NetworkStore(EtcdClientSettings((etcd.endpoint,), str(pki.ca_cert),
                                           str(pki.client_cert), str(pki.client_key)), prefix)


def subnet_env(tmp_path, text=SUBNET_ENV):
    path = tmp_path / "subnet.env"
    path.write_text(text)
    return path


def test_a_node_etcd_knows_is_healthy(etcd, pki, prefix, tmp_path):
    etcd_store = store(etcd, pki, prefix)
    etcd_store.write_config(NETWORK)
    etcd_store._call(lambda client: client.put(lease_key("10.1.52.0/24", prefix), b"{}"))
    seen = look_at_etcd(etcd.endpoint, files(pki), NETWORK, subnet_env(tmp_path), prefix=prefix)
    assert seen == EtcdHealth(answered=etcd.endpoint)


def test_an_etcd_rebuilt_empty_asks_for_the_config_and_the_lease_again(etcd, pki, prefix,
                                                                       tmp_path):
    seen = look_at_etcd(etcd.endpoint, files(pki), NETWORK, subnet_env(tmp_path), prefix=prefix)
    assert (seen.problem, seen.config_missing, seen.lost_lease) == (None, True, "10.1.52.0/24")


def test_a_lease_of_another_network_is_not_this_nodes_to_miss(etcd, pki, prefix, tmp_path):
    """Mid cidr change subnet.env still names the old network's subnet:
    flanneld is leasing anew, and no restart is asked for."""
    store(etcd, pki, prefix).write_config({**NETWORK, "Network": "10.2.0.0/16"})
    seen = look_at_etcd(etcd.endpoint, files(pki), {**NETWORK, "Network": "10.2.0.0/16"},
                        subnet_env(tmp_path), prefix=prefix)
    assert (seen.config_missing, seen.lost_lease) == (False, None)
    garbled = look_at_etcd(etcd.endpoint, files(pki), NETWORK,
                           subnet_env(tmp_path, "FLANNEL_SUBNET=what\n"), prefix=prefix)
    assert garbled.problem is None and garbled.lost_lease is None


def test_etcd_away_is_a_problem_naming_it_and_nothing_else(pki, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    seen = look_at_etcd(f"https://127.0.0.1:{port}", files(pki), NETWORK,
                        subnet_env(tmp_path), timeout=1.0)
    assert seen.problem.startswith("cannot reach etcd: https://127.0.0.1:%d" % port)
    assert (seen.config_missing, seen.lost_lease, seen.answered) == (False, None, None)


DUAL = {**NETWORK, "EnableIPv6": True, "IPv6Network": "fd10:1::/56", "IPv6SubnetLen": 64}
DUAL_ENV = SUBNET_ENV + "FLANNEL_IPV6_NETWORK=fd10:1::/56\nFLANNEL_IPV6_SUBNET=fd10:1:0:5::1/64\n"


def test_a_dual_stack_lease_is_found_under_flanneld_s_key_for_both_subnets(
        etcd, pki, prefix, tmp_path):
    """Looked for under "10.1.52.0-24" alone, it was lost at every update-status
    (and flanneld restarted)."""
    etcd_store = store(etcd, pki, prefix)
    etcd_store.write_config(DUAL)
    key = f"{prefix}/subnets/10.1.52.0-24&fd10:1:0:5::-64"
    etcd_store._call(lambda client: client.put(key, b"{}"))
    env = subnet_env(tmp_path, DUAL_ENV)
    assert look_at_etcd(etcd.endpoint, files(pki), DUAL, env, prefix=prefix).lost_lease is None
    etcd_store._call(lambda client: client.delete(key))
    assert look_at_etcd(etcd.endpoint, files(pki), DUAL, env, prefix=prefix).lost_lease == \
        "10.1.52.0/24&fd10:1:0:5::/64"


def test_a_lease_of_the_other_ipv6_shape_is_being_re_leased_not_lost(
        etcd, pki, prefix, tmp_path):
    etcd_store = store(etcd, pki, prefix)
    etcd_store.write_config(DUAL)
    v4_only = subnet_env(tmp_path)   # IPv6 just turned on: flanneld leases anew
    assert look_at_etcd(etcd.endpoint, files(pki), DUAL, v4_only, prefix=prefix).lost_lease \
        is None


def test_another_nodes_lease_without_a_route_here_restarts_flanneld(etcd, pki, prefix,
                                                                    tmp_path):
    """flanneld v0.27.4 can miss lease events after a lease of the other IPv6
    shape goes (IPv6 turned on or off): this node then keeps no route to the
    other node's new subnet, and its pods cannot reach that node's."""
    etcd_store = store(etcd, pki, prefix)
    etcd_store.write_config(NETWORK)
    for subnet in ("10.1.52.0/24", "10.1.7.0/24", "10.1.9.0/24"):
        etcd_store._call(lambda client, s=subnet: client.put(lease_key(s, prefix), b"{}"))
    routes = [{"dst": "10.1.52.0/24", "dev": "cni0"}, {"dst": "10.1.7.0/24", "dev": "flannel.1"},
              {"dst": "10.1.200.0/24", "dev": "flannel.1"}]   # an old lease's, gone
    seen = look_at_etcd(etcd.endpoint, files(pki), NETWORK, subnet_env(tmp_path), prefix=prefix,
                        routes=lambda: routes)
    assert seen.unrouted == ("10.1.9.0/24",) and seen.lost_lease is None
    routes.append({"dst": "10.1.9.0/24", "gateway": "172.31.254.13", "dev": "eth0"})
    assert look_at_etcd(etcd.endpoint, files(pki), NETWORK, subnet_env(tmp_path),
                        prefix=prefix, routes=lambda: routes).unrouted == ()
