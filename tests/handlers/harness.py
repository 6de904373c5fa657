"""The handler tier's harness (conftest.py holds its fixtures): the real
reactive module (reactive/flannel.py, the interface layers, charms.reactive's
dispatch, charmhelpers' unitdata) runs one hook at a time in this process,
on any host, without root. What cannot
be real here is stood in for: Juju by fake_juju.FakeJuju (its hook tools),
the machine's `ip`/`iptables`/`systemctl` by fake_machine.FakeMachine (held
to a real kernel's answers by tests/unit/test_machine_contract.py). etcd is
real (sandbox.etcd, with client TLS), and so are the files, below a
directory of the test's own (facts.paths.Paths.under).

A test sets a state (config, relations, flags, the machine), runs one
event (`unit.hook("config-changed")`) and checks the state: flags, status,
etcd, relation data, the machine, the files.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Callable

import yaml

REPO = Path(__file__).resolve().parents[2]

# charmhelpers takes this Debian host for the Ubuntu the charm runs on (it
# refuses any other); set before charmhelpers is imported
import charmhelpers.osplatform  # noqa: E402

charmhelpers.osplatform.get_platform = lambda: "ubuntu"

from charmhelpers.core import hookenv, unitdata  # noqa: E402
from charms.reactive import bus, endpoints, relations, trace  # noqa: E402

# what charms.reactive registers as it is imported (Endpoint._startup, ...):
# every hook starts with these and no more
FRAMEWORK_ATSTART = list(hookenv._atstart)
FRAMEWORK_ATEXIT = list(hookenv._atexit)
from fake_juju import FakeJuju, ToolRunner  # noqa: E402
from fake_machine import FakeMachine  # noqa: E402

from charms.flannel.facts.paths import Paths  # noqa: E402
from charms.flannel.steps import context as context_module  # noqa: E402

NETWORK = "/coreos.com/network"
# this machine's address (FakeMachine's eth0), and the prefix of flanneld's annotations
ADDRESS = "172.31.254.11"
KUBE_ANNOTATION = "flannel.alpha.coreos.com/"
IPV6_LEASE = "fd10:1:0:5::1/64"
FLANNELD_VERSION = "v0.28.10"
FLANNELD_SCRIPT = f"#!/bin/sh\necho 'Flannel version {FLANNELD_VERSION}' >&2\n".encode()
PLUGIN_SCRIPT = b"#!/bin/sh\nexit 0\n"


def charm_dir(root: Path) -> Path:
    """The charm as charm-build lays it out, for what charms.reactive loads."""
    charm = root / "charm"
    charm.mkdir()
    for name in ("metadata.yaml", "config.yaml"):
        shutil.copy(REPO / name, charm / name)
    shutil.copytree(REPO / "templates", charm / "templates")
    shutil.copytree(REPO / "cos", charm / "cos")
    shutil.copytree(REPO / "reactive", charm / "reactive",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for interface in ("etcd", "kubernetes-cni", "nrpe-external-master", "cos_agent"):
        shutil.copytree(REPO / "interfaces" / interface, charm / "hooks" / "relations" /
                        interface, ignore=shutil.ignore_patterns("__pycache__"))
        (charm / "hooks" / "relations" / interface / "__init__.py").touch()
    (charm / "hooks" / "relations" / "__init__.py").touch()
    return charm


def resource(root: Path, members=None) -> Path:
    """A flannel-<arch> tarball of scripts standing in for the binaries."""
    members = members or {"flanneld": FLANNELD_SCRIPT, "cni-plugin/flannel": PLUGIN_SCRIPT}
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    path = root / "flannel.tar.gz"
    path.write_bytes(buf.getvalue())
    return path


def defaults() -> dict:
    options = yaml.safe_load((REPO / "config.yaml").read_text())["options"]
    return {name: spec.get("default") for name, spec in options.items()}


class Unit:
    """One flannel unit on one machine, its hooks run in this process."""

    def __init__(self, root: Path, etcd, pki):
        self.root = root
        self.paths = Paths.under(root / "node")
        self.charm = charm_dir(root)
        self.juju = FakeJuju("flannel/0", defaults())
        self.juju.resources["flannel-amd64"] = str(resource(root))
        self.machine = FakeMachine(sys_class_net=self.paths.sys_class_net,
                                   proc_sys_net_bridge=self.paths.proc_sys_net_bridge)
        self.kernel("5.15.0-91-generic")   # Ubuntu 22.04's
        self.etcd_server, self.pki = etcd, pki
        # the fake flanneld on each subnet manager (flanneld_leases, on_the_api)
        self._on_etcd: Callable[[], None] = lambda: None
        self._on_kubernetes: Callable[[], None] = lambda: None
        self.now = 1_000_000.0
        # the machine's boot clock runs with the wall clock (a test may step one alone)
        booted = self.now - 3600.0
        self.machine.since_boot = lambda: self.now - booted
        (self.paths.cni_bin_dir).mkdir(parents=True)
        for plugin in ("bridge", "host-local", "portmap", "loopback"):
            (self.paths.cni_bin_dir / plugin).write_bytes(PLUGIN_SCRIPT)
            (self.paths.cni_bin_dir / plugin).chmod(0o755)
        self.paths.sys_class_net.mkdir(parents=True)

    # --- the model -----------------------------------------------------------------------
    def relate_etcd(self, connection_string: str = "") -> str:
        pki = self.pki
        data = {"connection_string": connection_string or self.etcd_server.connection_string,
                "version": "3.5.17", "client_ca": pki.ca_cert.read_text(),
                "client_cert": pki.client_cert.read_text(),
                "client_key": pki.client_key.read_text()}
        return self.juju.relate("etcd", "etcd", {"etcd/0": data})

    def unrelate(self, rid: str) -> None:
        """`juju remove-relation`, as this unit's hooks see it: each remote
        unit's -departed hook (its data still readable there), then -broken."""
        relation = self.juju.relations[rid]
        for remote in sorted(relation.units):
            relation.departing[remote] = relation.units.pop(remote)
            self.hook(f"{relation.endpoint}-relation-departed", rid, remote)
        self.juju.unrelate(rid)
        self.hook(f"{relation.endpoint}-relation-broken", rid)

    def files_holding(self, data: bytes) -> list[str]:
        """Every file below this unit's directories (its charm directory and
        state, the machine's files) whose bytes hold `data`."""
        return sorted(str(path) for path in self.root.rglob("*")
                      if path.is_file() and not path.is_symlink() and data in path.read_bytes())

    def relate_cni(self, principal: str = "kubernetes-worker", **data) -> str:
        return self.juju.relate("cni", principal, {f"{principal}/0": {
            "kubeconfig-hash": "abc", **data}})

    def lease(self, subnet: str = "10.1.52.1/24", network: str = "10.1.0.0/16",
              ipv6: str = "") -> None:
        """flanneld wrote subnet.env for this lease."""
        self.paths.subnet_env.parent.mkdir(parents=True, exist_ok=True)
        text = (f"FLANNEL_NETWORK={network}\nFLANNEL_SUBNET={subnet}\nFLANNEL_MTU=1450\n"
                "FLANNEL_IPMASQ=true\n")
        if ipv6:
            v6_network, v6_subnet = ipv6.split(",")
            text += f"FLANNEL_IPV6_NETWORK={v6_network}\nFLANNEL_IPV6_SUBNET={v6_subnet}\n"
        self.paths.subnet_env.write_text(text)

    def kernel(self, release: str) -> None:
        """The machine runs this kernel (/proc/sys/kernel/osrelease)."""
        self.paths.kernel_release.parent.mkdir(parents=True, exist_ok=True)
        self.paths.kernel_release.write_text(release + "\n")

    def flanneld_leases(self, subnet: str = "10.1.52.1/24",
                        then: Callable[[], None] = lambda: None) -> None:
        """What flanneld does at each start from now on: lease `subnet` in
        etcd under the node's address and write subnet.env (and `then()`)."""
        def start():
            config = json.loads(self.etcd_values().get(f"{NETWORK}/config") or "{}")
            # (flanneld keys a dual-stack lease by both its subnets)
            name = str(ipaddress.ip_interface(subnet).network) + (
                f"&{ipaddress.ip_interface(IPV6_LEASE).network}"
                if config.get("EnableIPv6") else "")
            self.put_lease(name, "172.31.254.11")
            self.lease(subnet, ipv6=f"{config['IPv6Network']},{IPV6_LEASE}"
                       if config.get("EnableIPv6") else "")
            self.flanneld_makes_its_devices()
            then()
        self._on_etcd = start
        self.machine.on_start = self._fake_flanneld

    def _fake_flanneld(self) -> None:
        """What the started flanneld does, on the subnet manager its unit file names."""
        unit_file = self.paths.service_file.read_text() if self.paths.service_file.exists() \
            else ""
        start = self._on_kubernetes if "-kube-subnet-mgr" in unit_file else self._on_etcd
        start()

    def flanneld_makes_its_devices(self) -> None:
        """flanneld's vxlan devices, as it makes them at start for the network
        it reads (etcd's config, or net-conf.json on the Kubernetes API)."""
        if self.paths.net_conf.exists():
            text = self.paths.net_conf.read_text()
        else:
            text = self.etcd_values().get(f"{NETWORK}/config")
        config = json.loads(text) if text else {}
        backend = config.get("Backend") or {}
        if backend.get("Type") != "vxlan":
            return
        vni = backend.get("VNI", 1)
        if config.get("EnableIPv4", True):
            self.machine.vxlan_device(f"flannel.{vni}")
        if config.get("EnableIPv6"):
            self.machine.vxlan_device(f"flannel-v6.{vni}", mtu=1430)

    def on_the_api(self, api, node: str = "m1", pod_cidrs=("10.1.1.0/24",),
                   user: str = "admin") -> None:
        """subnet-manager=kubernetes against `api` (sandbox.api_server): root's
        kubeconfig for it, this machine (hostname `node`) registered as Node
        `node` with these pod CIDRs, and from now on what flanneld does at
        each start on the API: annotate its Node, write subnet.env from its
        pod CIDRs, make its devices."""
        self.paths.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        self.paths.kubeconfig.write_text(api.kubeconfig(user))
        self.paths.hostname.parent.mkdir(parents=True, exist_ok=True)
        self.paths.hostname.write_text(node + "\n")
        if node not in api.nodes():
            api.node(node, [ADDRESS], list(pod_cidrs))

        def start():
            config = json.loads(self.paths.net_conf.read_text())
            cidrs = api.nodes()[node]["spec"].get("podCIDRs") or []
            lines, annotations = ["FLANNEL_MTU=1450", "FLANNEL_IPMASQ=true"], {
                KUBE_ANNOTATION + "kube-subnet-manager": "true",
                KUBE_ANNOTATION + "backend-type": config["Backend"]["Type"]}
            for cidr in map(ipaddress.ip_network, cidrs):
                gateway = f"{next(cidr.hosts())}/{cidr.prefixlen}"
                if cidr.version == 4 and config.get("EnableIPv4", True):
                    lines += [f"FLANNEL_NETWORK={config['Network']}", f"FLANNEL_SUBNET={gateway}"]
                    annotations[KUBE_ANNOTATION + "public-ip"] = ADDRESS
                elif cidr.version == 6 and config.get("EnableIPv6"):
                    lines += [f"FLANNEL_IPV6_NETWORK={config['IPv6Network']}",
                              f"FLANNEL_IPV6_SUBNET={gateway}"]
                    annotations[KUBE_ANNOTATION + "public-ipv6"] = "fd00::11"
            api.annotate(node, annotations)
            self.paths.subnet_env.parent.mkdir(parents=True, exist_ok=True)
            self.paths.subnet_env.write_text("\n".join(lines) + "\n")
            self.flanneld_makes_its_devices()
        self._on_kubernetes = start
        self.machine.on_start = self._fake_flanneld

    # --- etcd, as a test looks at it --------------------------------------------------------
    def etcd(self):
        import etcd3gw
        host, port = self.etcd_server.endpoint.rsplit("//", 1)[1].rsplit(":", 1)
        return etcd3gw.Etcd3Client(host=host, port=int(port), protocol="https",
                                   session=self.etcd_server.session(), timeout=5)

    def etcd_values(self, prefix: str = NETWORK) -> dict[str, str]:
        return {(meta["key"].decode() if isinstance(meta["key"], bytes) else meta["key"]):
                value.decode() for value, meta in self.etcd().get_prefix(prefix)}

    def put_lease(self, subnet: str, public_ip: str, ttl: int = 86400) -> str:
        """A lease as flanneld writes it ("10.1.7.0/24" held by `public_ip`)."""
        client = self.etcd()
        key = f"{NETWORK}/subnets/{subnet.replace('/', '-')}"
        client.put(key, json.dumps({"PublicIP": public_ip, "BackendType": "vxlan"}),
                   lease=client.lease(ttl))
        return key

    # --- what a test checks ------------------------------------------------------------------
    @property
    def status(self) -> tuple[str, str]:
        return self.juju.status

    @property
    def flags(self) -> set[str]:
        kv = unitdata.Storage(str(self.db))
        try:
            return {key[len("reactive.states."):] for key in kv.getrange("reactive.states.")}
        finally:
            kv.close()

    def kv(self, key: str):
        kv = unitdata.Storage(str(self.db))
        try:
            return kv.get(key)
        finally:
            kv.close()

    @property
    def db(self) -> Path:
        return self.charm / ".unit-state.db"

    @property
    def log(self) -> str:
        return "\n".join(f"{level}: {message}" for level, message in self.juju.logs)

    # --- one hook -----------------------------------------------------------------------------
    def hook(self, name: str, relation: str = "", remote: str = "") -> None:
        """Run hook `name` in this process, as Juju would run it on the unit."""
        env = {"JUJU_UNIT_NAME": self.juju.unit, "CHARM_DIR": str(self.charm),
               "JUJU_CHARM_DIR": str(self.charm), "JUJU_HOOK_NAME": name,
               "JUJU_MODEL_NAME": "handlers", "UNIT_STATE_DB": str(self.db),
               "JUJU_MODEL_UUID": "1a2b3c4d-0000-4000-8000-000000000000",
               "JUJU_RELATION_ID": relation, "JUJU_REMOTE_UNIT": remote,
               "JUJU_AVAILABILITY_ZONE": "", "JUJU_VERSION": "3.6.0"}
        if relation:
            # the endpoint's name, as Juju sets it in a relation hook only
            # (charms.reactive hands a relation hook's @hook handlers that endpoint)
            env.update(JUJU_RELATION=relation.split(":")[0],
                       JUJU_REMOTE_APP=remote.split("/")[0])
        with _hook_process(env, self), self._machine():
            from charms.reactive import main
            old_argv = sys.argv
            sys.argv = [str(self.charm / "hooks" / name)]
            try:
                main()
            finally:
                sys.argv = old_argv
                self.machine.starting = False   # flanneld is ready by the next hook

    @contextlib.contextmanager
    def _machine(self):
        """Every HookContext of this hook runs on this unit's machine and files."""
        original = context_module.HookContext.__init__
        unit = self

        def init(ctx, juju, state, *, machine=None, paths=None, clock=None):
            original(ctx, juju, state, machine=unit.machine, paths=unit.paths,
                     clock=lambda: unit.now)
        context_module.HookContext.__init__ = init
        try:
            yield
        finally:
            context_module.HookContext.__init__ = original


