"""The ops principals, as their own source behaves (charmed-kubernetes'
charm-kubernetes-worker and charm-kubernetes-control-plane, ops charms).

Both run one reconcile function on every hook (charms.reconciler): on
update-status only when the last reconcile did not finish.  A reconcile goes
step by step and stops at the first step that is not ready, whose blocked or
waiting status the unit then shows; a reconcile that finishes leaves the unit
active "Ready".  The first step, before anything else, extracts the
`cni-plugins` resource (containernetworking plugins v1.x: bridge, host-local,
loopback, portmap, bandwidth, firewall, tuning, vrf, ...; no flannel) into
the machine's /opt/cni/bin with `tar xfz RESOURCE -C /opt/cni/bin
--no-same-owner`: in nearly every hook the plugins are written again.

On `cni` (interface kubernetes-cni, container scope) they read `cidr` and
`cni-conf-file` from the alphabetically first CNI application related (or
the `default-cni` option), and publish on every cni relation, once the steps
before it are ready: `image-registry`, `kubeconfig-hash` (sha256 of the
kubeconfig) and, from the control plane, `service-cidr`.

    kubernetes-worker: blocked "Missing CNI Integration" when there is no cni
        relation at all; does not wait for `cidr`.
    kubernetes-control-plane: waits for etcd; symlinks
        /etc/cni/net.d/01-default.<ext> to `cni-conf-file` (after removing any
        01-default.*); blocked "Missing CNI relation or config" until
        `cni-conf-file` arrives, before it touches the link (a link to a CNI
        that went stays, dangling; `ignore-missing-cni` removes it); uses
        `cidr` as the cluster cidr (written to CLUSTER_ARGS).

With `kubernetes` set (a sandbox.kubernetes.Kubernetes), they also run
Kubernetes itself as the real charms do: the control plane configures
kube-apiserver, kube-controller-manager (`--cluster-cidr` only while the cni
relation carries `cidr`) and kube-scheduler before its CNI step, kubelet and
kube-proxy after it; a worker configures kubelet and kube-proxy after its
CNI step (not with no cni relation: it stops at "Missing CNI Integration").
Nothing stops them when the relation goes.  The real charms restart every
service on every reconcile; here a service restarts when what it runs
changed.  The control plane's `controller-manager-extra-args` ("k=v flag",
space-separated) reach kube-controller-manager as `--k=v --flag`, over the
charm's own arguments (`allocate-node-cidrs=true` for flanneld on the
Kubernetes API).

What Charmed Kubernetes has beside them (certificates, kube-control,
container runtime) is taken as ready; tests make a step not ready with
`ca_ready = False` / `kube_control_ready = False` and fire a hook.  Root's
kubeconfig (/root/.kube/config, each machine's own) names the API server;
while Kubernetes runs it holds the CA and the cluster admin's credentials
as data (the real charms: the admin's token from the control plane, on
workers too): what CNI charms read to reach the API.
"""

from __future__ import annotations

import hashlib

from .apps import EmulatedApp, HookContext
from .cni_plugins import (DEBIAN_PLUGINS, build_cni_plugins_resource, extract_plugins,
                          link_default_conf, plugin_set, resource_path)

DEFAULT_CONF_STEM = "01-default"
# root's kubeconfig (ROOT_KUBECONFIG_PATH of both charms)
KUBECONFIG = "/root/.kube/config"
# The control plane's kube-controller-manager arguments that come from the CNI.
CLUSTER_ARGS = "/etc/kubernetes/kube-controller-manager.args"
IMAGE_REGISTRY = "rocks.canonical.com:443/cdk"
SERVICE_CIDR = "10.152.183.0/24"
# the control plane's kubelet registers with it (its register-with-taints default)
CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane:NoSchedule"


