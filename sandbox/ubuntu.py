"""The identity of an Ubuntu release, as /etc/os-release and /etc/lsb-release
show it: what the sandbox's machines present (the charm, Juju's machine agent
and charmcraft read it to tell the series) on this Debian host, and the
python3 each release ships, which the machine's hooks run with where this
host has that Python (a pyenv build, or /usr/bin/python3.X)."""
from __future__ import annotations

import glob
import os
import sys
import zlib

#: series -> (version, point release, code name)
RELEASES = {
    "jammy": ("22.04", "22.04.4", "Jammy Jellyfish"),
    "noble": ("24.04", "24.04.1", "Noble Numbat"),
    "resolute": ("26.04", "26.04", "Resolute Raccoon"),
}
SERIES_OF_VERSION = {version: series for series, (version, _, _) in RELEASES.items()}
#: series -> the python3 it ships (the charm's hooks run with it)
PYTHONS = {"jammy": "3.10", "noble": "3.12", "resolute": "3.14"}
#: the releases a cluster plays by its label; 26.04 where a test names it
LABELLED = ("jammy", "noble")
# FLANNEL_SANDBOX_SERIES=jammy|noble plays one release on every machine
SERIES_ENV = "FLANNEL_SANDBOX_SERIES"


def python_for(series: str) -> str | None:
    """A python3 of the version `series` ships, on this host (a pyenv
    build, the system's, or one sandbox.cpython builds, waited for if it is
    being built); None without."""
    version = PYTHONS[series]
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"))
    found += [p for p in (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}")
              if os.path.exists(p)]
    if found:
        return found[-1]
    from sandbox import cpython
    if version in cpython.SOURCES:
        return str(cpython.build(cpython.SOURCES[version], log=sys.stderr))
    return None


def series_for(label: str) -> str:
    """The release a cluster's machines play: FLANNEL_SANDBOX_SERIES, else
    one of LABELLED picked by the cluster's label, so that a suite's
    clusters play both and each cluster the same one every run."""
    wanted = os.environ.get(SERIES_ENV, "")
    if wanted:
        if wanted not in RELEASES:
            raise ValueError(f"{SERIES_ENV}={wanted!r}: one of {', '.join(RELEASES)}")
        return wanted
    names = sorted(LABELLED)
    return names[zlib.crc32(label.encode()) % len(names)]


def os_release(series: str = "jammy") -> str:
    version, point, name = RELEASES[series]
    return (f'PRETTY_NAME="Ubuntu {point} LTS"\n'
            'NAME="Ubuntu"\n'
            f'VERSION_ID="{version}"\n'
            f'VERSION="{point} LTS ({name})"\n'
            f"VERSION_CODENAME={series}\n"
            "ID=ubuntu\n"
            "ID_LIKE=debian\n"
            'HOME_URL="https://www.ubuntu.com/"\n'
            'SUPPORT_URL="https://help.ubuntu.com/"\n'
            'BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"\n'
            'PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"\n'
            f"UBUNTU_CODENAME={series}\n")


def lsb_release(series: str = "jammy") -> str:
    version, point, _ = RELEASES[series]
    return (f"DISTRIB_ID=Ubuntu\nDISTRIB_RELEASE={version}\nDISTRIB_CODENAME={series}\n"
            f'DISTRIB_DESCRIPTION="Ubuntu {point} LTS"\n')