@contextlib.contextmanager
def _hook_process(env: dict, unit: Unit):
    """What a hook process starts from: its environment, empty framework
    state (charms.reactive's registries, charmhelpers' caches), the charm's
    handler modules imported afresh; all put back afterwards."""
    saved_env = dict(os.environ)
    saved_path = list(sys.path)
    saved_modules = set(sys.modules)
    saved_factories = list(relations.RelationFactory._factories)
    os.environ.update(env)
    bus.Handler._HANDLERS = {}
    endpoints.Endpoint._endpoints = {}
    hookenv._atstart[:] = FRAMEWORK_ATSTART
    hookenv._atexit[:] = FRAMEWORK_ATEXIT
    hookenv.cache.clear()
    hookenv._cache_config = None
    trace._tracer = None
    unitdata._KV = None
    runner = ToolRunner(unit.juju)
    saved_subprocess, saved_check_output = hookenv.subprocess, subprocess.check_output
    hookenv.subprocess = runner
    subprocess.check_output = runner.check_output   # (the tools the charm runs itself)
    try:
        yield
    finally:
        if unitdata._KV is not None:
            unitdata._KV.close()
        unitdata._KV = None
        hookenv.subprocess = saved_subprocess
        subprocess.check_output = saved_check_output
        hookenv.cache.clear()
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_modules:
            if name.split(".")[0] in ("reactive", "relations"):
                del sys.modules[name]
        relations.RelationFactory._factories = saved_factories


def deployed(unit: Unit, subnet: str = "10.1.52.1/24",
             flanneld_also: Callable[[], None] = lambda: None) -> tuple[str, str]:
    """install, etcd's and the principal's relations, flanneld on its lease
    (doing `flanneld_also` at each start): the relation ids of etcd and cni."""
    unit.flanneld_leases(subnet, then=flanneld_also)
    unit.hook("install")
    etcd = unit.relate_etcd()
    unit.hook("etcd-relation-changed", etcd, "etcd/0")
    cni = unit.relate_cni()
    unit.hook("cni-relation-changed", cni, "kubernetes-worker/0")
    return etcd, cni


def configure(unit: Unit, **options) -> None:
    """`juju config flannel KEY=VALUE ...` (underscores for dashes)."""
    unit.juju.config.update({key.replace("_", "-"): value for key, value in options.items()})
    unit.hook("config-changed")
