"""The Nagios check, written the way the nrpe charm reads it (charmhelpers'
nrpe module, imported only when there is an nrpe relation: it pulls in
charmhelpers' host, which imports only on Ubuntu)."""
from __future__ import annotations

from ..facts.paths import SERVICE_NAME

CHECK = {"shortname": SERVICE_NAME, "description": "flanneld is running",
         "check_cmd": "check_procs -c 1: -C flanneld"}


def write_check() -> None:
    """Write the check and restart nagios-nrpe-server."""
    from charmhelpers.contrib.charmsupport import nrpe
    check = nrpe.NRPE(hostname=nrpe.get_nagios_hostname(), primary=False)
    check.add_check(**CHECK)
    check.write()


def remove_check() -> None:
    from charmhelpers.contrib.charmsupport import nrpe
    check = nrpe.NRPE(hostname=nrpe.get_nagios_hostname(), primary=False)
    check.remove_check(shortname=SERVICE_NAME)
    check.write()
