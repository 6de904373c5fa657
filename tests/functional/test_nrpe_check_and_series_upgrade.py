"""The Nagios check over nrpe-external-master, and a series upgrade's pause.

The nrpe charm is emulated (like the etcd charm and kubernetes-worker): at
install it does what installing nagios-nrpe-server does on a machine (the
nagios user, /etc/nagios/nrpe.d, the export dir); the check command itself is
Debian's real check_procs, run inside the machine.
"""
import pytest
import yaml

from functional_kit import deploy_and_wait
from sandbox.juju import EmulatedApp

pytestmark = pytest.mark.functional

CHECK_FILE = "/etc/nagios/nrpe.d/check_flannel.cfg"


class NrpeApp(EmulatedApp):
    """A subordinate of the worker, as the nrpe charm is."""
    charm_name = "nrpe"
    subordinate = True
    endpoints = {"general-info": {"interface": "juju-info", "role": "requires",
                                  "scope": "container"},
                 "nrpe-external-master": {"interface": "nrpe-external-master",
                                          "role": "requires", "scope": "container"}}

    def __init__(self):
        super().__init__("nrpe")

    def on_install(self, ctx):
        ctx.run(["/bin/sh", "-c", "getent passwd nagios >/dev/null || useradd --system nagios; "
                 "mkdir -p /etc/nagios/nrpe.d /var/lib/nagios/export"])
        ctx.status_set("active", "ready")


def test_nagios_check_for_flanneld_comes_and_goes_with_the_relation(open_cluster):
    with open_cluster("nrpe", workers=1) as cluster:
        deploy_and_wait(cluster)
        machine = cluster.machines["m1"]
        nrpe = NrpeApp()
        cluster.controller.deploy(nrpe)
        cluster.controller.add_relation("nrpe:general-info", "kubernetes-worker:juju-info")
        cluster.controller.add_relation("flannel:nrpe-external-master",
                                        "nrpe:nrpe-external-master")
        cluster.settle()

        config = (machine.read_file(CHECK_FILE) or b"").decode()
        assert "command[check_flannel]=/usr/lib/nagios/plugins/check_procs" in config, config
        command = config.split("command[check_flannel]=", 1)[1].split("\n", 1)[0]
        check = machine.run(command.split(), check=False)
        assert check.returncode == 0 and "OK" in check.stdout, check.stdout + check.stderr
        unit = cluster.unit_on("m1")
        rid = cluster.controller.relation_id("flannel:nrpe-external-master",
                                             "nrpe:nrpe-external-master")
        published = yaml.safe_load(cluster.controller.relation_data(rid, unit)["monitors"])
        assert published["monitors"]["remote"]["nrpe"]["flannel"] == {"command": "check_flannel"}

        # (Whether it goes critical without flanneld can't be shown here: the
        # sandbox's machines share one PID namespace, so check_procs counts
        # every machine's flanneld.)

        cluster.controller.remove_relation("flannel:nrpe-external-master",
                                           "nrpe:nrpe-external-master")
        cluster.settle()
        assert machine.read_file(CHECK_FILE) is None


def test_series_upgrade_pauses_flannel_and_resumes_it(open_cluster):
    with open_cluster("series", workers=1) as cluster:
        deploy_and_wait(cluster)
        machine = cluster.machines["m1"]
        unit = cluster.unit_on("m1")

        cluster.controller.fire(unit, "pre-series-upgrade")
        cluster.settle()
        assert cluster.workload(unit) == ("blocked", "Series upgrade in progress")
        assert not machine.pids_of("flanneld")
        # Nothing restarts it behind the operator's back meanwhile.
        cluster.controller.update_status("flannel")
        cluster.settle()
        assert not machine.pids_of("flanneld")
        assert cluster.workload(unit)[1] == "Series upgrade in progress"

        cluster.controller.fire(unit, "post-series-upgrade")
        cluster.settle()
        assert machine.pids_of("flanneld")
        cluster.wait_for_flannel(timeout=60)
        assert cluster.start_pod("m1").address


def test_flannel_removed_during_a_series_upgrade_leaves_no_mask_behind(open_cluster):
    """pre-series-upgrade masks flannel.service (a link to /dev/null in
    /etc/systemd/system); removing flannel before post-series-upgrade must
    take that link away too, or a later flannel could never start there."""
    mask = "/etc/systemd/system/flannel.service"
    with open_cluster("series, removed midway", workers=1) as cluster:
        deploy_and_wait(cluster)
        machine = cluster.machines["m1"]
        cluster.controller.fire(cluster.unit_on("m1"), "pre-series-upgrade")
        cluster.settle()
        assert machine.exists(mask), "the control: the pause masks the unit"
        cluster.remove_cni_relation()
        cluster.settle()
        assert not machine.exists(mask)
        assert not machine.exists("/lib/systemd/system/flannel.service")
        assert not machine.pids_of("flanneld")