class NotReady(Exception):
    """A reconcile step is not ready: the unit shows `status` and the
    reconcile stops there (contextual_status.on_error + ReconcilerError)."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class OpsPrincipal(EmulatedApp):
    """What the ops worker and control plane share: the reconcile loop, the
    plugin extraction and the cni provides side."""

    endpoints = {"cni": {"interface": "kubernetes-cni", "role": "provides",
                         "scope": "container"}}

    def __init__(self, name: str, *, plugin_dir: str = DEBIAN_PLUGINS, plugins=None):
        super().__init__(name)
        self.plugin_dir = plugin_dir
        self.plugins = tuple(plugins) if plugins is not None else plugin_set(plugin_dir)
        self.resource: str | None = None
        self.ca_ready = True
        self.kube_control_ready = True
        self.reconciled: dict[str, bool] = {}          # unit -> last reconcile finished
        # sandbox.kubernetes.Kubernetes when the cluster runs Kubernetes itself:
        # the reconcile then configures and starts its components
        self.kubernetes = None
        self.extractions: list[tuple[str, str]] = []   # (unit, hook) that extracted

    def attach(self, controller) -> None:
        super().attach(controller)
        self.resource = build_cni_plugins_resource(self.plugin_dir, self.plugins,
                                                   resource_path(controller, self.name))

    # -- the reconciler ------------------------------------------------------------
    def dispatch(self, ctx: HookContext) -> None:
        self.events.append((ctx.unit, ctx.hook, ctx.remote_unit))
        if ctx.hook == "update-status" and self.reconciled.get(ctx.unit):
            return
        self.reconciled[ctx.unit] = False
        try:
            self.reconcile(ctx)
        except NotReady as step:
            ctx.log(f"reconcile stopped: {step.message}")
            ctx.status_set(step.status, step.message)
            return
        self.reconciled[ctx.unit] = True
        ctx.status_set("active", "Ready")

    def reconcile(self, ctx: HookContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- steps both share ------------------------------------------------------------
    def install_cni_binaries(self, ctx: HookContext) -> None:
        extract_plugins(ctx, self.resource, same_owner=False)
        self.extractions.append((ctx.unit, ctx.hook))

    def require_certificates(self) -> None:
        if not self.ca_ready:
            raise NotReady("waiting", "Waiting for certificate authority")

    def write_kubeconfig(self, ctx: HookContext, server: str) -> None:
        if self.kubernetes is not None and self.kubernetes.api_address is not None:
            text = self.kubernetes.root_kubeconfig()
        else:
            text = (f"apiVersion: v1\nkind: Config\nclusters:\n- name: juju-cluster\n"
                    f"  cluster: {{server: '{server}'}}\nusers:\n- name: {ctx.unit}\n")
        self._write(ctx, KUBECONFIG, text.encode(), mode=0o600)

    def kubeconfig_hash(self, ctx: HookContext) -> str:
        """sha256 of the kubeconfig, "" while there is none (hash_file)."""
        data = self._read(ctx, KUBECONFIG)
        return hashlib.sha256(data).hexdigest() if data is not None else ""

    def cni_relations(self, ctx: HookContext) -> list[int]:
        # ops leaves a relation out of Model.relations in its own
        # relation-broken hook, whatever relation-ids says.
        rids = ctx.relation_ids("cni")
        if ctx.kind == "broken" and ctx.endpoint == "cni":
            rids = [r for r in rids if r != int(ctx.relation_id)]
        return rids

    def default_cni_relation(self, ctx: HookContext, default_cni: str = "") -> int | None:
        m = ctx.model()
        by_app = sorted((m.remote_endpoint(m.relation(rid), self.name)["app"], rid)
                        for rid in self.cni_relations(ctx))
        if default_cni:
            by_app = [(app, rid) for app, rid in by_app if app == default_cni]
        return by_app[0][1] if by_app else None

    def cni_value(self, ctx: HookContext, key: str, default_cni: str = "") -> str | None:
        """`cidr` or `cni-conf-file` from the default CNI's units (the first
        that has it), None without one."""
        rid = self.default_cni_relation(ctx, default_cni)
        if rid is None:
            return None
        for unit in ctx.relation_units(rid):
            value = ctx.relation_get(unit=unit, rid=rid).get(key)
            if value:
                return value
        return None

    def publish(self, ctx: HookContext, values: dict) -> None:
        for rid in self.cni_relations(ctx):
            ctx.relation_set(rid=rid, **values)

    def set_default_cni_conf_file(self, ctx: HookContext, conf_file: str | None) -> None:
        """kubernetes_snaps.set_default_cni_conf_file: every 01-default.*
        goes; with a conf file, 01-default.<ext> links to it."""
        link_default_conf(ctx, DEFAULT_CONF_STEM, conf_file)

    # -- files on the unit's machine ----------------------------------------------------
    def _write(self, ctx: HookContext, path: str, data: bytes, mode: int = 0o644) -> None:
        target = ctx.executor.machine_path(path)
        ctx.run(["/bin/sh", "-c", 'mkdir -p "${1%/*}" && cat > "$1" && chmod "$2" "$1"',
                 "sh", target, f"{mode:o}"], input=data)

    def _read(self, ctx: HookContext, path: str) -> bytes | None:
        cp = ctx.run(["cat", ctx.executor.machine_path(path)], check=False)
        return cp.stdout if cp.returncode == 0 else None


def extra_args(text: str) -> dict[str, str]:
    """The charms' *-extra-args: "k=v flag" -> {"k": "v", "flag": "true"}
    (kubernetes_snaps.configure_kubernetes_service)."""
    args = {}
    for word in text.split():
        key, _, value = word.partition("=")
        args[key.lstrip("-")] = value if _ else "true"
    return args


def proxy_extra_config(ctx: HookContext) -> dict:
    """The principal's proxy-extra-config, a YAML mapping (both charms have
    the option: charmcraft.yaml, src/charm.py _configure_kubeproxy)."""
    import yaml
    return yaml.safe_load(ctx.config().get("proxy-extra-config") or "{}") or {}


class OpsKubernetesWorkerApp(OpsPrincipal):
    """kubernetes-worker as an ops charm (2023 on): reconcile = extract the
    plugins, certificates, kubeconfigs (kube-control), then the CNI step."""

    charm_name = "kubernetes-worker"
    generation = "ops"
    # (the charm's proxy-extra-config: YAML merged into kube-proxy's
    # KubeProxyConfiguration, e.g. "{mode: nftables}")
    config_defaults = {"proxy-extra-config": "{}"}

    def __init__(self, name: str = "kubernetes-worker", *, image_registry: str = IMAGE_REGISTRY,
                 api_server: str = "https://10.152.183.1:443", **kw):
        super().__init__(name, **kw)
        self.image_registry = image_registry   # what kube-control passes on
        self.api_server = api_server

    def reconcile(self, ctx: HookContext) -> None:
        self.install_cni_binaries(ctx)
        self.require_certificates()
        if not self.kube_control_ready:
            raise NotReady("waiting", "Waiting for kube-control relation")
        self.write_kubeconfig(ctx, self.api_server)
        if self.default_cni_relation(ctx) is None:
            raise NotReady("blocked", "Missing CNI Integration")
        self.publish(ctx, {"image-registry": self.image_registry,
                           "kubeconfig-hash": self.kubeconfig_hash(ctx)})
        # kube-control's default-cni is "" unless set on the control plane:
        # the worker then only clears 01-default.*.
        self.set_default_cni_conf_file(ctx, None)
        if self.kubernetes is not None:
            self.kubernetes.configure_node(ctx, self.cni_value(ctx, "cidr"),
                                           proxy_extra=proxy_extra_config(ctx))


class OpsKubernetesControlPlaneApp(OpsPrincipal):
    """kubernetes-control-plane as an ops charm: reconcile = extract the
    plugins, etcd, certificates, kubeconfigs, the apiserver/controller-manager
    with the CNI's cidr, then the CNI step."""

    charm_name = "kubernetes-control-plane"
    generation = "ops"
    endpoints = {
        "cni": {"interface": "kubernetes-cni", "role": "provides", "scope": "container"},
        "etcd": {"interface": "etcd", "role": "requires", "scope": "global"},
    }
    config_defaults = {"image-registry": IMAGE_REGISTRY, "service-cidr": SERVICE_CIDR,
                       "default-cni": "", "ignore-missing-cni": False,
                       "proxy-extra-config": "{}", "controller-manager-extra-args": ""}

    def __init__(self, name: str = "kubernetes-control-plane", **kw):
        super().__init__(name, **kw)

    def reconcile(self, ctx: HookContext) -> None:
        config = ctx.config()
        self.install_cni_binaries(ctx)
        self.require_etcd(ctx)
        self.require_certificates()
        cidr = self.cni_value(ctx, "cidr", config.get("default-cni") or "")
        if self.kubernetes is not None:
            # --cluster-cidr only while the cni relation carries one
            self.kubernetes.configure_control_plane(
                ctx, cidr, config["service-cidr"],
                extra_args=extra_args(config.get("controller-manager-extra-args") or ""))
        self.write_kubeconfig(ctx, f"https://{ctx.address()}:6443")
        self._write(ctx, CLUSTER_ARGS,
                    f"--cluster-cidr={cidr or ''}\n"
                    f"--service-cluster-ip-range={config['service-cidr']}\n".encode())
        self.publish(ctx, {"image-registry": config["image-registry"],
                           "kubeconfig-hash": self.kubeconfig_hash(ctx),
                           "service-cidr": config["service-cidr"]})
        conf_file = self.cni_value(ctx, "cni-conf-file", config.get("default-cni") or "")
        if not conf_file and not config.get("ignore-missing-cni"):
            # MissingCNIError aborts the reconcile before the link is touched:
            # a 01-default.* made for a CNI that has gone stays, dangling.
            raise NotReady("blocked", "Missing CNI relation or config")
        self.set_default_cni_conf_file(ctx, conf_file)
        if self.kubernetes is not None:
            self.kubernetes.configure_node(ctx, cidr, taints=(CONTROL_PLANE_TAINT,),
                                           proxy_extra=proxy_extra_config(ctx))

    def require_etcd(self, ctx: HookContext) -> None:
        keys = ("connection_string", "client_ca", "client_cert", "client_key")
        for rid in ctx.relation_ids("etcd"):
            if ctx.kind == "broken" and ctx.endpoint == "etcd" and rid == int(ctx.relation_id):
                continue
            for unit in ctx.relation_units(rid):
                data = ctx.relation_get(unit=unit, rid=rid)
                if all(data.get(k) for k in keys):
                    return
        raise NotReady("waiting", "Waiting for etcd")

    def cluster_cidr(self, machine) -> str | None:
        """--cluster-cidr as written on `machine` (a sandbox Machine)."""
        text = (machine.read_file(CLUSTER_ARGS) or b"").decode()
        for line in text.splitlines():
            if line.startswith("--cluster-cidr="):
                return line.split("=", 1)[1] or None
        return None
