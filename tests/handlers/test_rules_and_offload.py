"""enable-nftables and disable-vxlan-tx-checksumming: which rules and
device settings a node has after each change, and what a node without the
commands they need is told. The fake flanneld does what flanneld v0.27.4
does at start (tests/functional/test_nftables_and_checksum_offload.py
plays the real one): writes its rules in the mode the network config in
etcd names, and makes flannel.1 with offload on."""
import json

from fake_machine import Link
from harness import NETWORK, configure, deployed

IPTABLES_RULES = "\n".join([
    "*nat", ":POSTROUTING ACCEPT [0:0]", ":FLANNEL-POSTRTG - [0:0]",
    '-A POSTROUTING -m comment --comment "flanneld masq" -j FLANNEL-POSTRTG',
    "-A FLANNEL-POSTRTG -s 10.1.0.0/16 -j MASQUERADE", "COMMIT",
    "*filter", ":FORWARD ACCEPT [0:0]", ":FLANNEL-FWD - [0:0]",
    '-A FORWARD -m comment --comment "flanneld forward" -j FLANNEL-FWD',
    "-A FLANNEL-FWD -s 10.1.0.0/16 -j ACCEPT", "COMMIT", ""])
OPERATORS_RULE = "-A POSTROUTING -s 192.168.9.0/24 -j MASQUERADE"


def flanneld_writes_its_rules(unit):
    """flanneld v0.27.4's start: its rules in the mode etcd's config names
    (it leaves the other mode's), and flannel.1 made anew, offload on."""
    def start():
        config = json.loads(unit.etcd_values()[f"{NETWORK}/config"])
        if config.get("EnableNFTables"):
            unit.machine.nft_tables |= {("ip", "flannel-ipv4"), ("ip6", "flannel-ipv6")}
        elif "FLANNEL-POSTRTG" not in unit.machine.iptables["iptables"]:
            unit.machine.iptables["iptables"] += IPTABLES_RULES
        unit.machine.links["flannel.1"] = Link("flannel.1", kind="vxlan", mtu=1450)
        unit.machine.tx_checksum.pop("flannel.1", None)
        (unit.paths.sys_class_net / "flannel.1").mkdir(exist_ok=True)
    return start


def deployed_with_rules(unit):
    unit.machine.iptables["iptables"] = f"*nat\n:POSTROUTING ACCEPT [0:0]\n{OPERATORS_RULE}\n" \
                                        "COMMIT\n"
    deployed(unit, flanneld_also=flanneld_writes_its_rules(unit))


def test_nftables_on_and_off_leaves_only_the_running_mode_s_rules(unit):
    deployed_with_rules(unit)
    assert "FLANNEL-" in unit.machine.iptables["iptables"] and not unit.machine.nft_tables
    configure(unit, enable_nftables=True)
    assert json.loads(unit.etcd_values()[f"{NETWORK}/config"])["EnableNFTables"] is True
    assert unit.machine.started() == 2
    assert "FLANNEL-" not in unit.machine.iptables["iptables"]
    assert OPERATORS_RULE in unit.machine.iptables["iptables"]
    assert unit.machine.nft_tables == {("ip", "flannel-ipv4"), ("ip6", "flannel-ipv6")}
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")
    configure(unit, enable_nftables=False)
    assert unit.machine.started() == 3 and not unit.machine.nft_tables
    assert "FLANNEL-POSTRTG" in unit.machine.iptables["iptables"]
    unit.hook("stop")
    assert not unit.machine.nft_tables and "FLANNEL-" not in unit.machine.iptables["iptables"]
    assert OPERATORS_RULE in unit.machine.iptables["iptables"]


def test_removal_in_nftables_mode_takes_flanneld_s_tables(unit):
    configure(unit, enable_nftables=True)
    deployed_with_rules(unit)
    assert unit.machine.nft_tables
    unit.hook("stop")
    assert not unit.machine.nft_tables and "flannel.1" not in unit.machine.links


def test_a_node_without_nft_is_blocked_naming_it_and_flanneld_runs_on(unit):
    deployed_with_rules(unit)
    unit.machine.missing.add("nft")
    configure(unit, enable_nftables=True)
    assert unit.status == ("blocked", "enable-nftables needs nft (nftables 1.0.1 or later), "
                                      "which this machine lacks: install nftables, or set "
                                      "enable-nftables to false")
    assert unit.machine.started() == 1 and unit.machine.units["flannel"]["active"]
    assert "FLANNEL-POSTRTG" in unit.machine.iptables["iptables"]
    unit.machine.missing.discard("nft")   # apt install nftables
    unit.hook("update-status")
    assert unit.machine.started() == 2 and unit.machine.nft_tables
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")


