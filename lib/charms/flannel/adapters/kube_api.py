"""The Kubernetes API as the charm needs it in subnet-manager=kubernetes
mode, through root's kubeconfig, which the principal writes
(/root/.kube/config: the API server, its CA and the node's credentials, a
token from kube-control on the ops worker; client certificates are taken
too): the Nodes with their addresses, pod CIDRs and annotations, and what
flanneld wrote taken off this node's Node at removal.

The kubeconfig is read as flanneld's client-go reads it
(k8s.io/client-go/tools/clientcmd, v0.34: loader.go, client_config.go,
validation.go), or refused naming the field: what flanneld cannot use, or
what a hook cannot do (an exec or auth-provider plugin), must not look like
an API that is merely away. Standard library only (ssl, http.client) and
one connection per hook: a hook that does not run in this mode imports none
of it.
"""
from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
import tempfile
from typing import Any, NamedTuple, Optional
from urllib.parse import quote, urlsplit

from ..facts.kube_nodes import FLANNELD_CONDITION_REASON, KubeRefused, KubeUnavailable, Node

# what flanneld's ClusterRole grants (flannel's Documentation/kube-flannel.yml),
# and all the charm asks of the API itself
FLANNELD_PERMISSIONS = "get, list and watch on nodes, and patch on nodes/status"


class KubeAccess(NamedTuple):
    """What a kubeconfig's current context gives: the server (host, port,
    and a path its API is served under, "/k8s/clusters/c-xyz" behind a
    proxy), how to check it (a CA, or no check at all, and the name its
    certificate must bear) and the user's token or client certificate."""
    host: str
    port: int
    ca: Optional[bytes]
    token: Optional[str] = None
    cert: Optional[bytes] = None
    key: Optional[bytes] = None
    path_prefix: str = ""
    verify: bool = True                  # False: insecure-skip-tls-verify
    server_name: Optional[str] = None    # tls-server-name

    @property
    def server(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}{self.path_prefix}"


def read_kubeconfig(text: str, directory: str = "/") -> KubeAccess:
    """The access a kubeconfig's current context gives, its relative paths
    taken from `directory` (the kubeconfig's, as client-go's
    ResolveLocalPaths does); KubeRefused naming what cannot work, never
    quoting the file (it holds a token). Raises nothing else."""
    try:
        return _read(text, directory)
    except KubeUnavailable:
        raise
    except Exception as error:   # noqa: BLE001  (whatever YAML holds: a reason, not a traceback)
        raise KubeRefused(f"the kubeconfig cannot be read ({type(error).__name__})") from None


def _read(text: str, directory: str) -> KubeAccess:
    import yaml
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise KubeRefused(f"the kubeconfig cannot be read (not YAML{_where(error)})") from None
    if not isinstance(config, dict):
        raise KubeRefused("the kubeconfig cannot be read (not a kubeconfig: no current-context)")
    # client-go takes no first context: no current-context is "no configuration"
    current = config.get("current-context")
    if not current:
        raise KubeRefused("the kubeconfig has no current-context (flanneld's client-go "
                          "refuses it too)")
    context = _section(_named(config.get("contexts"), str(current), "context"), "context")
    cluster = _section(_named(config.get("clusters"), str(context.get("cluster") or ""),
                              "cluster"), "cluster")
    user = _section(_named(config.get("users"), str(context.get("user") or ""), "user"),
                    "user", empty=True)
    host, port, prefix = _server(cluster.get("server"))
    for unsupported, why in (("proxy-url", "the charm reaches the API server directly"),):
        if cluster.get(unsupported):
            raise KubeRefused(f"the kubeconfig's clusters[].cluster.{unsupported} is not "
                              f"supported ({why})")
    for plugin in ("exec", "auth-provider"):
        if user.get(plugin):
            raise KubeRefused(f"the kubeconfig's users[].user.{plugin} cannot be used: a "
                              "credential plugin cannot run in a hook (and flanneld's "
                              "client-go has no auth-provider); give a token or a client "
                              "certificate")
    for field in ("username", "password", "as", "as-groups", "as-uid", "as-user-extra"):
        if user.get(field):
            raise KubeRefused(f"the kubeconfig's users[].user.{field} is not supported; give "
                              "a token or a client certificate")
    insecure = cluster.get("insecure-skip-tls-verify") is True
    ca = _data(cluster, "certificate-authority", "clusters[].cluster", directory)
    if insecure and ca is not None:
        raise KubeRefused("the kubeconfig sets clusters[].cluster.insecure-skip-tls-verify and "
                          "a certificate-authority: client-go refuses both; drop one")
    token = user.get("token")
    if user.get("tokenFile"):   # read at every request by client-go, and preferred to `token`
        token = _token_file(str(user["tokenFile"]), directory)
    if token and not _header_safe(str(token)):
        # (a YAML block's trailing newline, a pasted quote: Go's HTTP refuses it too)
        raise KubeRefused("the kubeconfig's users[].user.token is not one line of printable "
                          "ASCII")
    cert = _data(user, "client-certificate", "users[].user", directory)
    key = _data(user, "client-key", "users[].user", directory)
    if (cert is None) != (key is None):
        raise KubeRefused("the kubeconfig's users[].user has a client-certificate without "
                          "its client-key, or a key without its certificate")
    if not token and cert is None:
        raise KubeRefused("the kubeconfig gives neither a token nor a client certificate")
    server_name = cluster.get("tls-server-name")
    return KubeAccess(host=host, port=port, ca=ca, token=str(token) if token else None,
                      cert=cert, key=key, path_prefix=prefix, verify=not insecure,
                      server_name=str(server_name) if server_name else None)


