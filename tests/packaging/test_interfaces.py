"""The local interface layers, run through charms.reactive's Endpoint machinery.

Relation data is what today's providers publish: raw strings on unit databags.
"""

CA = "-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----"
CERT = "-----BEGIN CERTIFICATE-----\ncert\n-----END CERTIFICATE-----"
KEY = "-----BEGIN EC PRIVATE KEY-----\nsecret\n-----END EC PRIVATE KEY-----"
URLS = "https://10.0.0.5:2379,https://10.0.0.6:2379"


def etcd_flags(flag):
    return {name: flag(name) for name in ("etcd.connected", "etcd.available", "etcd.tls.available")}


# --- etcd ----------------------------------------------------------------------

def test_etcd_endpoint_class(juju):
    rid = juju.relate("etcd", "etcd")
    eps = juju.run("etcd-relation-joined", rid, "etcd/0")
    assert type(eps["etcd"]).__name__ == "EtcdRequires"


def test_etcd_flags_follow_the_provider_data(juju, flag):
    rid = juju.relate("etcd", "etcd")
    juju.run("etcd-relation-joined", rid, "etcd/0")
    assert etcd_flags(flag) == {"etcd.connected": True, "etcd.available": False,
                                "etcd.tls.available": False}

    eps = juju.run("etcd-relation-changed", rid, "etcd/0",
                   {"connection_string": URLS, "version": "3.4.22"})
    assert etcd_flags(flag) == {"etcd.connected": True, "etcd.available": True,
                                "etcd.tls.available": False}
    etcd = eps["etcd"]
    assert etcd.connection_string() == URLS
    assert etcd.endpoints() == ["https://10.0.0.5:2379", "https://10.0.0.6:2379"]
    assert etcd.version() == "3.4.22"
    assert etcd.client_credentials() is None

    eps = juju.run("etcd-relation-changed", rid, "etcd/0",
                   {"client_ca": CA, "client_cert": CERT, "client_key": KEY})
    assert all(etcd_flags(flag).values())
    assert eps["etcd"].client_credentials() == (CA, CERT, KEY)


def test_etcd_partial_tls_is_not_available(juju, flag):
    rid = juju.relate("etcd", "etcd")
    eps = juju.run("etcd-relation-changed", rid, "etcd/0",
                   {"connection_string": URLS, "client_ca": CA, "client_cert": CERT,
                    "client_key": ""})
    assert flag("etcd.available") and not flag("etcd.tls.available")
    assert eps["etcd"].client_credentials() is None


def test_etcd_empty_version_and_no_data(juju, flag):
    rid = juju.relate("etcd", "etcd")
    eps = juju.run("etcd-relation-joined", rid, "etcd/0")
    assert eps["etcd"].connection_string() == ""
    assert eps["etcd"].endpoints() == []
    assert eps["etcd"].version() == ""


def test_etcd_data_from_any_unit(juju, flag):
    rid = juju.relate("etcd", "etcd", units=3)
    juju.run("etcd-relation-joined", rid, "etcd/0")
    eps = juju.run("etcd-relation-changed", rid, "etcd/2",
                   {"connection_string": URLS, "client_ca": CA, "client_cert": CERT,
                    "client_key": KEY})
    assert all(etcd_flags(flag).values())
    assert eps["etcd"].connection_string() == URLS


def test_etcd_flags_stay_until_the_last_unit_departs(juju, flag):
    rid = juju.relate("etcd", "etcd", units=2)
    full = {"connection_string": URLS, "client_ca": CA, "client_cert": CERT, "client_key": KEY}
    juju.run("etcd-relation-changed", rid, "etcd/0", full)
    juju.run("etcd-relation-changed", rid, "etcd/1", full)
    juju.run("etcd-relation-departed", rid, "etcd/0")
    assert all(etcd_flags(flag).values())
    juju.run("etcd-relation-departed", rid, "etcd/1")
    assert not any(etcd_flags(flag).values())
    juju.run("etcd-relation-broken", rid)
    assert not any(etcd_flags(flag).values())


