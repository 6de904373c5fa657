"""The local interface layers, run through charms.reactive's Endpoint machinery
in the sandbox's emulated Juju (the ``juju`` fixture): hooks come in Juju's
order, relation data goes through the sandbox's own hook tools.

Relation data is what the providers publish: raw strings on unit databags.
"""

CA = "-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----"
CERT = "-----BEGIN CERTIFICATE-----\ncert\n-----END CERTIFICATE-----"
KEY = "-----BEGIN EC PRIVATE KEY-----\nsecret\n-----END EC PRIVATE KEY-----"
URLS = "https://10.0.0.5:2379,https://10.0.0.6:2379"
FULL = {"connection_string": URLS, "client_ca": CA, "client_cert": CERT, "client_key": KEY}


def etcd_flags(flag):
    return {name: flag(name) for name in ("etcd.connected", "etcd.available", "etcd.tls.available")}


# --- etcd ----------------------------------------------------------------------

def test_etcd_endpoint_class(juju):
    juju.relate("etcd", "etcd")
    assert type(juju.endpoints["etcd"]).__name__ == "EtcdRequires"
    assert "etcd-relation-joined" in juju.charm.hooks


def test_etcd_flags_follow_the_provider_data(juju, flag):
    juju.relate("etcd", "etcd")
    assert etcd_flags(flag) == {"etcd.connected": True, "etcd.available": False,
                                "etcd.tls.available": False}

    eps = juju.publish("etcd/0", connection_string=URLS, version="3.4.22")
    assert etcd_flags(flag) == {"etcd.connected": True, "etcd.available": True,
                                "etcd.tls.available": False}
    etcd = eps["etcd"]
    assert etcd.connection_string() == URLS
    assert etcd.endpoints() == ["https://10.0.0.5:2379", "https://10.0.0.6:2379"]
    assert etcd.version() == "3.4.22"
    assert etcd.client_credentials() is None

    eps = juju.publish("etcd/0", client_ca=CA, client_cert=CERT, client_key=KEY)
    assert all(etcd_flags(flag).values())
    assert eps["etcd"].client_credentials() == (CA, CERT, KEY)


def test_etcd_partial_tls_is_not_available(juju, flag):
    juju.relate("etcd", "etcd")
    eps = juju.publish("etcd/0", connection_string=URLS, client_ca=CA, client_cert=CERT)
    assert flag("etcd.available") and not flag("etcd.tls.available")
    assert eps["etcd"].client_credentials() is None


def test_etcd_empty_version_and_no_data(juju, flag):
    juju.relate("etcd", "etcd")
    etcd = juju.endpoints["etcd"]
    assert etcd.connection_string() == ""
    assert etcd.endpoints() == []
    assert etcd.version() == ""


def test_etcd_data_from_any_unit(juju, flag):
    juju.relate("etcd", "etcd", units=3)
    eps = juju.publish("etcd/2", **FULL)
    assert all(etcd_flags(flag).values())
    assert eps["etcd"].connection_string() == URLS


def test_etcd_flags_stay_until_the_last_unit_departs(juju, flag):
    rid = juju.relate("etcd", "etcd", units=2)
    juju.publish("etcd/0", **FULL)
    juju.publish("etcd/1", **FULL)
    juju.depart("etcd/0")
    assert juju.charm.hooks[-1] == "etcd-relation-departed"
    assert all(etcd_flags(flag).values())
    juju.depart("etcd/1")
    assert not any(etcd_flags(flag).values())
    juju.unrelate(rid)
    assert juju.charm.hooks[-1] == "etcd-relation-broken"
    assert not any(etcd_flags(flag).values())


def test_etcd_broken_clears_everything(juju, flag):
    rid = juju.relate("etcd", "etcd")
    juju.publish("etcd/0", **FULL)
    juju.unrelate(rid)
    assert juju.charm.hooks[-2:] == ["etcd-relation-departed", "etcd-relation-broken"]
    assert not any(etcd_flags(flag).values())


def test_etcd_flags_survive_unrelated_hooks(juju, flag):
    juju.relate("etcd", "etcd")
    juju.publish("etcd/0", connection_string=URLS)
    juju.fire("update-status")
    assert juju.charm.hooks[-1] == "update-status"
    assert flag("etcd.available")


def test_etcd_json_encoded_values_are_decoded(juju):
    juju.relate("etcd", "etcd")
    eps = juju.publish("etcd/0", connection_string='"{}"'.format(URLS), version='"3.5.9"')
    assert eps["etcd"].connection_string() == URLS
    assert eps["etcd"].version() == "3.5.9"


def test_etcd_requirer_publishes_nothing_and_logs_no_key(juju):
    rid = juju.relate("etcd", "etcd")
    eps = juju.publish("etcd/0", **FULL)
    eps["etcd"].client_credentials()
    assert juju.relation_sets(rid) == []
    assert juju.local_data(rid).keys() <= {"private-address", "ingress-address",
                                           "egress-subnets"}
    assert "secret" not in juju.log()


# --- kubernetes-cni ------------------------------------------------------------

