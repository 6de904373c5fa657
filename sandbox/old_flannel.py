"""The charm this project replaces (charm-flannel), as deployed units carry it.

    charm = old_charm_dir(workdir / "old", "a69755c")   # or "f79f180"
    tarball = old_resource(resource, workdir / "old-resource", "a69755c")
    controller.deploy("flannel", charm, resources={"flannel-amd64": tarball})
    ... relate, settle ...
    controller.upgrade_charm("flannel", built_charm, resources=...)   # the refresh
    Cluster(..., **OLD_CHARM_CLUSTER); deploy_old_charm(cluster, workdir, say)
        # f79f180 on the bug report's cluster (sandbox.demo, sandbox.conformance)
    MISSING_FLANNEL_EVENT      # the bug report's event, as kubelet words it

A real charm directory the sandbox's Juju deploys as the application
`flannel`; its `dispatch` (stdlib Python, run by the machine's python3 in
every hook) converges the unit to the end state of charm-flannel's reactive
handlers at the two revisions operators run (read from
charmed-kubernetes/charm-flannel: reactive/flannel.py at f79f180 and the
src/ layout of its latest revision, templates/flannel.service,
templates/10-flannel.conflist, interface-etcd's save_client_credentials):

- the resource unpacked into $CHARM_DIR/files/flannel; `install -D` of
  flanneld and etcdctl into /usr/local/bin (0755); at a69755c also
  cni-plugin/flannel copied to /opt/cni/bin/flannel. At f79f180 the plugin
  there is the worker's (its cni-plugins v0.7 had flannel).
- /etc/ssl/flannel (0755) with client-{ca,cert,key}.pem, all 0644, as
  interface-etcd's save_client_credentials writes them.
- /lib/systemd/system/flannel.service and /etc/cni/net.d/10-flannel.conflist
  (network "CDK-flannel-network") rendered as charmhelpers renders: 0444.
  The unit runs flanneld with --ip-masq (both revisions, since 9a6f215), so
  the node carries flanneld's NAT rules.
- flanneld started under that unit, its lease in etcd, flannel.1.
- the network config in etcd: {"Network": cidr, "Backend": {"Type": "vxlan"}}
  (a69755c adds VNI and Port when set), written as the old charm's etcdctl
  wrote it: at f79f180 with etcdctl v2.3.7's `set`, i.e. etcd's **v2** API
  (PUT /v2/keys/...; etcd must serve v2), at a69755c with etcdctl v3's
  `put` (here through etcd's v3 JSON gateway). The stand-in's etcdctl is a
  placeholder; the requests are the ones those etcdctls make.
- the resource's flanneld: at f79f180 the real flannel **v0.11.0**
  (sandbox.flanneld_v011), which speaks etcd v2 only: the config and every
  node's lease live in the v2 keyspace, invisible to the v3 API. At
  a69755c (flannel v0.22, etcd v3) this project's flanneld v0.27.4 with
  OLD_BUILD_MARK appended, so that a refresh replaces it.
- its flags in $CHARM_DIR/.unit-state.db exactly where charms.reactive keeps
  them (charmhelpers unitdata: sqlite table kv, key "reactive.states.<flag>",
  JSON value), interface flags as RelationBase stored them, and the
  data_changed hashes (reactive.data_changed.flannel_etcd_*).
- cidr and cni-conf-file published on the cni relation; status
  "Flannel subnet 10.1.x.1/24".

Not reproduced: the old charm's 20 s retry sleeps, its nrpe check. Its stop
hook (the refresh never runs it) only with `old_charm_dir(..., stop_hook=True)`:
it deleted /opt/cni/bin/flannel, bridge and host-local.
"""
from __future__ import annotations

import functools
import gzip
import io
import re
import tarfile
from pathlib import Path

REVISIONS = ("f79f180", "a69755c")

# Marks that make the old builds differ from this charm's (a Go binary runs
# with bytes appended): a refresh must replace flanneld, and the worker's
# flannel plugin must be told apart from any charm's.
OLD_BUILD_MARK = b"\n# charm-flannel resource build\n"
WORKER_BUILD_MARK = b"\n# kubernetes-worker cni-plugins v0.7.5\n"

ETCDCTL_PLACEHOLDER = b"#!/bin/sh\necho 'etcdctl (charm-flannel resource)' >&2\nexit 1\n"

