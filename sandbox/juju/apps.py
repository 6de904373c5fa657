"""Emulated applications: small Python objects the controller drives like
charms, answering relation events the way the real charms do.

An emulated application is any object with
    name: str                       application name
    endpoints: {name: {"interface", "role": "provides"|"requires"|"peers",
                       "scope": "global"|"container"}}
    dispatch(ctx: HookContext)      runs one hook (raise = hook failure)
and optionally subordinate (False), charm_name, version, address (for units
placed on no machine), config_defaults, attach(controller).

EmulatedApp gives dispatch() that calls on_<hook_name> (dashes to
underscores, e.g. on_install, on_db_relation_joined, falling back to
on_relation_joined(ctx) for any endpoint) and records every event in
self.events as (unit, hook, remote_unit).  A test passes its own subclass:

    class Principal(EmulatedApp):
        endpoints = {"cni": {"interface": "kubernetes-cni", "role": "provides",
                             "scope": "container"}}
        def on_cni_relation_changed(self, ctx):
            ctx.relation_set(**{"kubeconfig-hash": "abc"})

    ctl.deploy(Principal("kubernetes-worker"), to=[m0])
"""

from __future__ import annotations

import time

from . import model as _model
from .cni_plugins import (DEBIAN_PLUGINS, build_cni_plugins_resource, extract_plugins,
                          link_default_conf, resource_path)
from .model import Model, ModelError


