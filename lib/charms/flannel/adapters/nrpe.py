"""The Nagios checks, written the way the nrpe charm reads them (charmhelpers'
nrpe module, imported only when there is an nrpe relation: it pulls in
charmhelpers' host, which imports only on Ubuntu)."""
from __future__ import annotations

from ..facts.flanneld import HEALTHZ_IP, HEALTHZ_PORT
from ..facts.paths import SERVICE_NAME

RUNNING = {"shortname": SERVICE_NAME, "description": "flanneld is running",
           "check_cmd": "check_procs -c 1: -C flanneld"}
# /readyz answers 503 until flanneld's rules are in and subnet.env written:
# check_http says CRITICAL for a 5xx and for no answer
READY = {"shortname": f"{SERVICE_NAME}-ready", "description": "flanneld is ready",
         "check_cmd": f"check_http -I {HEALTHZ_IP} -p {HEALTHZ_PORT} -u /readyz -t 5"}


def checks(readyz: bool) -> list[dict]:
    """The checks for a flanneld that offers /readyz (v0.28.9) or not."""
    return [RUNNING, READY] if readyz else [RUNNING]


def write_checks(wanted: list[dict]) -> None:
    """Write the checks (and remove the others of the charm's), then
    restart nagios-nrpe-server."""
    from charmhelpers.contrib.charmsupport import nrpe
    check = nrpe.NRPE(hostname=nrpe.get_nagios_hostname(), primary=False)
    for each in (RUNNING, READY):
        if each not in wanted:
            check.remove_check(shortname=each["shortname"])
    for each in wanted:
        check.add_check(**each)
    check.write()


def remove_checks() -> None:
    from charmhelpers.contrib.charmsupport import nrpe
    check = nrpe.NRPE(hostname=nrpe.get_nagios_hostname(), primary=False)
    for each in (RUNNING, READY):
        check.remove_check(shortname=each["shortname"])
    check.write()