METADATA = """\
name: flannel
summary: charm-flannel as deployed (sandbox stand-in, revision {revision})
description: The previous flannel charm's end state, for refresh tests.
subordinate: true
series: [jammy]
requires:
  etcd:
    interface: etcd
  cni:
    interface: kubernetes-cni
    scope: container
provides:
  nrpe-external-master:
    interface: nrpe-external-master
    scope: container
resources:
  flannel-amd64: {{type: file, filename: flannel.tar.gz, description: flannel}}
  flannel-arm64: {{type: file, filename: flannel.tar.gz, description: flannel}}
  flannel-s390x: {{type: file, filename: flannel.tar.gz, description: flannel}}
"""

CONFIG = """\
options:
  cidr: {type: string, default: 10.1.0.0/16, description: network}
  iface: {type: string, default: "", description: interface}
  port: {type: int, default: 0, description: vxlan port}
  vni: {type: int, default: 0, description: vxlan VNI}
  nagios_context: {type: string, default: juju, description: nagios}
  nagios_servicegroups: {type: string, default: "", description: nagios}
"""

DISPATCH = r'''#!/usr/bin/python3
"""charm-flannel at revision @REVISION@, converged in every hook (sandbox stand-in)."""
import base64
import hashlib
import json
import os
import shutil
import sqlite3
import ssl
import subprocess
import sys
import urllib.parse
import urllib.request

REVISION = "@REVISION@"
# its stop hook's damage (LP #1866869), when the stand-in is asked for it
STOP_DELETES_PLUGINS = @STOP_DELETES_PLUGINS@
CHARM_DIR = os.environ["CHARM_DIR"]
HOOK = os.path.basename(os.environ.get("JUJU_DISPATCH_PATH", "hooks/unknown"))
ETCD_PATH = "/etc/ssl/flannel"
KEY, CERT, CA = (ETCD_PATH + "/client-key.pem", ETCD_PATH + "/client-cert.pem",
                 ETCD_PATH + "/client-ca.pem")
SERVICE = """[Unit]
Description=Flannel Overlay Network
Documentation=https://github.com/coreos/flannel
Wants=network-online.target
After=network.target network-online.target

[Service]
ExecStart=/usr/local/bin/flanneld -iface={iface} -etcd-endpoints={endpoints} \
-etcd-certfile={cert_path}/client-cert.pem -etcd-keyfile={cert_path}/client-key.pem  \
-etcd-cafile={cert_path}/client-ca.pem --ip-masq
TimeoutStartSec=0
Restart=on-failure
LimitNOFILE=655536

[Install]
WantedBy=multi-user.target
"""
CONFLIST = """{
    "name": "CDK-flannel-network",
    "cniVersion": "0.3.1",
    "plugins": [
      {
        "type": "flannel",
        "delegate": {
          "hairpinMode": true,
          "isDefaultGateway": true
        }
      },
      {
        "type": "portmap",
        "capabilities": {"portMappings": true},
        "snat": true
      }
    ]
}
"""


class UnitState:
    """charmhelpers.core.unitdata's sqlite layout, which charms.reactive uses."""

    def __init__(self, path):
        open(path, "a").close()
        os.chmod(path, 0o600)
        self.db = sqlite3.connect(path)
        self.db.execute("create table if not exists kv (key text, data text, primary key (key))")
        self.db.execute("create table if not exists kv_revisions (key text, revision integer, "
                        "data text, primary key (key, revision))")
        self.db.execute("create table if not exists hooks (version integer primary key "
                        "autoincrement, hook text, date text)")

    def get(self, key, default=None):
        row = self.db.execute("select data from kv where key=?", [key]).fetchone()
        return json.loads(row[0]) if row else default

    def set(self, key, value):
        self.db.execute("insert or replace into kv (key, data) values (?, ?)",
                        [key, json.dumps(value)])

    def unset(self, key):
        self.db.execute("delete from kv where key=?", [key])

    def close(self):
        self.db.commit()
        self.db.close()


STATE = UnitState(os.path.join(CHARM_DIR, ".unit-state.db"))


def is_set(flag):
    return STATE.get("reactive.states." + flag, "__unset__") != "__unset__"


def set_flag(flag, value=None):
    STATE.set("reactive.states." + flag, value)


def clear_flag(flag):
    STATE.unset("reactive.states." + flag)


def conversation_flag(flag, relation, on):
    # RelationBase (interface-etcd, old interface-kubernetes-cni) flags carry
    # the relation name and conversation keys as their value.
    if on:
        set_flag(flag, {"relation": relation,
                        "conversations": ["reactive.conversations.%s.global" % relation]})
    else:
        clear_flag(flag)


def data_changed(key, data):
    new = hashlib.md5(json.dumps(data, sort_keys=True).encode("utf8")).hexdigest()
    old = STATE.get("reactive.data_changed." + key)
    STATE.set("reactive.data_changed." + key, new)
    return old != new


def tool(*argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def tool_json(*argv):
    return json.loads(tool(*argv, "--format=json") or "null")


def log(message):
    tool("juju-log", message)


def config():
    return tool_json("config-get", "--all")


def remote(endpoint):
    """(relation id, data of the first remote unit that has any) or (None, {})."""
    for rid in tool_json("relation-ids", endpoint) or []:
        for unit in tool_json("relation-list", "-r", rid) or []:
            return rid, tool_json("relation-get", "-r", rid, "-", unit) or {}
        return rid, {}
    return None, {}


def write(path, text, mode):
    with open(path, "w") as handle:
        handle.write(text)
    os.chmod(path, mode)


def render(text, path):
    # charmhelpers' templating.render: parent 0755, file 0444.
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    write(path, text, 0o444)


def arch():
    return tool("dpkg", "--print-architecture").strip()


def install_binaries():
    archive = tool("resource-get", "flannel-" + arch()).strip()
    if not archive or os.stat(archive).st_size < 1000000:
        tool("status-set", "blocked", "Missing flannel resource.")
        return
    unpack = os.path.join(CHARM_DIR, "files", "flannel")
    os.makedirs(unpack, exist_ok=True)
    subprocess.check_call(["tar", "xfz", archive, "-C", unpack])
    for name in ("flanneld", "etcdctl"):
        subprocess.check_call(["install", "-D", os.path.join(unpack, name),
                               "/usr/local/bin/" + name])
    if REVISION == "a69755c":
        os.makedirs("/opt/cni/bin", exist_ok=True)
        shutil.copy(unpack + "/cni-plugin/flannel", "/opt/cni/bin")
    set_flag("flannel.binaries.installed")


def save_client_credentials(data):
    # interface-etcd: makedirs with the default mode, open(path, "w").
    for key, path in (("client_cert", CERT), ("client_key", KEY), ("client_ca", CA)):
        if data.get(key):
            if not os.path.isdir(ETCD_PATH):
                os.makedirs(ETCD_PATH)
            with open(path, "w") as stream:
                stream.write(data[key])


def bind_interface():
    try:
        data = tool_json("network-get", "cni")
    except subprocess.CalledProcessError:
        data = {}
    for address in data.get("bind-addresses", []):
        name = address.get("interfacename") or address.get("interface-name") or ""
        if not name.startswith("fan-"):
            return name
    return ""


def put_network_config(connection, cfg):
    network = {"Network": cfg["cidr"], "Backend": {"Type": "vxlan"}}
    if REVISION == "a69755c":
        if cfg.get("vni"):
            network["Backend"]["VNI"] = cfg["vni"]
        if cfg.get("port"):
            network["Backend"]["Port"] = cfg["port"]
    context = ssl.create_default_context(cafile=CA)
    context.load_cert_chain(CERT, KEY)
    endpoint = connection.split(",")[0].strip()
    if REVISION == "f79f180":
        # etcdctl v2.3.7: `etcdctl set /coreos.com/network/config '<json>'`
        body = urllib.parse.urlencode({"value": json.dumps(network)}).encode()
        request = urllib.request.Request(
            endpoint + "/v2/keys/coreos.com/network/config", data=body, method="PUT",
            headers={"Content-Type": "application/x-www-form-urlencoded"})
    else:
        # etcdctl v3.4 (ETCDCTL_API=3): `etcdctl put /coreos.com/network/config '<json>'`
        body = json.dumps({
            "key": base64.b64encode(b"/coreos.com/network/config").decode(),
            "value": base64.b64encode(json.dumps(network).encode()).decode()}).encode()
        request = urllib.request.Request(endpoint + "/v3/kv/put", data=body,
                                         headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, context=context, timeout=10).read()
        return True
    except OSError as error:
        log("Unexpected error configuring network: %s" % error)
        return False


def converge():
    cfg = config()
    etcd_rid, etcd = remote("etcd")
    cni_rid, cni = remote("cni")
    tls = all(etcd.get(k) for k in ("client_ca", "client_cert", "client_key"))
    conversation_flag("etcd.connected", "etcd", etcd_rid is not None)
    conversation_flag("etcd.available", "etcd", bool(etcd.get("connection_string")))
    conversation_flag("etcd.tls.available", "etcd", tls)
    conversation_flag("cni.connected", "cni", cni_rid is not None)
    conversation_flag("cni.is-worker", "cni", cni_rid is not None and not cni.get("is_master"))

    if not is_set("flannel.binaries.installed"):
        install_binaries()
    cni_ready = is_set("cni.connected") if REVISION == "a69755c" else is_set("cni.is-worker")
    if cni_ready and not is_set("flannel.cni.configured"):
        render(CONFLIST, "/etc/cni/net.d/10-flannel.conflist")
        set_flag("flannel.cni.configured")
    if tls and not is_set("flannel.etcd.credentials.installed"):
        save_client_credentials(etcd)
        set_flag("flannel.etcd.credentials.installed")
    ready = is_set("flannel.binaries.installed") and is_set("flannel.etcd.credentials.installed")
    if ready and tls and not is_set("flannel.service.installed"):
        connection = etcd["connection_string"]
        data_changed("flannel_etcd_connections", connection)
        data_changed("flannel_etcd_client_cert", {k: etcd.get(k) for k in
                                                  ("client_cert", "client_key", "client_ca")})
        render(SERVICE.format(iface=cfg.get("iface") or bind_interface(),
                              endpoints=connection, cert_path=ETCD_PATH),
               "/lib/systemd/system/flannel.service")
        subprocess.check_call(["systemctl", "enable", "flannel"])
        set_flag("flannel.service.installed")
        clear_flag("flannel.service.started")
    if ready and etcd.get("connection_string") and not is_set("flannel.network.configured"):
        if put_network_config(etcd["connection_string"], cfg):
            set_flag("flannel.network.configured")
            clear_flag("flannel.service.started")
        else:
            tool("status-set", "waiting", "Waiting on etcd.")
    if (is_set("flannel.binaries.installed") and is_set("flannel.service.installed")
            and is_set("flannel.network.configured") and not is_set("flannel.service.started")):
        subprocess.check_call(["systemctl", "restart", "flannel"])
        set_flag("flannel.service.started")
    if (cni_rid is not None and is_set("flannel.service.started")
            and is_set("flannel.cni.configured") and not is_set("flannel.cni.available")):
        tool("relation-set", "-r", cni_rid, "cidr=" + cfg["cidr"],
             "cni-conf-file=10-flannel.conflist")
        set_flag("flannel.cni.available")
    if is_set("flannel.binaries.installed") and not is_set("flannel.version.set"):
        out = subprocess.run(["/usr/local/bin/flanneld", "-version"], capture_output=True,
                             text=True)
        version = (out.stdout + out.stderr).split("v")[-1].strip()
        if version:
            tool("application-version-set", version)
            set_flag("flannel.version.set")
    if is_set("flannel.service.started") and is_set("flannel.cni.available"):
        try:
            with open("/run/flannel/subnet.env") as env:
                subnet = dict(line.strip().split("=") for line in env if "=" in line)
            tool("status-set", "active", "Flannel subnet " + subnet["FLANNEL_SUBNET"])
        except (OSError, KeyError):
            tool("status-set", "waiting", "Waiting for Flannel")
    elif etcd_rid is None:
        tool("status-set", "blocked", "Waiting for etcd relation.")


try:
    if HOOK not in ("stop", "remove"):
        converge()
    elif HOOK == "stop" and STOP_DELETES_PLUGINS:
        for name in ("flannel", "bridge", "host-local"):
            try:
                os.remove("/opt/cni/bin/" + name)
            except FileNotFoundError:
                pass
finally:
    STATE.close()
sys.exit(0)
'''