class HookContext:
    """What an emulated hook can see and do.  Relation writes are buffered
    in the hook's context and committed when the hook returns (discarded if
    it raises), exactly like relation-set from a charm."""

    def __init__(self, controller, unit: str, hook: str, context_id: str, entry: dict):
        self.controller = controller
        self.unit = unit
        self.app = unit.split("/")[0]
        self.hook = hook
        self.context_id = context_id
        self.relation_id = entry.get("relation")
        self.remote_unit = entry.get("remote_unit")
        self.remote_app = entry.get("remote_app")
        self.departing_unit = entry.get("departing")
        self.endpoint = None
        self.kind = None
        if "-relation-" in hook:
            self.endpoint, self.kind = hook.rsplit("-relation-", 1)

    def __repr__(self):
        return (f"HookContext({self.unit} {self.hook} rel={self.relation_id} "
                f"remote={self.remote_unit})")

    # -- model access ------------------------------------------------------------
    def model(self) -> Model:
        return self.controller.model()

    @property
    def executor(self):
        return self.controller.executor_for(self.unit)

    def run(self, argv, check=True, **kwargs):
        """Run a command on the unit's machine."""
        ex = self.executor
        if ex is None:
            raise ModelError(f"unit {self.unit} is on no machine")
        cp = ex.run(argv, **kwargs)
        if check and cp.returncode != 0:
            raise RuntimeError(f"{argv} failed ({cp.returncode}): "
                               f"{(cp.stderr or b'').decode('utf-8', 'replace')[-2000:]}")
        return cp

    def hook_env(self, charm_dir: str | None = None) -> dict:
        """The environment the unit agent gives a charm's hook, for an
        emulated application that runs real charm code in this process
        (hook tools from the model's staging dir on PATH)."""
        m = self.model()
        rec = dict(m.unit(self.unit))
        if charm_dir is not None:
            rec["charm-dir"] = str(charm_dir)
        rel_env = {}
        if self.relation_id is not None:
            rel_env = {"JUJU_RELATION": self.endpoint,
                       "JUJU_RELATION_ID": f"{self.endpoint}:{self.relation_id}",
                       "JUJU_REMOTE_UNIT": self.remote_unit or "",
                       "JUJU_REMOTE_APP": self.remote_app or "",
                       "JUJU_DEPARTING_UNIT": self.departing_unit or ""}
        machine = m.data["machines"].get(str(rec.get("machine")))
        return self.controller.agent.hook_env({"model": m.data["model"]}, rec, self.hook,
                                              self.context_id, rel_env, machine)

    def is_leader(self) -> bool:
        return self.model().app(self.app).get("leader") == self.unit

    def config(self) -> dict:
        return self.model().config(self.app)

    def address(self) -> str | None:
        return self.model().unit_address(self.unit)

    def log(self, message: str, level: str = "INFO") -> None:
        path = self.model().unit(self.unit).get("log-file")
        if path:
            with open(path, "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {level} "
                        f"unit.{self.unit}.juju-log {message}\n")

    def status_set(self, status: str, message: str = "") -> None:
        if status not in _model.WORKLOAD_SETTABLE:
            raise ModelError(f'invalid status "{status}"')
        with self.controller.state.transaction() as data:
            Model(data).unit(self.unit)["workload"] = {
                "status": status, "message": message, "set-by-charm": True,
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def application_version_set(self, version: str) -> None:
        with self.controller.state.transaction() as data:
            data["contexts"][self.context_id]["app-version"] = version

    # -- relations -------------------------------------------------------------------
    def _rid(self, rid) -> int:
        if rid is None:
            if self.relation_id is None:
                raise ModelError("no relation id specified")
            return int(self.relation_id)
        return _model.parse_relation_id(str(rid))

    def relation_ids(self, endpoint: str | None = None) -> list[int]:
        m = self.model()
        context = m.data["contexts"].get(self.context_id)
        return [r["id"] for r in _model.hook_relations(m, self.unit, endpoint or self.endpoint,
                                                       context)]

    def relation_units(self, rid=None) -> list[str]:
        m = self.model()
        return m.members(m.relation(self._rid(rid)), self.unit)

    def relation_get(self, unit: str | None = None, rid=None, app: str | None = None) -> dict:
        """A unit's databag (default: the remote unit of this hook), or an
        application's with app=NAME; own data includes this hook's writes."""
        m = self.model()
        rel = m.relation(self._rid(rid))
        pending = m.data["contexts"].get(self.context_id, {}).get("writes", {}).get(
            str(rel["id"]), {"unit": {}, "app": {}})
        if app is not None:
            data = dict(rel["app-data"].get(app, {}))
            if app == self.app:
                _merge(data, pending.get("app", {}))
            return data
        unit = unit or self.remote_unit
        if unit is None:
            raise ModelError("no unit specified")
        data = dict(rel["unit-data"].get(unit, {}))
        if unit == self.unit:
            _merge(data, pending.get("unit", {}))
        return data

    def relation_set(self, rid=None, app: bool = False, values: dict | None = None, **kw) -> None:
        changes = dict(values or {})
        changes.update(kw)
        rid = self._rid(rid)
        with self.controller.state.transaction() as data:
            m = Model(data)
            rel = m.relation(rid)
            if not m.participates(rel, self.unit):
                raise ModelError(f"unit {self.unit} is not in relation {rid}")
            if app and m.app(self.app).get("leader") != self.unit:
                raise ModelError("cannot write relation settings: not the leader")
            bag = data["contexts"][self.context_id].setdefault("writes", {}).setdefault(
                str(rid), {"unit": {}, "app": {}})["app" if app else "unit"]
            for k, v in changes.items():
                bag[k] = None if v is None or v == "" else str(v)


def _merge(data: dict, changes: dict) -> None:
    for k, v in changes.items():
        if v is None:
            data.pop(k, None)
        else:
            data[k] = v


class EmulatedApp:
    """Base class: dispatch to on_<hook> methods, record events."""

    endpoints: dict = {}
    subordinate = False
    charm_name = None
    version = ""
    address = None
    config_defaults: dict = {}

    def __init__(self, name: str | None = None):
        if name is not None:
            self.name = name
        elif not getattr(self, "name", None):
            self.name = type(self).__name__.lower()
        if self.charm_name is None:
            self.charm_name = self.name
        self.events: list[tuple[str, str, str | None]] = []
        self.controller = None

    def attach(self, controller) -> None:
        self.controller = controller

    def dispatch(self, ctx: HookContext) -> None:
        self.events.append((ctx.unit, ctx.hook, ctx.remote_unit))
        method = getattr(self, "on_" + ctx.hook.replace("-", "_"), None)
        if method is None and ctx.kind is not None:
            method = getattr(self, f"on_relation_{ctx.kind}", None)
        if method is not None:
            method(ctx)

    def fire(self, hook: str = "config-changed") -> None:
        """Queue a non-relation hook on every unit (e.g. after changing what
        the app publishes); run it with controller.settle()."""
        for u in self.controller.units(self.name):
            self.controller.fire(u, hook)


class EtcdApp(EmulatedApp):
    """The etcd charm's `db` endpoint (interface etcd, provides), as the etcd
    charm behaves: once it is ready (its certificates placed) it publishes
    connection_string, version, client_ca, client_cert and client_key on its
    unit databag in every db relation, all five in one hook; before that it
    publishes nothing (never a key with an empty value)."""

    charm_name = "etcd"
    endpoints = {"db": {"interface": "etcd", "role": "provides", "scope": "global"}}

    def __init__(self, connection_string: str = "", *, version: str = "", client_ca: str = "",
                 client_cert: str = "", client_key: str = "", name: str = "etcd",
                 address: str | None = None, ready: bool = True):
        super().__init__(name)
        self.connection_string = connection_string
        self.etcd_version = version
        self.version = version
        self.client_ca = client_ca
        self.client_cert = client_cert
        self.client_key = client_key
        self.address = address
        self.ready = ready

    @classmethod
    def from_server(cls, server, *, name: str = "etcd", client_cert=None, client_key=None,
                    ready: bool = True):
        """From a running sandbox.etcd.EtcdServer or EtcdCluster (its
        connection string, version and PKI); client_cert/client_key override
        the PKI's client pair."""
        pki = server.pki

        def text(p):
            with open(p, encoding="utf-8") as f:
                return f.read()

        return cls(server.connection_string, version=server.version, client_ca=text(pki.ca_cert),
                   client_cert=text(client_cert or pki.client_cert),
                   client_key=text(client_key or pki.client_key), name=name,
                   address=server.host, ready=ready)

    def data(self) -> dict:
        """What a db relation gets now: all five keys, or nothing yet."""
        d = {"connection_string": self.connection_string, "version": self.etcd_version,
             "client_ca": self.client_ca, "client_cert": self.client_cert,
             "client_key": self.client_key}
        if not self.ready or not all(d.values()):
            return {}
        return d

    def update(self, **changes) -> None:
        """Change what is published (connection_string=..., version=...,
        client_cert=..., ready=True ...) and queue config-changed on the
        etcd units, which republishes."""
        for k, v in changes.items():
            if k == "version":
                k = "etcd_version"
            if not hasattr(self, k):
                raise AttributeError(k)
            setattr(self, k, v)
        self.fire("config-changed")

    def _publish_all(self, ctx):
        for rid in ctx.relation_ids("db"):
            ctx.relation_set(rid=rid, **self.data())

    def on_install(self, ctx):
        ctx.status_set("maintenance", "Installing etcd.")

    def on_start(self, ctx):
        self._assess(ctx)
        if self.etcd_version:
            ctx.application_version_set(self.etcd_version)

    def on_config_changed(self, ctx):
        self._assess(ctx)
        self._publish_all(ctx)

    def on_db_relation_joined(self, ctx):
        ctx.relation_set(**self.data())

    def on_db_relation_changed(self, ctx):
        ctx.relation_set(**self.data())

    def _assess(self, ctx):
        if self.data():
            ctx.status_set("active", "Healthy with 1 known peer")
        else:
            ctx.status_set("waiting", "Waiting for certificates.")


class NrpeApp(EmulatedApp):
    """The nrpe subordinate: on a principal through juju-info (container),
    and related to other subordinates' nrpe-external-master; publishes
    nagios_hostname (<nagios_context>-<principal unit>, e.g.
    juju-kubernetes-worker-0) and nagios_host_context (its nagios_context
    option) on nrpe-external-master, as the nrpe charm does."""

    charm_name = "nrpe"
    subordinate = True
    endpoints = {
        "general-info": {"interface": "juju-info", "role": "requires", "scope": "container"},
        "nrpe-external-master": {"interface": "nrpe-external-master", "role": "requires",
                                 "scope": "container"},
    }
    config_defaults = {"nagios_context": "juju"}

    def __init__(self, name: str = "nrpe"):
        super().__init__(name)

    def published(self, ctx) -> dict:
        m = ctx.model()
        principal = m.unit(ctx.unit).get("principal") or ctx.unit
        context = ctx.config().get("nagios_context") or "juju"
        return {"nagios_hostname": f"{context}-{principal.replace('/', '-')}",
                "nagios_host_context": context}

    def on_nrpe_external_master_relation_joined(self, ctx):
        ctx.relation_set(**self.published(ctx))

    def on_nrpe_external_master_relation_changed(self, ctx):
        ctx.relation_set(**self.published(ctx))


class CosAgentApp(EmulatedApp):
    """The requirer of the cos_agent interface: grafana-agent's or
    opentelemetry-collector's machine charm, a subordinate of the principal
    (juju-info) related to flannel's cos-agent endpoint. Each unit reads
    what flannel's unit publishes (`config`) in its -changed hooks, as the
    charms' library does, and publishes on its own databag what
    `receivers` says (the collector's OTLP endpoints; a change runs
    flannel's cos-agent-relation-changed)."""

    charm_name = "opentelemetry-collector"
    subordinate = True
    endpoints = {
        "juju-info": {"interface": "juju-info", "role": "requires", "scope": "container"},
        "cos-agent": {"interface": "cos_agent", "role": "requires", "scope": "container"},
    }

    def __init__(self, name: str = "opentelemetry-collector"):
        super().__init__(name)
        self.received: dict[str, str] = {}   # unit -> the `config` flannel's unit published
        self.receivers = ""

    def on_cos_agent_relation_joined(self, ctx):
        self._exchange(ctx)

    def on_cos_agent_relation_changed(self, ctx):
        self._exchange(ctx)

    def on_config_changed(self, ctx):
        for rid in ctx.relation_ids("cos-agent"):
            ctx.relation_set(rid=rid, receivers=self.receivers)

    def _exchange(self, ctx):
        if ctx.remote_unit:
            config = ctx.relation_get(ctx.remote_unit).get("config")
            if config:
                self.received[ctx.unit] = config
        if self.receivers:
            ctx.relation_set(receivers=self.receivers)


CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
# The link the reactive kubernetes-worker of 2020 made to its default CNI's
# conf file (236fd67).
DEFAULT_CONF_STEM = "05-default"
KUBECONFIG_PATH = "/root/cdk/kubeconfig"


class KubernetesWorkerApp(EmulatedApp):
    """kubernetes-worker as the reactive charm of 2020 (charm-kubernetes-worker
    around a23db7e, the worker of LP #1866869), as far as the CNI is
    concerned (docs/explanation/etcd-v2-clusters.md):

    - Its `cni-plugins` resource (containernetworking plugins v0.7.5:
      bridge, host-local, loopback, portmap, ... and **flannel**; here
      Debian's plugins and `flannel`, the bytes given) is extracted into
      /opt/cni/bin with `tar xfz` as root, so the archive's owners are kept,
      by the first hook that finds the container runtime ready
      (`container_runtime_ready`; a test clears it to have flannel install
      first, then sets it and fires a hook), and never again until the
      worker's own upgrade-charm clears its flag
      (kubernetes-worker.cni-plugins.installed).
    - On `cni` (interface kubernetes-cni, container scope) it publishes
      `is_master=False` and `kubeconfig_path` (plus `extra_data`), and reads
      the subordinate's `cidr` and `cni-conf-file`: cni_configured(unit) is
      true once both are there.
    - start_worker's configure_default_cni: once the CNI published its
      cni-conf-file, every /etc/cni/net.d/05-default.* goes and
      05-default.<ext> becomes a relative symlink to it. Nothing removes the
      link when the CNI goes: it dangles."""

    charm_name = "kubernetes-worker"
    endpoints = {"cni": {"interface": "kubernetes-cni", "role": "provides", "scope": "container"}}

    def __init__(self, name: str = "kubernetes-worker", *, plugin_dir: str = DEBIAN_PLUGINS,
                 plugins=CNI_PLUGINS, flannel: bytes | None = None,
                 extra_data: dict | None = None):
        super().__init__(name)
        self.plugin_dir = plugin_dir
        self.plugins = tuple(plugins) + (("flannel",) if flannel is not None else ())
        self.flannel = flannel
        self.extra_data = dict(extra_data or {})
        self.resource: str | None = None
        self.container_runtime_ready = True
        self.installed_plugins: dict[str, list[str]] = {}   # unit -> extracted (the flag)
        self.extractions: list[tuple[str, str]] = []        # (unit, hook) that extracted
        self.cni_data: dict[str, dict] = {}   # unit -> subordinate's latest cni data
        # sandbox.kubernetes.Kubernetes when the cluster runs Kubernetes itself:
        # start_worker then configures and starts kubelet and kube-proxy
        self.kubernetes = None

    def attach(self, controller) -> None:
        super().attach(controller)
        self.resource = build_cni_plugins_resource(
            self.plugin_dir, [p for p in self.plugins if p != "flannel"],
            resource_path(controller, self.name),
            extra={"flannel": self.flannel} if self.flannel is not None else None)

    def published(self) -> dict:
        d = {"is_master": "False", "kubeconfig_path": KUBECONFIG_PATH}
        d.update(self.extra_data)
        return d

    def cni_configured(self, unit: str | None = None) -> bool:
        units = [unit] if unit else list(self.cni_data)
        return bool(units) and all(
            self.cni_data.get(u, {}).get("cidr") and self.cni_data.get(u, {}).get("cni-conf-file")
            for u in units)

    def dispatch(self, ctx: HookContext) -> None:
        if ctx.hook == "upgrade-charm":
            self.installed_plugins.pop(ctx.unit, None)
        super().dispatch(ctx)
        # reactive: the handler runs in whichever hook first finds its flags
        if self.container_runtime_ready and ctx.unit not in self.installed_plugins:
            self.install_cni_plugins(ctx)

    def install_cni_plugins(self, ctx: HookContext) -> None:
        extract_plugins(ctx, self.resource, same_owner=True)
        self.installed_plugins[ctx.unit] = list(self.plugins)
        self.extractions.append((ctx.unit, ctx.hook))

    def on_install(self, ctx):
        ctx.status_set("maintenance", "Installing kubernetes-worker.")

    def on_start(self, ctx):
        self._assess(ctx)

    def on_cni_relation_joined(self, ctx):
        ctx.relation_set(**self.published())

    def on_cni_relation_created(self, ctx):
        ctx.relation_set(**self.published())

    def on_cni_relation_changed(self, ctx):
        if ctx.remote_unit:
            data = ctx.relation_get(ctx.remote_unit)
            self.cni_data[ctx.unit] = {k: data.get(k) for k in ("cidr", "cni-conf-file")}
        self._assess(ctx)

    def on_cni_relation_departed(self, ctx):
        self.cni_data.pop(ctx.unit, None)

    def on_cni_relation_broken(self, ctx):
        self.cni_data.pop(ctx.unit, None)
        self._assess(ctx)

    def _assess(self, ctx):
        if self.cni_configured(ctx.unit):
            # start_worker's configure_default_cni
            link_default_conf(ctx, DEFAULT_CONF_STEM, self.cni_data[ctx.unit]["cni-conf-file"])
            if self.kubernetes is not None:   # start_worker: kubelet and kube-proxy
                self.kubernetes.configure_node(ctx, self.cni_data[ctx.unit]["cidr"])
            ctx.status_set("active", "Kubernetes worker running.")
        else:
            ctx.status_set("waiting", "Waiting for cni to be configured.")