def test_nftables_mode_still_needs_ip6tables_for_flanneld_to_start(unit):
    unit.machine.missing.add("ip6tables")
    configure(unit, enable_nftables=True)
    deployed_with_rules(unit)
    assert unit.status == ("blocked", "enable-nftables: flanneld still runs ip6tables as "
                                      "it starts, and this machine lacks it: install iptables")
    assert unit.machine.started() == 0


def test_a_node_without_iptables_is_blocked_naming_it(unit):
    unit.machine.missing |= {"iptables", "iptables-save"}
    deployed_with_rules(unit)
    assert unit.status == ("blocked", "flanneld writes its rules with iptables, which this "
                                      "machine lacks: install iptables, or set enable-nftables "
                                      "to true")
    assert unit.machine.started() == 0


# -- disable-vxlan-tx-checksumming: auto (the kernel decides), true, false -----------------
OLD_KERNEL = "5.4.0-216-generic"   # Ubuntu 20.04's: before Linux 5.7's NAT checksum fix


def offload_asked(unit):
    return [call for call in unit.machine.calls if call[0] == "ethtool"]


def test_auto_leaves_offload_on_where_the_kernel_is_fixed_and_needs_no_ethtool(unit):
    unit.machine.missing.add("ethtool")
    deployed_with_rules(unit)   # on 5.15
    unit.hook("update-status")
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")
    assert "flannel.1" not in unit.machine.tx_checksum   # never touched: the kernel's on
    assert offload_asked(unit) == []
    assert not unit.paths.offload_udev_rule.exists()


def test_auto_turns_offload_off_on_a_kernel_before_5_7_and_keeps_it_off(unit):
    unit.kernel(OLD_KERNEL)
    deployed_with_rules(unit)
    assert unit.machine.tx_checksum["flannel.1"] is False
    assert f"Turned transmit checksum offload off on flannel.1 (auto: kernel {OLD_KERNEL} " \
           "predates Linux 5.7's fix of NAT on offloaded vxlan checksums)" in unit.log
    # flanneld made the device anew (a crash, a deleted device): offload on again
    unit.machine.tx_checksum["flannel.1"] = True
    unit.hook("update-status")
    assert unit.machine.tx_checksum["flannel.1"] is False
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")


UDEV_RULE = ('ACTION=="add", SUBSYSTEM=="net", KERNEL=="flannel.[0-9]*|flannel-v6.[0-9]*", '
             'RUN+="/usr/sbin/ethtool -K %k tx-checksum-ip-generic off"')


def test_true_turns_offload_off_on_any_kernel_with_a_udev_rule_that_goes_with_flannel(unit):
    configure(unit, disable_vxlan_tx_checksumming="true")
    deployed_with_rules(unit)   # on 5.15
    assert unit.machine.tx_checksum["flannel.1"] is False
    assert UDEV_RULE in unit.paths.offload_udev_rule.read_text().splitlines()
    unit.hook("stop")
    assert not unit.paths.offload_udev_rule.exists()


def test_false_leaves_offload_on_even_before_5_7(unit):
    unit.kernel(OLD_KERNEL)
    configure(unit, disable_vxlan_tx_checksumming="False")
    deployed_with_rules(unit)
    assert "flannel.1" not in unit.machine.tx_checksum
    assert not unit.paths.offload_udev_rule.exists()


def test_a_refresh_from_the_boolean_option_keeps_what_the_operator_set(unit):
    """Revisions before `auto` had a boolean, true by default. A unit whose
    operator set it keeps it (Juju hands the charm the boolean it kept);
    one left at the old default gets auto: offload back on where the kernel
    is fixed, on the devices the charm had turned it off on, flanneld not
    restarted."""
    configure(unit, disable_vxlan_tx_checksumming=True)   # the old boolean
    deployed_with_rules(unit)
    assert unit.machine.tx_checksum["flannel.1"] is False
    configure(unit, disable_vxlan_tx_checksumming="auto")
    unit.hook("upgrade-charm")
    assert unit.machine.tx_checksum["flannel.1"] is True
    assert not unit.paths.offload_udev_rule.exists()
    assert unit.machine.started() == 1
    assert "(auto: kernel 5.15.0-91-generic has Linux 5.7's fix" in unit.log
    configure(unit, disable_vxlan_tx_checksumming=False)
    assert unit.machine.tx_checksum["flannel.1"] is True
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")


def test_an_invalid_value_blocks_naming_the_option_and_changes_nothing(unit):
    unit.kernel(OLD_KERNEL)
    deployed_with_rules(unit)
    configure(unit, disable_vxlan_tx_checksumming="maybe")
    assert unit.status == ("blocked", 'Invalid disable-vxlan-tx-checksumming: "maybe" is not '
                                      "auto, true or false")
    assert unit.machine.tx_checksum["flannel.1"] is False
    assert unit.paths.offload_udev_rule.exists()
    assert unit.machine.started() == 1
    configure(unit, disable_vxlan_tx_checksumming="auto")
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")