def old_charm_dir(dest: Path, revision: str, *, stop_hook: bool = False) -> Path:
    """Write the stand-in charm for `revision` ("f79f180" or "a69755c");
    with stop_hook, its stop hook deletes /opt/cni/bin/flannel, bridge and
    host-local as charm-flannel's did (the bug report's negative control)."""
    if revision not in REVISIONS:
        raise ValueError(f"unknown charm-flannel revision {revision!r}: one of {REVISIONS}")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "metadata.yaml").write_text(METADATA.format(revision=revision))
    (dest / "config.yaml").write_text(CONFIG)
    dispatch = dest / "dispatch"
    dispatch.write_text(DISPATCH.replace("@REVISION@", revision)
                        .replace("@STOP_DELETES_PLUGINS@", str(bool(stop_hook))))
    dispatch.chmod(0o755)
    return dest


def _members(tarball: Path) -> dict[str, bytes]:
    """The resource's files by name, read once per process while it is
    the same file: every reactive-worker cluster asks (about a second of
    gunzipping flanneld each time)."""
    stat = Path(tarball).stat()
    return _read_members(str(tarball), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=1)
def _read_members(tarball: str, mtime_ns: int, size: int) -> dict[str, bytes]:
    with tarfile.open(tarball, "r:gz") as archive:
        return {m.name.lstrip("./"): archive.extractfile(m).read()
                for m in archive if m.isfile()}