def test_cni_endpoint_class_and_connected_flag(juju, flag):
    rid = juju.relate("cni", "kubernetes-worker")
    assert type(juju.endpoints["cni"]).__name__ == "CNIRequires"
    assert flag("cni.connected") and flag("endpoint.cni.joined")
    juju.unrelate(rid)
    assert not flag("cni.connected")


def test_cni_set_config_publishes_raw_strings_once(juju):
    juju.charm.during = lambda eps: eps["cni"].set_config(
        cidr="10.1.0.0/16", cni_conf_file="10-flannel.conflist")
    rid = juju.relate("cni", "kubernetes-worker")
    # Raw strings, as the principal reads them: no JSON quoting.
    data = juju.local_data(rid)
    assert {k: data.get(k) for k in ("cidr", "cni-conf-file")} == {
        "cidr": "10.1.0.0/16", "cni-conf-file": "10-flannel.conflist"}
    assert len(juju.relation_sets(rid)) == 1
    juju.publish("kubernetes-worker/0", **{"kubeconfig-hash": "h1"})
    assert juju.charm.hooks[-1] == "cni-relation-changed"
    assert len(juju.relation_sets(rid)) == 1, "unchanged config must not relation-set again"

    juju.charm.during = lambda eps: eps["cni"].set_config("10.2.0.0/16", "10-flannel.conflist")
    juju.publish("kubernetes-worker/0", **{"kubeconfig-hash": "h2"})
    assert juju.local_data(rid)["cidr"] == "10.2.0.0/16"
    assert len(juju.relation_sets(rid)) == 2


def test_cni_ops_control_plane(juju):
    juju.relate("cni", "kubernetes-control-plane")
    eps = juju.publish("kubernetes-control-plane/0", **{
        "kubeconfig-hash": "ab12", "service-cidr": "10.152.183.0/24",
        "image-registry": "rocks.example.org"})
    cni = eps["cni"]
    assert cni.kubeconfig_hash() == "ab12"
    assert cni.service_cidr() == "10.152.183.0/24"
    assert cni.image_registry() == "rocks.example.org"
    assert cni.kubeconfig_path() is None
    assert cni.is_control_plane() is True


def test_cni_ops_worker(juju):
    juju.relate("cni", "kubernetes-worker")
    eps = juju.publish("kubernetes-worker/0", **{"kubeconfig-hash": "cd34",
                                                 "image-registry": "rocks.example.org"})
    assert eps["cni"].service_cidr() is None
    assert eps["cni"].is_control_plane() is False


def test_cni_reactive_principals(juju):
    rid = juju.relate("cni", "kubernetes-master")
    eps = juju.publish("kubernetes-master/0", is_master="True",
                       kubeconfig_path="/root/.kube/config")
    assert eps["cni"].is_control_plane() is True
    assert eps["cni"].kubeconfig_path() == "/root/.kube/config"
    assert eps["cni"].kubeconfig_hash() is None

    juju.unrelate(rid)
    juju.relate("cni", "kubernetes-worker")
    eps = juju.publish("kubernetes-worker/0", is_master="False",
                       kubeconfig_path="/root/.kube/config", **{"service-cidr": "10.152.183.0/24"})
    assert eps["cni"].is_control_plane() is False, "an explicit is_master wins"


def test_cni_no_data_at_all(juju):
    juju.relate("cni", "kubernetes-worker")
    cni = juju.endpoints["cni"]
    assert (cni.kubeconfig_hash(), cni.service_cidr(), cni.image_registry(),
            cni.kubeconfig_path(), cni.is_control_plane()) == (None, None, None, None, False)


def test_cni_is_master_json_and_words(juju):
    juju.relate("cni", "kubernetes-master")
    for value, expected in (("true", True), ('"True"', True), ("yes", True),
                            ("false", False), ("", False)):
        eps = juju.publish("kubernetes-master/0", is_master=value)
        assert eps["cni"].is_control_plane() is expected, value


def test_cni_kubeconfig_changed_flag(juju, reactive, flag):
    juju.relate("cni", "kubernetes-worker")
    assert not flag("cni.kubeconfig.changed")
    juju.publish("kubernetes-worker/0", **{"kubeconfig-hash": "h1"})
    assert flag("cni.kubeconfig.changed")
    reactive.clear_flag("cni.kubeconfig.changed")
    juju.publish("kubernetes-worker/0", **{"image-registry": "r"})
    assert not flag("cni.kubeconfig.changed")
    juju.publish("kubernetes-worker/0", **{"kubeconfig-hash": "h2"})
    assert flag("cni.kubeconfig.changed")


# --- nrpe-external-master -----------------------------------------------------------

def test_nrpe_available_flag_and_host_names(juju, flag):
    """Against the sandbox's nrpe application, which publishes what the nrpe
    charm does (nagios_hostname, nagios_host_context)."""
    rid = juju.relate("nrpe-external-master", "nrpe")
    ep = juju.endpoints["nrpe-external-master"]
    assert type(ep).__name__ == "NrpeExternalMasterProvides"
    assert flag("nrpe-external-master.available")
    assert ep.nagios_hostname() == "juju-kubernetes-worker-0"
    assert ep.nagios_host_context() == "juju"
    assert juju.relation_sets(rid) == [], "monitors are charmhelpers' NRPE's to publish"
    juju.unrelate(rid)
    assert not flag("nrpe-external-master.available")
