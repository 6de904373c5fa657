"""Rendering of flannel.service, 10-flannel.conflist and the checksum
offload udev rule from templates/:
the only module that imports jinja2 (a hook renders only when what a file
says changed).

Jinja2 is used directly: charms.templating.jinja2 imports charmhelpers, which
refuses to import off Ubuntu, and this module must import anywhere. Undefined
variables are errors, so a template and its caller cannot drift apart quietly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Optional

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from ..facts import paths
from ..facts.cni_config import DEFAULT_NETWORK_NAME
from ..facts.flanneld import HEALTHZ_IP, HEALTHZ_PORT

SERVICE_TEMPLATE = "flannel.service"
CONFLIST_TEMPLATE = paths.CNI_CONF_NAME
OFFLOAD_UDEV_TEMPLATE = paths.OFFLOAD_UDEV_RULE_NAME
DEFAULT_SUBNET_FILE = str(paths.Paths().subnet_env)  # also the flannel CNI plugin's default


def _render(templates_dir: str | os.PathLike[str], source: str, **context: object) -> str:
    env = Environment(
        loader=FileSystemLoader(str(templates_dir)),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["json"] = json.dumps  # JSON-safe strings in the conflist
    return env.get_template(source).render(**context)


def render_service(
    templates_dir: str | os.PathLike[str],
    *,
    subnet_manager: Sequence[str],
    iface: str,
    preamble: Sequence[str] = (),
    ip_masq: bool = True,
    subnet_file: str | os.PathLike[str] = DEFAULT_SUBNET_FILE,
    flanneld: str | os.PathLike[str] = paths.Paths().flanneld,
) -> str:
    """The systemd unit that runs flanneld with `subnet_manager`'s arguments
    (where it keeps its leases: steps/subnets), `preamble` the [Service]
    lines before ExecStart (an environment, and why)."""
    return _render(
        templates_dir,
        SERVICE_TEMPLATE,
        flanneld=str(flanneld),
        subnet_manager=" ".join(subnet_manager),
        preamble=list(preamble),
        iface=iface,
        ip_masq=ip_masq,
        subnet_file=str(subnet_file),
        healthz_ip=HEALTHZ_IP,
        healthz_port=HEALTHZ_PORT,
    )


def render_conflist(
    templates_dir: str | os.PathLike[str],
    *,
    subnet_file: str | os.PathLike[str] = DEFAULT_SUBNET_FILE,
    network_name: str = DEFAULT_NETWORK_NAME,
    mtu: Optional[int] = None,
) -> str:
    """The CNI network config; subnetFile is written only when it is not
    the plugin's own default. network_name names host-local's allocation
    table (/var/lib/cni/networks/<name>): keep the one in use. `mtu`, when
    given, is the pods' MTU in place of flanneld's FLANNEL_MTU (the flannel
    plugin hands the bridge plugin its delegate's mtu first)."""
    subnet_file = str(subnet_file)
    return _render(
        templates_dir,
        CONFLIST_TEMPLATE,
        subnet_file=subnet_file if subnet_file != DEFAULT_SUBNET_FILE else "",
        network_name=network_name,
        mtu=mtu,
    )


def render_offload_udev_rule(templates_dir: str | os.PathLike[str], *, ethtool: str,
                             feature: str) -> str:
    """The udev rule that turns `feature` off on each vxlan device flanneld
    adds (`ethtool`: its absolute path; udev's RUN wants one)."""
    return _render(templates_dir, OFFLOAD_UDEV_TEMPLATE, ethtool=ethtool, feature=feature)