def test_etcd_broken_clears_everything(juju, flag):
    rid = juju.relate("etcd", "etcd")
    juju.run("etcd-relation-changed", rid, "etcd/0",
             {"connection_string": URLS, "client_ca": CA, "client_cert": CERT, "client_key": KEY})
    juju.run("etcd-relation-broken", rid)
    assert not any(etcd_flags(flag).values())


def test_etcd_flags_survive_unrelated_hooks(juju, flag):
    rid = juju.relate("etcd", "etcd")
    juju.run("etcd-relation-changed", rid, "etcd/0", {"connection_string": URLS})
    juju.run("update-status")
    assert flag("etcd.available")


def test_etcd_json_encoded_values_are_decoded(juju):
    rid = juju.relate("etcd", "etcd")
    eps = juju.run("etcd-relation-changed", rid, "etcd/0",
                   {"connection_string": '"{}"'.format(URLS), "version": '"3.5.9"'})
    assert eps["etcd"].connection_string() == URLS
    assert eps["etcd"].version() == "3.5.9"


def test_etcd_requirer_publishes_nothing_and_logs_no_key(juju):
    rid = juju.relate("etcd", "etcd")
    eps = juju.run("etcd-relation-changed", rid, "etcd/0",
                   {"connection_string": URLS, "client_ca": CA, "client_cert": CERT,
                    "client_key": KEY})
    eps["etcd"].client_credentials()
    assert juju.relation_sets == []
    assert not any("secret" in str(m) for m in juju.logged)


# --- kubernetes-cni ------------------------------------------------------------

def test_cni_endpoint_class_and_connected_flag(juju, flag):
    rid = juju.relate("cni", "kubernetes-worker")
    eps = juju.run("cni-relation-joined", rid, "kubernetes-worker/0")
    assert type(eps["cni"]).__name__ == "CNIRequires"
    assert flag("cni.connected") and flag("endpoint.cni.joined")
    juju.run("cni-relation-departed", rid, "kubernetes-worker/0")
    assert not flag("cni.connected")


def test_cni_set_config_publishes_raw_strings_once(juju):
    rid = juju.relate("cni", "kubernetes-worker")

    def publish(eps):
        eps["cni"].set_config(cidr="10.1.0.0/16", cni_conf_file="10-flannel.conflist")

    juju.run("cni-relation-joined", rid, "kubernetes-worker/0", on_start=publish)
    # Raw strings, as the principal reads them: no JSON quoting.
    assert juju.relations[rid]["local"] == {"cidr": "10.1.0.0/16",
                                            "cni-conf-file": "10-flannel.conflist"}
    assert len(juju.relation_sets) == 1
    juju.run("cni-relation-changed", rid, "kubernetes-worker/0", on_start=publish)
    assert len(juju.relation_sets) == 1, "unchanged config must not relation-set again"

    juju.run("cni-relation-changed", rid, "kubernetes-worker/0",
             on_start=lambda eps: eps["cni"].set_config("10.2.0.0/16", "10-flannel.conflist"))
    assert juju.relations[rid]["local"]["cidr"] == "10.2.0.0/16"
    assert len(juju.relation_sets) == 2


def test_cni_current_ops_control_plane(juju):
    rid = juju.relate("cni", "kubernetes-control-plane")
    eps = juju.run("cni-relation-changed", rid, "kubernetes-control-plane/0",
                   {"kubeconfig-hash": "ab12", "service-cidr": "10.152.183.0/24",
                    "image-registry": "rocks.example.org"})
    cni = eps["cni"]
    assert cni.kubeconfig_hash() == "ab12"
    assert cni.service_cidr() == "10.152.183.0/24"
    assert cni.image_registry() == "rocks.example.org"
    assert cni.kubeconfig_path() is None
    assert cni.is_control_plane() is True