def old_resource(resource: Path, dest: Path, revision: str,
                 flanneld_v011: bytes | None = None) -> Path:
    """charm-flannel's resource at `revision`: flanneld and etcdctl, and at
    a69755c cni-plugin/flannel. At f79f180 flanneld is v0.11.0
    (`flanneld_v011`, built by sandbox.resource if not given); at a69755c
    the sandbox resource's flanneld and plugin with OLD_BUILD_MARK appended
    (an older build than the one the refresh brings)."""
    if revision not in REVISIONS:
        raise ValueError(f"unknown charm-flannel revision {revision!r}: one of {REVISIONS}")
    members = _members(resource)
    if revision == "f79f180":
        if flanneld_v011 is None:
            from sandbox.resource import binary_path, host_arch
            flanneld_v011 = binary_path("flanneld-v0.11.0", host_arch()).read_bytes()
        files = {"flanneld": flanneld_v011, "etcdctl": ETCDCTL_PLACEHOLDER}
    else:
        files = {"flanneld": members["flanneld"] + OLD_BUILD_MARK,
                 "etcdctl": ETCDCTL_PLACEHOLDER,
                 "cni-plugin/flannel": members["cni-plugin/flannel"] + OLD_BUILD_MARK}
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            archive.addfile(info, io.BytesIO(data))
    out = dest / resource.name
    # level 1: gzip's default 9 took seconds on flanneld, for nothing here
    out.write_bytes(gzip.compress(buffer.getvalue(), compresslevel=1))
    return out