def _server(server) -> tuple[str, int, str]:
    """(host, port, path prefix) of an https server URL, as client-go joins
    API paths to it (its path kept, query and fragment dropped)."""
    text = str(server or "")
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port or 443
    except ValueError:   # a port that is not a number, a broken IPv6 literal
        host = parts = None
    if parts is None or parts.scheme != "https" or not host:
        # client-go would send no credentials over anything else
        raise KubeRefused(f"the kubeconfig's clusters[].cluster.server {text!r} is not an "
                          "https address")
    return host, port, parts.path.rstrip("/")


def _header_safe(token: str) -> bool:
    return all(" " < character <= "~" for character in token)


def _token_file(path: str, directory: str) -> str:
    try:
        with open(os.path.join(directory, path), encoding="utf-8", errors="replace") as f:
            token = f.read().strip()
    except OSError as error:
        raise KubeRefused("the kubeconfig's users[].user.tokenFile cannot be read "
                          f"({error.strerror}: {error.filename})") from None
    if not token:
        raise KubeRefused(f"the kubeconfig's users[].user.tokenFile {path} is empty")
    return token


def _section(item: dict, key: str, empty: bool = False) -> dict:
    """A named entry's mapping (`cluster:`, `user:`, `context:`)."""
    value = item.get(key)
    if value is None and empty:
        return {}
    if not isinstance(value, dict):
        raise KubeRefused(f"the kubeconfig's {key} {item.get('name')!r} is not a mapping")
    return value


def _where(error) -> str:
    """Where YAML broke, without the text it quotes."""
    mark = getattr(error, "problem_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def _named(items, name: str, kind: str) -> dict:
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and str(item.get("name")) == name:
            return item
    raise KubeRefused(f"the kubeconfig has no {kind} named {name!r}" if name else
                      f"the kubeconfig's current context names no {kind}")


def _data(section: dict, what: str, where: str, directory: str) -> Optional[bytes]:
    """`<what>-data` (base64) or the file `<what>` names (relative to the
    kubeconfig's directory); both is client-go's validation error."""
    data, path = section.get(f"{what}-data"), section.get(what)
    if data and path:
        raise KubeRefused(f"the kubeconfig gives both {where}.{what} and {what}-data; "
                          "client-go refuses both: keep one")
    if data:
        try:   # (wrapped over lines, as Go's decoder takes it)
            return base64.b64decode("".join(str(data).split()), validate=True)
        except ValueError:
            raise KubeRefused(f"the kubeconfig's {where}.{what}-data is not base64") from None
    if path:
        try:
            with open(os.path.join(directory, str(path)), "rb") as f:
                return f.read()
        except OSError as error:
            raise KubeRefused(f"the kubeconfig's {where}.{what} cannot be read "
                              f"({error.strerror}: {error.filename})") from None
    return None


class _Connection(http.client.HTTPSConnection):
    """HTTPS whose certificate is checked against tls-server-name (and sent
    as SNI) rather than the host connected to, as client-go does."""

    def __init__(self, host: str, port: int, *, context: ssl.SSLContext, timeout: float,
                 server_name: Optional[str]):
        super().__init__(host, port, context=context, timeout=timeout)
        self._server_name = server_name

    def connect(self) -> None:
        if self._server_name is None:
            return super().connect()
        self.sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_name)