def test_cni_current_ops_worker(juju):
    rid = juju.relate("cni", "kubernetes-worker")
    eps = juju.run("cni-relation-changed", rid, "kubernetes-worker/0",
                   {"kubeconfig-hash": "cd34", "image-registry": "rocks.example.org"})
    assert eps["cni"].service_cidr() is None
    assert eps["cni"].is_control_plane() is False


def test_cni_older_reactive_principals(juju):
    rid = juju.relate("cni", "kubernetes-master")
    eps = juju.run("cni-relation-changed", rid, "kubernetes-master/0",
                   {"is_master": "True", "kubeconfig_path": "/root/.kube/config"})
    assert eps["cni"].is_control_plane() is True
    assert eps["cni"].kubeconfig_path() == "/root/.kube/config"
    assert eps["cni"].kubeconfig_hash() is None

    rid = juju.relate("cni", "kubernetes-worker")
    juju.relations.pop("cni:1")
    eps = juju.run("cni-relation-changed", rid, "kubernetes-worker/0",
                   {"is_master": "False", "kubeconfig_path": "/root/.kube/config",
                    "service-cidr": "10.152.183.0/24"})
    assert eps["cni"].is_control_plane() is False, "an explicit is_master wins"


def test_cni_no_data_at_all(juju):
    rid = juju.relate("cni", "kubernetes-worker")
    eps = juju.run("cni-relation-joined", rid, "kubernetes-worker/0")
    cni = eps["cni"]
    assert (cni.kubeconfig_hash(), cni.service_cidr(), cni.image_registry(),
            cni.kubeconfig_path(), cni.is_control_plane()) == (None, None, None, None, False)


def test_cni_is_master_json_and_words(juju):
    rid = juju.relate("cni", "kubernetes-master")
    for value, expected in (("true", True), ('"True"', True), ("yes", True),
                            ("false", False), ("", False)):
        eps = juju.run("cni-relation-changed", rid, "kubernetes-master/0", {"is_master": value})
        assert eps["cni"].is_control_plane() is expected, value


def test_cni_kubeconfig_changed_flag(juju, reactive, flag):
    rid = juju.relate("cni", "kubernetes-worker")
    juju.run("cni-relation-joined", rid, "kubernetes-worker/0")
    assert not flag("cni.kubeconfig.changed")
    juju.run("cni-relation-changed", rid, "kubernetes-worker/0", {"kubeconfig-hash": "h1"})
    assert flag("cni.kubeconfig.changed")
    reactive.clear_flag("cni.kubeconfig.changed")
    juju.run("cni-relation-changed", rid, "kubernetes-worker/0", {"image-registry": "r"})
    assert not flag("cni.kubeconfig.changed")
    juju.run("cni-relation-changed", rid, "kubernetes-worker/0", {"kubeconfig-hash": "h2"})
    assert flag("cni.kubeconfig.changed")


# --- nrpe-external-master -----------------------------------------------------------

def test_nrpe_available_flag_and_host_names(juju, flag):
    rid = juju.relate("nrpe-external-master", "nrpe")
    eps = juju.run("nrpe-external-master-relation-joined", rid, "nrpe/0")
    ep = eps["nrpe-external-master"]
    assert type(ep).__name__ == "NrpeExternalMasterProvides"
    assert flag("nrpe-external-master.available")
    assert ep.nagios_hostname() is None
    eps = juju.run("nrpe-external-master-relation-changed", rid, "nrpe/0",
                   {"nagios_hostname": "juju-flannel-0", "nagios_host_context": "juju"})
    ep = eps["nrpe-external-master"]
    assert ep.nagios_hostname() == "juju-flannel-0"
    assert ep.nagios_host_context() == "juju"
    assert juju.relation_sets == [], "monitors are charmhelpers' NRPE's to publish"
    juju.run("nrpe-external-master-relation-departed", rid, "nrpe/0")
    assert not flag("nrpe-external-master.available")
