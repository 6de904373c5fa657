"""The Kubernetes API as the charm needs it in subnet-manager=kubernetes
mode, through root's kubeconfig, which the principal writes
(/root/.kube/config: the API server, its CA and the node's credentials, a
token from kube-control on the ops worker; client certificates are taken
too): the Nodes with their addresses, pod CIDRs and annotations, and what
flanneld wrote taken off this node's Node at removal.

Standard library only (ssl, http.client) and one connection per hook: a
hook that does not run in this mode imports none of it.
"""
from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import urlsplit

from ..facts.kube_nodes import FLANNELD_CONDITION_REASON, KubeUnavailable, Node


@dataclass(frozen=True)
class KubeAccess:
    """What a kubeconfig's current context gives: the server's host and
    port, the CA (PEM) and the user's token or client certificate and key."""
    host: str
    port: int
    ca: Optional[bytes]
    token: Optional[str] = None
    cert: Optional[bytes] = None
    key: Optional[bytes] = None


def read_kubeconfig(text: str) -> KubeAccess:
    """The access a kubeconfig's current context gives; KubeUnavailable
    naming what is missing, never quoting the file (it holds a token)."""
    import yaml
    try:
        config = yaml.safe_load(text) or {}
        context_name = config.get("current-context") or config["contexts"][0]["name"]
        context = _section(_named(config.get("contexts"), context_name), "context")
        cluster = _section(_named(config.get("clusters"), context["cluster"]), "cluster")
        user = _section(_named(config.get("users"), context["user"]), "user", empty=True)
    except yaml.YAMLError as error:
        raise KubeUnavailable(f"the kubeconfig cannot be read (not YAML{_where(error)})") \
            from None
    except (AttributeError, KeyError, IndexError, TypeError) as error:
        raise KubeUnavailable(f"the kubeconfig cannot be read (no {_missing(error)})") from None
    try:
        server = urlsplit(str(cluster.get("server") or ""))
        host, port = server.hostname, server.port or 443
    except ValueError:   # a port that is not a number
        host = None
    if server.scheme != "https" or not host:
        raise KubeUnavailable(f"the kubeconfig's server {cluster.get('server')!r} is not "
                              "an https address")
    try:
        token = user.get("token")
        access = KubeAccess(host=host, port=port, ca=_data(cluster, "certificate-authority"),
                            token=str(token) if token else None,
                            cert=_data(user, "client-certificate"),
                            key=_data(user, "client-key"))
    except OSError as error:   # a file it names
        raise KubeUnavailable("the kubeconfig's certificates cannot be read "
                              f"({error.strerror}: {error.filename})") from None
    except (ValueError, TypeError):   # data that is not base64
        raise KubeUnavailable("the kubeconfig's certificates cannot be read (data that is "
                              "not base64)") from None
    if not access.token and not (access.cert and access.key):
        raise KubeUnavailable("the kubeconfig gives neither a token nor a client certificate")
    return access


def _section(item: dict, key: str, empty: bool = False) -> dict:
    """A named entry's mapping (`cluster:`, `user:`, `context:`)."""
    value = item[key]
    if value is None and empty:
        return {}
    if not isinstance(value, dict):
        raise KeyError(f"{key} mapping in {item.get('name')!r}")
    return value


def _where(error) -> str:
    """Where YAML broke, without the text it quotes."""
    mark = getattr(error, "problem_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def _missing(error: Exception) -> str:
    if isinstance(error, KeyError):
        return str(error.args[0]) if error.args else "entry"
    return "contexts, clusters or users as kubectl writes them"


def _named(items, name: str) -> dict:
    for item in items or ():
        if item.get("name") == name:
            return item
    raise KeyError(name)


def _data(section: dict, what: str) -> Optional[bytes]:
    """`<what>-data` (base64) or the file `<what>` names."""
    if section.get(f"{what}-data"):
        return base64.b64decode(section[f"{what}-data"])
    if section.get(what):
        with open(section[what], "rb") as f:
            return f.read()
    return None


class KubeApi:
    """One connection to the API server, as the kubeconfig's user."""

    def __init__(self, access: KubeAccess, timeout: float = 5.0):
        self.access = access
        try:
            context = ssl.create_default_context(
                cadata=access.ca.decode(errors="replace") if access.ca else None)
            if access.cert and access.key:
                _load_client_pair(context, access.cert, access.key)
        except (OSError, ValueError) as error:   # (ssl.SSLError is an OSError)
            raise KubeUnavailable("the kubeconfig's CA or client certificate cannot be "
                                  f"loaded ({error})") from None
        self._connection = http.client.HTTPSConnection(access.host, access.port,
                                                       context=context, timeout=timeout)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> "KubeApi":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _request(self, method: str, path: str, body: Optional[dict] = None,
                 content_type: str = "application/json") -> Any:
        headers = {"Accept": "application/json"}
        if self.access.token:
            headers["Authorization"] = f"Bearer {self.access.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        try:
            self._connection.request(method, path, body=data, headers=headers)
            response = self._connection.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException) as error:
            self._connection.close()
            raise KubeUnavailable(f"the API server at {self.access.host}:{self.access.port} "
                                  f"did not answer ({error})") from None
        if response.status == 404:
            return None
        if response.status >= 300:
            raise KubeUnavailable(f"the API server refused {method} {path}: {response.status} "
                                  f"{_reason(payload)}", status=response.status)
        try:
            return json.loads(payload) if payload else None
        except ValueError:
            raise KubeUnavailable(f"the API server answered {method} {path} with no "
                                  "JSON") from None

    def nodes(self) -> list[Node]:
        listed = self._request("GET", "/api/v1/nodes") or {}
        return [Node.from_api(item) for item in listed.get("items") or ()]

    def forget_flanneld(self, name: str) -> list[str]:
        """Take what flanneld wrote off a Node, through its status as
        flanneld writes it: its annotations, and the NetworkUnavailable
        condition it set (reason FlannelIsUp). Returns what went."""
        node = self._request("GET", f"/api/v1/nodes/{name}")
        if node is None:
            return []
        keys = Node.from_api(node).flanneld_annotations
        conditions = [c for c in (node.get("status") or {}).get("conditions") or ()
                      if c.get("type") == "NetworkUnavailable"
                      and c.get("reason") == FLANNELD_CONDITION_REASON]
        if not keys and not conditions:
            return []
        patch: dict = {"metadata": {"annotations": {key: None for key in keys}}}
        if conditions:
            patch["status"] = {"conditions": [{"type": "NetworkUnavailable",
                                               "$patch": "delete"}]}
        self._request("PATCH", f"/api/v1/nodes/{name}/status", patch,
                      content_type="application/strategic-merge-patch+json")
        return keys + (["NetworkUnavailable condition"] if conditions else [])


def _load_client_pair(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl loads a client certificate from files only: a private temporary
    directory holds them for the moment it reads them."""
    with tempfile.TemporaryDirectory(prefix="flannel-kube-") as directory:
        os.chmod(directory, 0o700)
        paths = []
        for name, data in (("cert.pem", cert), ("key.pem", key)):
            path = os.path.join(directory, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            paths.append(path)
        context.load_cert_chain(*paths)


def _reason(payload: bytes) -> str:
    try:
        return str(json.loads(payload).get("message") or "")
    except (ValueError, AttributeError):
        return payload[:200].decode(errors="replace")
