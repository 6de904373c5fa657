"""The Go binaries the sandbox runs, from pinned Go modules: the charm's
resource tarball (release/resource.py builds it, as scripts/build-resource
does for a release), libcni's ``cnitool`` (sandbox.pod), ``crictl``
(sandbox.cri), ``actionlint`` (tests/packaging) and the flanneld of the bug
report's cluster (v0.11.0, from before Go modules, built from the proxy's
module zips in GOPATH mode: sandbox.flanneld_v011). Builds and their cache
are release/go_build.py's.

API::

    build_resource(arch="amd64", out_dir=Path) -> Path   # out_dir/flannel-<arch>.tar.gz
    previous_resource(out_dir=Path) -> Path              # the same, flanneld v0.27.4
    cnitool_path() -> Path                               # host-arch cnitool, built if missing
    crictl_path() -> Path                                # host-arch crictl, built if missing
    kubernetes_paths() -> {component: Path}              # kube-apiserver, kubelet, ...
    e2e_paths() -> {name: Path}            # e2e-network.test, agnhost, ginkgo, coredns
    binary_path(name, arch="amd64") -> Path
        # "flanneld" | "flanneld-previous" | "flannel" | "cnitool" | "crictl" | "actionlint"
        # | "flanneld-v0.11.0" | "kube-apiserver" | "kubelet" | "kube-controller-manager"
        # | "kube-scheduler" | "kube-proxy"
    host_arch() -> str                                   # "amd64" | "arm64" | "s390x"
    elf_interpreter(path) -> str | None                  # PT_INTERP of an ELF file; None: static
    ARCHES                                               # ("amd64", "arm64", "s390x")
    class BuildFailed(RuntimeError)                      # .log holds go's output

Command line::

    python -m sandbox.resource [--cnitool] [--crictl] [--host-tools] [--test-tools] [--e2e]
        [--cached-only]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import time
from pathlib import Path

from release.go_build import (ARCHES, BuildFailed, GoBinary, build, cache_root,  # noqa: F401
                              cached, elf_interpreter, host_arch)
from release.resource import (CNI_PLUGIN, FLANNEL_PREVIOUS_VERSION, FLANNEL_VERSION,  # noqa: F401
                              FLANNEL_WRAPPER,
                              FLANNELD, FLANNELD_PREVIOUS, TARBALL_MEMBERS, build_resource)
from sandbox import flanneld_v011

# cnitool: libcni's runtime CLI; v1.3.0 is the newest cni release.
CNITOOL_PACKAGE = "github.com/containernetworking/cni/cnitool"
CNITOOL_VERSION = "v1.3.0"
# crictl: the CRI client kubelet's operators use, for the sandbox's CRI pods
# (sandbox.cri); it speaks CRI v1, which Debian's containerd 1.6 serves.
CRICTL_PACKAGE = "sigs.k8s.io/cri-tools/cmd/crictl"
CRICTL_VERSION = "v1.37.0"
# actionlint: the linter for .github/workflows (tests/packaging/test_workflows.py)
ACTIONLINT_PACKAGE = "github.com/rhysd/actionlint/cmd/actionlint"
ACTIONLINT_VERSION = "v1.7.12"
# containerd 2 (sandbox.cri's second runtime): kubelet 1.38 needs its CRI
# RuntimeConfig call, which containerd 1.x lacks. Pure Go (its btrfs
# snapshotter is cgo-only, devmapper and zfs are left out as its own Makefile
# allows), so static like the rest.
CONTAINERD2_VERSION = "v2.4.2"
CONTAINERD2_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD2_TAGS = ("no_btrfs", "no_devmapper", "no_zfs")


def _containerd2(name: str) -> GoBinary:
    return GoBinary(f"{name}-{CONTAINERD2_VERSION}", f"{CONTAINERD2_MODULE}/cmd/{name}",
                    CONTAINERD2_VERSION, output=name, build_tags=CONTAINERD2_TAGS,
                    ldflags=f"-s -w -X {CONTAINERD2_MODULE}/version.Version="
                            f"{CONTAINERD2_VERSION}")


# Kubernetes' own components (sandbox.kubernetes), from k8s.io/kubernetes
# through a wrapper module (sandbox/kubernetes-module: its staging modules
# pinned to the same release); kubelet 1.38 drops Debian's containerd 1.6.
KUBERNETES_VERSION = "v1.37.2"
KUBERNETES_MODULE_DIR = Path(__file__).parent / "kubernetes-module"
KUBERNETES_COMPONENTS = ("kube-apiserver", "kubelet", "kube-controller-manager",
                         "kube-scheduler", "kube-proxy")


def _kubernetes_ldflags() -> str:
    """So that every component says v1.37.2 instead of v0.0.0-master."""
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    version = "k8s.io/component-base/version"
    return (f"-s -w -X {version}.gitVersion={KUBERNETES_VERSION} "
            f"-X {version}.gitMajor={major} -X {version}.gitMinor={minor} "
            f"-X {version}.gitTreeState=clean")


def _kubernetes_component(name: str) -> GoBinary:
    return GoBinary(name, f"k8s.io/kubernetes/cmd/{name}", KUBERNETES_VERSION, output=name,
                    module_dir=str(KUBERNETES_MODULE_DIR), ldflags=_kubernetes_ldflags())


# Kubernetes' e2e network tests and the agnhost their pods run, from the same
# k8s.io/kubernetes release (sandbox/e2e-module), and CoreDNS, the cluster DNS
# the control plane charm deploys (sandbox.conformance).
E2E_MODULE_DIR = Path(__file__).parent / "e2e-module"
AGNHOST_VERSION = "2.66.1"      # test/images/agnhost/VERSION at KUBERNETES_VERSION
COREDNS_VERSION = "v1.15.0"
GINKGO_VERSION = "v2.32.0"     # as k8s.io/kubernetes' go.mod has it
E2E_BINARIES = ("e2e-network.test", "agnhost", "ginkgo", "coredns")


BINARIES = {
    "flanneld": FLANNELD,
    # the flanneld of this charm's earlier resources, for a unit on one
    "flanneld-previous": FLANNELD_PREVIOUS,
    "flannel": CNI_PLUGIN,
    "cnitool": GoBinary("cnitool", CNITOOL_PACKAGE, CNITOOL_VERSION, output="cnitool"),
    "crictl": GoBinary(
        "crictl", CRICTL_PACKAGE, CRICTL_VERSION, output="crictl",
        # so that `crictl --version` prints the pinned version instead of "unknown"
        ldflags=f"-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version={CRICTL_VERSION}",
    ),
    "actionlint": GoBinary(
        "actionlint", ACTIONLINT_PACKAGE, ACTIONLINT_VERSION, output="actionlint",
        ldflags=f"-s -w -X github.com/rhysd/actionlint.version={ACTIONLINT_VERSION}",
    ),
    # the bug report's flanneld (charm-flannel f79f180), for sandbox.old_flannel
    "flanneld-v0.11.0": GoBinary(
        "flanneld-v0.11.0", flanneld_v011.PACKAGE, flanneld_v011.VERSION, output="flanneld",
        ldflags=flanneld_v011.LDFLAGS, gopath_sources=flanneld_v011.SOURCES,
        prepare=flanneld_v011.prepare,
    ),
    **{name: _kubernetes_component(name) for name in KUBERNETES_COMPONENTS},
    "e2e-network.test": GoBinary(
        "e2e-network.test", "flannel-charm.invalid/e2e-network", KUBERNETES_VERSION,
        output="e2e-network.test", module_dir=str(E2E_MODULE_DIR), test_binary=True,
        ldflags=_kubernetes_ldflags()),
    "agnhost": GoBinary("agnhost", "k8s.io/kubernetes/test/images/agnhost", AGNHOST_VERSION,
                        output="agnhost", module_dir=str(E2E_MODULE_DIR)),
    "ginkgo": GoBinary("ginkgo", "github.com/onsi/ginkgo/v2/ginkgo", GINKGO_VERSION,
                       output="ginkgo", module_dir=str(E2E_MODULE_DIR)),
    "coredns": GoBinary("coredns", "github.com/coredns/coredns", COREDNS_VERSION,
                        output="coredns"),
    "containerd-2": _containerd2("containerd"),
    "containerd-shim-runc-v2-2": _containerd2("containerd-shim-runc-v2"),
}


def binary_path(name: str, arch: str = "amd64", progress=None) -> Path:
    """Path of a cached binary, built first if it is missing."""
    return build(BINARIES[name], arch, progress)


def previous_resource(out_dir: Path, progress=None) -> Path:
    """The host-arch resource as this charm shipped it before: flanneld
    FLANNEL_PREVIOUS_VERSION and the same CNI plugin."""
    return build_resource(host_arch(), out_dir, progress, flanneld_binary=FLANNELD_PREVIOUS)


def cnitool_path(progress=None) -> Path:
    """The host-arch cnitool, built into the cache if missing."""
    return binary_path("cnitool", host_arch(), progress)


def crictl_path(progress=None) -> Path:
    """The host-arch crictl, built into the cache if missing."""
    return binary_path("crictl", host_arch(), progress)


# What scripts/demo runs beside Kubernetes (flanneld v0.11.0: its negative
# control, charm-flannel's own resource), longest first; then what only the
# tests run, built after them at the lowest priority (scripts/setup-host)
HOST_TOOLS = ("flanneld", "containerd-2", "crictl", "flanneld-v0.11.0",
              "containerd-shim-runc-v2-2", "flannel", "cnitool")
TEST_TOOLS = ("flanneld-previous", "actionlint")


def kubernetes_paths(progress=None) -> dict[str, Path]:
    """Kubernetes' components, built one after another: they share most of
    their packages, which the first build leaves in Go's cache for the rest
    (built side by side, each would compile them again)."""
    return {name: binary_path(name, host_arch(), progress) for name in KUBERNETES_COMPONENTS}


def e2e_paths(progress=None) -> dict[str, Path]:
    """Kubernetes' e2e network tests, agnhost, ginkgo's CLI and CoreDNS
    (sandbox.conformance), built one after another (the first two share
    most of their packages)."""
    return {name: binary_path(name, host_arch(), progress) for name in E2E_BINARIES}


def build_host_tools(progress, start: float) -> int:
    """Every Go binary the sandbox runs here, built (or found cached) at once:
    Kubernetes' components (the longest: minutes on a cold cache) in one
    line, the others beside them."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = {"kubernetes": pool.submit(kubernetes_paths, progress)}
        futures.update({name: pool.submit(binary_path, name, host_arch(), progress)
                        for name in HOST_TOOLS})
    failed = [f"{name}: {future.exception()}" for name, future in futures.items()
              if future.exception() is not None]
    for line in failed:
        print(f"error: {line}", file=sys.stderr)
    progress(f"host tools done in {time.monotonic() - start:.1f}s")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.resource",
                                     description="Build the Go binaries the sandbox runs here "
                                                 "(the charm's resource: scripts/build-resource)")
    parser.add_argument("--cnitool", action="store_true", help="build cnitool (host arch)")
    parser.add_argument("--crictl", action="store_true", help="build crictl (host arch)")
    parser.add_argument("--host-tools", action="store_true",
                        help="build what the sandbox runs on this host (flanneld, the flannel "
                             "plugin, cnitool, crictl, ...), as many at once as there are cores")
    parser.add_argument("--test-tools", action="store_true",
                        help="build what only the tests run (the previous flanneld, "
                             "actionlint), one after another")
    parser.add_argument("--e2e", action="store_true",
                        help="build Kubernetes' e2e network tests, agnhost and CoreDNS "
                             "(python -m sandbox conformance)")
    parser.add_argument("--cached-only", action="store_true",
                        help="with --host-tools, --test-tools or --e2e: build nothing, "
                             "exit 1 unless all are cached")
    args = parser.parse_args(argv)
    progress = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    start = time.monotonic()
    if args.cached_only and not (args.host_tools or args.test_tools or args.e2e):
        parser.error("--cached-only checks --host-tools, --test-tools or --e2e")
    if args.cached_only:
        every = ((HOST_TOOLS + KUBERNETES_COMPONENTS if args.host_tools else ())
                 + (TEST_TOOLS if args.test_tools else ())
                 + (E2E_BINARIES if args.e2e else ()))
        return 0 if all(cached(BINARIES[n], host_arch()) for n in every) else 1
    if args.host_tools:
        return build_host_tools(progress, start)
    failed = 0
    for wanted, names, what in ((args.test_tools, TEST_TOOLS, "test tools"),
                                (args.e2e, E2E_BINARIES, "e2e binaries")):
        if wanted:
            try:
                for name in names:
                    binary_path(name, host_arch(), progress)
                progress(f"{what} done in {time.monotonic() - start:.1f}s")
            except BuildFailed as e:
                print(f"error: {e}", file=sys.stderr)
                failed = 1
    if args.test_tools or args.e2e:
        return failed
    try:
        for wanted, path in ((args.cnitool, cnitool_path), (args.crictl, crictl_path)):
            if wanted:
                print(path(progress))
    except BuildFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