def test_turning_the_option_off_puts_offload_back_on_the_devices_the_charm_changed(unit):
    unit.kernel(OLD_KERNEL)
    unit.machine.links["vxlan.calico"] = Link("vxlan.calico", kind="vxlan")
    unit.machine.tx_checksum["vxlan.calico"] = False   # someone else's
    deployed_with_rules(unit)
    configure(unit, disable_vxlan_tx_checksumming="false")
    assert not unit.paths.offload_udev_rule.exists()
    assert unit.machine.tx_checksum["flannel.1"] is True
    assert unit.machine.tx_checksum["vxlan.calico"] is False
    assert unit.machine.started() == 1   # not flanneld's business: no restart
    unit.machine.tx_checksum["flannel.1"] = False   # the operator's own choice now
    unit.hook("update-status")
    assert unit.machine.tx_checksum["flannel.1"] is False


def test_turning_the_option_off_puts_offload_back_on_devices_the_udev_rule_turned_off(unit):
    """On a real machine flanneld makes flannel.1 a moment after the hook
    that starts it, and the charm's udev rule turns offload off as it
    appears: no hook ever finds it on. Played here by a flanneld whose
    device comes up with offload already off."""
    def flanneld_under_udev():
        flanneld_writes_its_rules(unit)()
        unit.machine.tx_checksum["flannel.1"] = False   # the charm's udev rule, at once
    unit.kernel(OLD_KERNEL)
    unit.machine.iptables["iptables"] = f"*nat\n:POSTROUTING ACCEPT [0:0]\n{OPERATORS_RULE}\n" \
                                        "COMMIT\n"
    deployed(unit, flanneld_also=flanneld_under_udev)
    unit.hook("update-status")
    assert unit.paths.offload_udev_rule.exists()
    assert unit.machine.tx_checksum["flannel.1"] is False
    configure(unit, disable_vxlan_tx_checksumming="false")
    assert not unit.paths.offload_udev_rule.exists()
    assert unit.machine.tx_checksum["flannel.1"] is True
    assert unit.machine.started() == 1
    unit.machine.tx_checksum["flannel.1"] = False   # the operator's own choice now
    unit.hook("update-status")
    assert unit.machine.tx_checksum["flannel.1"] is False


def test_without_ethtool_the_unit_is_blocked_naming_it_until_it_is_installed(unit):
    unit.kernel(OLD_KERNEL)
    unit.machine.missing.add("ethtool")
    deployed_with_rules(unit)
    assert unit.status == ("blocked", "disable-vxlan-tx-checksumming needs ethtool, which this "
                                      "machine lacks: install ethtool, or set "
                                      "disable-vxlan-tx-checksumming to false")
    unit.machine.missing.discard("ethtool")
    unit.hook("update-status")
    assert unit.machine.tx_checksum["flannel.1"] is False
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")


def test_host_gw_needs_no_ethtool(unit):
    unit.machine.missing.add("ethtool")
    configure(unit, backend="host-gw")
    deployed_with_rules(unit)
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")


# -- br_netfilter ---------------------------------------------------------------------------

def test_br_netfilter_is_listed_for_every_boot_and_goes_with_flannel(unit):
    deployed_with_rules(unit)
    assert unit.paths.modules_load_file.read_text().splitlines()[-1] == "br_netfilter"
    unit.hook("stop")
    assert not unit.paths.modules_load_file.exists()
    # the module stays loaded: kube-proxy and the next CNI need it too
    assert (unit.paths.proc_sys_net_bridge / "bridge-nf-call-iptables").exists()


def test_a_machine_without_br_netfilter_gets_it_loaded_before_flanneld_starts(unit):
    unit.machine.unload_br_netfilter()
    deployed_with_rules(unit)
    assert ["modprobe", "br_netfilter"] in unit.machine.calls
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")


def test_a_kernel_without_br_netfilter_blocks_naming_it_and_clears_once_loaded(unit):
    unit.machine.unload_br_netfilter()
    unit.machine.modules_available.clear()
    deployed_with_rules(unit)
    assert unit.status == (
        "blocked", "flanneld needs the br_netfilter kernel module ("
        f"{unit.paths.proc_sys_net_bridge}/bridge-nf-call-iptables is missing) and modprobe "
        "br_netfilter failed: modprobe: FATAL: Module br_netfilter not found in directory "
        "/lib/modules/6.8.0-49-generic; load it on this machine")
    assert unit.machine.started() == 0
    unit.machine.modules_available.add("br_netfilter")   # a kernel with it
    unit.hook("update-status")
    assert unit.machine.started() == 1
    assert unit.status == ("active", "Flannel subnet 10.1.52.1/24")