class KubeApi:
    """One connection to the API server, as the kubeconfig's user."""

    def __init__(self, access: KubeAccess, timeout: float = 5.0):
        self.access = access
        try:
            if access.verify:
                context = ssl.create_default_context(
                    cadata=access.ca.decode(errors="replace") if access.ca else None)
            else:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if access.cert and access.key:
                _load_client_pair(context, access.cert, access.key)
        except (OSError, ValueError) as error:   # (ssl.SSLError is an OSError)
            raise KubeRefused("the kubeconfig's CA or client certificate cannot be "
                              f"loaded ({error})") from None
        self._connection = _Connection(access.host, access.port, context=context,
                                       timeout=timeout, server_name=access.server_name)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> "KubeApi":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _request(self, method: str, path: str, body: Optional[dict] = None,
                 content_type: str = "application/json", *, absent_ok: bool = False) -> Any:
        """The JSON answer; None for 404 where `absent_ok` (one named object)."""
        headers = {"Accept": "application/json"}
        if self.access.token:
            headers["Authorization"] = f"Bearer {self.access.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        url = self.access.path_prefix + path
        response, payload = self._exchange(method, url, data, headers)
        if response.status == 404 and absent_ok:
            return None
        if response.status in (401, 403):
            raise KubeRefused(_refusal(method, path, response.status, payload),
                              status=response.status)
        if response.status == 404:   # a list that is not there: no Kubernetes API at the URL
            raise KubeRefused(f"the kubeconfig's server https://{self.access.server} serves no "
                              f"Kubernetes API ({method} {url}: 404)", status=404)
        if response.status >= 300:
            raise KubeUnavailable(f"the API server refused {method} {url}: {response.status} "
                                  f"{_reason(payload)}", status=response.status)
        try:
            return json.loads(payload) if payload else None
        except ValueError:
            raise KubeUnavailable(f"the API server answered {method} {url} with no "
                                  "JSON") from None

    def _exchange(self, method: str, url: str, data: Optional[bytes], headers: dict):
        """(the response, its body); KubeRefused for what no retry mends,
        KubeUnavailable for an API server that did not answer."""
        try:
            try:
                self._connection.request(method, url, body=data, headers=headers)
            except ssl.SSLCertVerificationError:   # (a ValueError too)
                raise
            except ValueError:   # (a header http.client refuses: unquoted, it holds the token)
                self._connection.close()
                raise KubeRefused("the kubeconfig's credentials cannot be sent in an HTTP "
                                  "header") from None
            response = self._connection.getresponse()
            return response, response.read()
        except ssl.SSLCertVerificationError as error:   # (an OSError)
            self._connection.close()
            raise KubeRefused(f"the API server at {self.access.server} is not the one the "
                              f"kubeconfig trusts ({error.verify_message})") from None
        except (OSError, http.client.HTTPException, ValueError) as error:
            self._connection.close()
            raise KubeUnavailable(f"the API server at {self.access.server} did not answer "
                                  f"({error})") from None

    def nodes(self) -> list[Node]:
        listed = self._request("GET", "/api/v1/nodes") or {}
        return [Node.from_api(item) for item in listed.get("items") or ()]

    def forget_flanneld(self, name: str) -> list[str]:
        """Take what flanneld wrote off a Node, through its status as
        flanneld writes it: its annotations, and the NetworkUnavailable
        condition it set (reason FlannelIsUp). Returns what went."""
        path = f"/api/v1/nodes/{quote(name, safe='')}"
        node = self._request("GET", path, absent_ok=True)
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
        self._request("PATCH", f"{path}/status", patch,
                      content_type="application/strategic-merge-patch+json", absent_ok=True)
        return keys + (["NetworkUnavailable condition"] if conditions else [])


def _refusal(method: str, path: str, status: int, payload: bytes) -> str:
    """A 401 or 403: the kubeconfig's user, not the network; blocked, naming
    what flanneld needs."""
    if status == 401:
        return ("the Kubernetes API does not accept the kubeconfig's credentials (401 "
                f"Unauthorized: {_reason(payload) or 'expired or revoked?'})")
    return (f"the Kubernetes API refuses the kubeconfig's user {method} {path} (403 Forbidden: "
            f"{_reason(payload)}); flanneld needs {FLANNELD_PERMISSIONS}")


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