def workers_flannel(resource: Path) -> bytes:
    """The flannel plugin an old kubernetes-worker's cni-plugins shipped."""
    return _members(resource)["cni-plugin/flannel"] + WORKER_BUILD_MARK


def give_worker_flannel(machine, data: bytes) -> None:
    """What the worker of f79f180's time did at its install: put its own
    `flannel` in /opt/cni/bin with its other plugins."""
    machine.run(["sh", "-c", "cat > /opt/cni/bin/flannel && chmod 0755 /opt/cni/bin/flannel"],
                input=data)


# The bug report's event (kubectl describe po), as kubelet words it
MISSING_FLANNEL_EVENT = re.compile(
    r'Failed to create pod sandbox: .*failed to setup network for sandbox "[0-9a-f]+": '
    r'plugin type="flannel" failed \(add\): failed to find plugin "flannel" in path '
    r'\[/opt/cni/bin\]')

# The bug report's cluster: the reactive kubernetes-worker of 2020, etcd
# serving its v2 API (flannel v0.11's), Kubernetes on the workers
OLD_CHARM_CLUSTER = {"worker_generation": "reactive", "control_plane": True,
                     "kubernetes": True, "etcd_v2": True}


def deploy_old_charm(cluster, workdir: Path, say) -> None:
    """charm-flannel at f79f180 (sandbox.old_flannel, its stop hook
    included) related to etcd and the workers, every worker Ready (the
    control plane's kubelet has no CNI: the old charm never related to it)."""
    # sandbox.cluster imports this module
    from sandbox.cluster import CNI_RELATION, ETCD_RELATION, FLANNEL

    k8s = cluster.kubernetes
    old = old_resource(cluster.resource, workdir / "old-resource", "f79f180")
    with cluster.timings.phase("deploy charm-flannel f79f180 (the bug report's)", say):
        cluster.controller.deploy(FLANNEL, old_charm_dir(workdir / "old-charm", "f79f180",
                                                         stop_hook=True),
                                  resources={cluster.resource_name: old})
        cluster.controller.add_relation(*ETCD_RELATION)
        cluster.controller.add_relation(*CNI_RELATION)
        cluster.settle()
        cluster.wait_for_flannel(timeout=120)
        k8s.wait_nodes_ready(cluster.worker_machines(), timeout=120)
        k8s.wait_default_service_account()
