"""kube-apiserver alone on loopback: the Kubernetes API for the tiers that run
the charm's steps and hooks without sandbox machines (no kubelet, no
controller-manager). Nodes are made through the API as kubelet and
kube-controller-manager would leave them (addresses, pod CIDRs), and
annotated as flanneld would.

    with ApiServer(workdir, pki, etcd) as api:    # etcd: a sandbox.etcd.EtcdServer
        api.kubeconfig("admin")                    # system:masters, a client certificate
        api.kubeconfig("nobody")                   # authenticated, no RBAC: 403 on nodes
        api.kubeconfig("token")                    # a bearer token (--token-auth-file)
        api.node("m1", ["172.31.254.11"], ["10.1.1.0/24"])
        api.annotate("m1", {...}); api.delete_node("m1"); api.nodes()

Its certificate names 127.0.0.1 and `kubernetes` (what a kubeconfig's
tls-server-name may ask for). It keeps its objects under an etcd prefix of
its own, so that it shares the tier's etcd with flannel's keys.
"""
from __future__ import annotations

import base64
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Optional

from sandbox.etcd import EtcdServer, free_port
from sandbox.pki import Pki, make_cert, make_signing_key
from sandbox.resource import binary_path, host_arch

START_TIMEOUT = 120.0
SERVICE_CIDR = "10.152.183.0/24"
TOKEN = "flannel-handlers-token"


class ApiServer:
    def __init__(self, workdir: Path, pki: Pki, etcd: EtcdServer):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.pki, self.etcd = pki, etcd
        self.port = free_port()
        self.process: Optional[subprocess.Popen] = None
        self.log = self.dir / "kube-apiserver.log"
        self.certs = {
            "serving": make_cert(self.dir, pki.ca_cert, pki.ca_key, "apiserver", "kube-apiserver",
                                 client=False, server_ips=["127.0.0.1"],
                                 server_names=["kubernetes", "kubernetes.default"]),
            "admin": make_cert(self.dir, pki.ca_cert, pki.ca_key, "admin", "admin",
                               organisation="system:masters"),
            "nobody": make_cert(self.dir, pki.ca_cert, pki.ca_key, "nobody", "nobody"),
        }
        self.sa_key, self.sa_pub = make_signing_key(self.dir, "service-account")
        self.tokens = self.dir / "tokens.csv"
        self.tokens.write_text(f'{TOKEN},token-user,1001,"system:masters"\n')

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        serving_cert, serving_key = self.certs["serving"]
        return [str(binary_path("kube-apiserver", host_arch())),
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}", f"--etcd-servers={self.etcd.endpoint}",
                f"--etcd-prefix=/registry-{uuid.uuid4().hex[:8]}",
                f"--etcd-cafile={self.pki.ca_cert}", f"--etcd-certfile={self.pki.client_cert}",
                f"--etcd-keyfile={self.pki.client_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--client-ca-file={self.pki.ca_cert}", f"--tls-cert-file={serving_cert}",
                f"--tls-private-key-file={serving_key}", f"--token-auth-file={self.tokens}",
                "--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes",
                f"--service-account-key-file={self.sa_pub}",
                f"--service-account-signing-key-file={self.sa_key}",
                # (the `kubernetes` Service has no endpoint on loopback)
                "--endpoint-reconciler-type=none",
                "--disable-admission-plugins=ServiceAccount", "--v=0"]

    def __enter__(self) -> "ApiServer":
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                if self._call("GET", "/readyz", raw=True) == b"ok":
                    return self
            except (OSError, urllib.error.URLError, ssl.SSLError):
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"kube-apiserver did not start: {self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    # --- what a kubeconfig gives -----------------------------------------------------------
    def kubeconfig(self, user: str = "admin", *, server: str = "", cluster: str = "",
                   user_entry: str = "") -> str:
        """A kubeconfig of `user` ("admin", "nobody", "token") for this API
        server, its CA as data; `server`, `cluster` and `user_entry` (YAML
        flow mappings' insides) put in place of what it would say."""
        def data(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()
        if not cluster:
            cluster = (f"server: '{server or self.url}', "
                       f"certificate-authority-data: {data(self.pki.ca_cert)}")
        if not user_entry:
            if user == "token":
                user_entry = f"token: {TOKEN}"
            else:
                cert, key = self.certs[user]
                user_entry = f"client-certificate-data: {data(cert)}, " \
                             f"client-key-data: {data(key)}"
        return (f"clusters: [{{name: k, cluster: {{{cluster}}}}}]\n"
                f"users: [{{name: u, user: {{{user_entry}}}}}]\n"
                "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                "current-context: c\n")

    # --- Nodes, as kubelet and kube-controller-manager leave them ------------------------------
    def node(self, name: str, addresses: list[str], pod_cidrs: list[str] = (),
             annotations: Optional[dict] = None) -> dict:
        """A Node registered with these addresses and pod CIDRs (a Node's pod
        CIDRs are set once, as kube-controller-manager sets them)."""
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "annotations": annotations or {}},
                "spec": {"podCIDRs": list(pod_cidrs), "podCIDR": pod_cidrs[0]}
                if pod_cidrs else {}}
        created = self._call("POST", "/api/v1/nodes", body)
        self._call("PATCH", f"/api/v1/nodes/{name}/status", {"status": {"addresses": [
            {"type": "InternalIP", "address": address} for address in addresses] + [
            {"type": "Hostname", "address": name}]}}, patch=True)
        return created

    def annotate(self, name: str, annotations: dict) -> None:
        """What flanneld does as it starts (None deletes one)."""
        self._call("PATCH", f"/api/v1/nodes/{name}/status",
                   {"metadata": {"annotations": annotations}}, patch=True)

    def delete_node(self, name: str) -> None:
        self._call("DELETE", f"/api/v1/nodes/{name}")

    def nodes(self) -> dict:
        """{name: the Node as the API returns it}."""
        return {item["metadata"]["name"]: item
                for item in self._call("GET", "/api/v1/nodes")["items"]}

    def _call(self, method: str, path: str, body: Optional[dict] = None, *,
              patch: bool = False, raw: bool = False):
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        cert, key = self.certs["admin"]
        context.load_cert_chain(str(cert), str(key))
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = ("application/strategic-merge-patch+json" if patch
                                       else "application/json")
        request = urllib.request.Request(self.url + path, data=data, headers=headers,
                                         method=method)
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            payload = answer.read()
        return payload if raw else json.loads(payload) if payload else None
