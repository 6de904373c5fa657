"""The identity of an Ubuntu release, as /etc/os-release and /etc/lsb-release
show it: what the sandbox's machines present (the charm, Juju's machine agent
and charmcraft read it to tell the series) on this Debian host."""
from __future__ import annotations

#: series -> (version, point release, code name)
RELEASES = {
    "jammy": ("22.04", "22.04.4", "Jammy Jellyfish"),
    "noble": ("24.04", "24.04.1", "Noble Numbat"),
}
SERIES_OF_VERSION = {version: series for series, (version, _, _) in RELEASES.items()}


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
