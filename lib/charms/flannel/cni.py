"""The CNI chain the conflist needs on this machine, checked cheaply.

10-flannel.conflist runs `flannel` (which delegates to `bridge` with
`host-local` IPAM) and chains `portmap`; the runtime also runs `loopback`
for every pod. Only `flannel` is this charm's: the others come with the
principal (kubernetes-worker/-control-plane). When one is missing, pods fail
with libcni's "failed to find plugin" in `kubectl describe pod` only; the
unit's status says it instead (LP #1866869).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from . import paths

THIS_CHARM = "this charm"
PRINCIPAL = "the principal"
# plugin -> who provides it, in the order the chain runs them.
CHAIN = (("flannel", THIS_CHARM), ("bridge", PRINCIPAL), ("host-local", PRINCIPAL),
         ("portmap", PRINCIPAL), ("loopback", PRINCIPAL))


def chain_problem(bin_dir: Path = paths.CNI_BIN_DIR) -> Optional[str]:
    """The first plugin of the chain that is missing or not executable, as
    a status message; None when the chain is complete. A few stat() calls."""
    for name, provider in CHAIN:
        path = bin_dir / name
        if not path.is_file():
            return f'CNI plugin "{name}" missing from {bin_dir} (provided by {provider})'
        if not os.access(path, os.X_OK):
            return (f'CNI plugin "{name}" in {bin_dir} is not executable '
                    f'(provided by {provider})')
    return None


def published_cidr(confirmed: dict) -> str:
    """The pod network as the cni relation carries it: "10.1.0.0/16", or
    for dual-stack "10.1.0.0/16,fd10:1::/56" (IPv4 first, no spaces), which
    kubernetes-control-plane passes as is to kube-controller-manager's and
    kube-proxy's --cluster-cidr."""
    from .daemon import ipv6_shape
    ipv6 = ipv6_shape(confirmed)
    return ",".join([confirmed["Network"]] + ([str(ipv6[0])] if ipv6 else []))
