"""flanneld v0.11.0, the flanneld of the bug report's cluster, built from the
Go module proxy (docs/explanation/etcd-v2-clusters.md).

charm-flannel at f79f180 shipped flannel v0.11.0, which speaks only etcd's v2
API. v0.11.0 predates Go modules: its tree has glide.lock and a vendor/
directory, and the module zip the proxy serves leaves vendor/ out, so
`go install ...@v0.11.0` cannot build it. What builds here is a GOPATH-mode
build (GO111MODULE=off), as flannel's own Makefile did in 2019:

- flannel's module zip (github.com/coreos/flannel@v0.11.0) at
  $GOPATH/src/github.com/coreos/flannel;
- each dependency its Linux build of the etcd subnet manager and the
  vxlan/host-gw/ipip backends imports, at the served release nearest to its
  glide.lock pin (the proxy refuses bare commit hashes), under $GOPATH/src;
- two build-time edits (`prepare`), both compile-outs of code the charm never
  ran: main.go imports no cloud backend (alivpc, awsvpc, gce), no ipsec and
  no udp (cgo; charm-flannel's own builds dropped it too), and the kube
  subnet manager is a stub that refuses (its 2017 client-go does not build
  from the proxy). The etcd v2 subnet manager, the backends, -ip-masq and
  subnet.env are v0.11.0's own code.

    path = resource.binary_path("flanneld-v0.11.0")
"""
from __future__ import annotations

from pathlib import Path

MODULE = "github.com/coreos/flannel"
VERSION = "v0.11.0"
# The import path of the main package, and where it sits under $GOPATH/src.
PACKAGE = MODULE
LDFLAGS = f"-s -w -X {MODULE}/version.Version={VERSION}"

# module@version laid out at $GOPATH/src/<module>. glide.lock's pins are
# commits of 2017-2018; each line is the nearest release the proxy serves
# (etcd's v2 client of v3.3.10 needs ugorji's codec at GenVersion 8: v1.1.1).
DEPENDENCIES = (
    "github.com/coreos/etcd@v3.3.10+incompatible",
    "github.com/coreos/go-semver@v0.2.0",
    "github.com/ugorji/go@v1.1.1",
    "github.com/coreos/go-iptables@v0.4.5",
    "github.com/coreos/go-systemd@v0.0.0-20180511133405-39ca1b05acc7",
    "github.com/coreos/pkg@v0.0.0-20180928190104-399ea9e2e55f",
    "github.com/golang/glog@v0.0.0-20160126235308-23def4e6c14b",
    "github.com/joho/godotenv@v1.3.0",
    "github.com/jonboulle/clockwork@v0.1.0",
    "github.com/vishvananda/netlink@v1.0.0",
    "github.com/vishvananda/netns@v0.0.0-20180720170159-13995c7128cc",
    "golang.org/x/net@v0.0.0-20180906233101-161cd47e91fd",
    "golang.org/x/sys@v0.0.0-20180905080454-ebe1bf3edb33",
)
SOURCES = (f"{MODULE}@{VERSION}",) + DEPENDENCIES

DROPPED_BACKENDS = ("alivpc", "awsvpc", "gce", "ipsec", "udp")

KUBE_STUB = """\
// Built by the flannel charm's sandbox: the kube subnet manager is compiled
// out of this flanneld v0.11.0 (its client-go does not build from the proxy).
package kube

import (
\t"errors"

\t"github.com/coreos/flannel/subnet"
)

func NewSubnetManager(apiUrl, kubeconfig, prefix string) (subnet.Manager, error) {
\treturn nil, errors.New("this flanneld was built without the kube subnet manager")
}
"""


def prepare(src: Path) -> None:
    """The build-time edits, on flannel's tree at `src` (a writable copy)."""
    main = src / "main.go"
    lines = main.read_text().splitlines(keepends=True)
    dropped = {f'_ "{MODULE}/backend/{name}"' for name in DROPPED_BACKENDS}
    kept = [line for line in lines if line.strip() not in dropped]
    if len(lines) - len(kept) != len(DROPPED_BACKENDS):
        raise RuntimeError(f"{main}: expected to drop {len(DROPPED_BACKENDS)} backend "
                           f"imports, dropped {len(lines) - len(kept)}")
    main.write_text("".join(kept))
    kube = src / "subnet" / "kube"
    for old in kube.glob("*.go"):
        old.unlink()
    (kube / "kube.go").write_text(KUBE_STUB)
