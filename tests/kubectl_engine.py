"""kubectl's own JSONPath, run offline: Debian's `kubernetes-client` kubectl against a small
local API server that serves only discovery and the objects a test gives it.

A readiness gate is CDK's KubernetesObjectValue, whose handler runs
`kubectl get -n NS TYPE NAME -o=jsonpath='{PATH}'` and waits for output (aws-cdk-lib
aws-eks-v2/kubectl-handler/get); `get` needs a server for discovery and for the object, and a
field selector as NAME makes it a list, which `kubectl annotate --local` cannot print (it prints
a List item by item). So the server here answers what `get` asks and nothing else: /api, /apis,
each group version's resource list, and GET of an object or a list (a fieldSelector of one
`field=value` pair filters it, as the API server does for the pod fields it selects on).

Debian's binary: the package's /usr/bin/kubectl, or where .ci/run unpacks it when another
package owns that path (`DEBIAN_KUBECTL`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

DEBIAN_KUBECTL = Path("/opt/kubernetes-client/usr/bin/kubectl")

# (group, version, plural, singular, Kind, namespaced): the kinds the gates and accept read.
RESOURCES = (
    ("", "v1", "pods", "pod", "Pod", True),
    ("", "v1", "namespaces", "namespace", "Namespace", False),
    ("", "v1", "configmaps", "configmap", "ConfigMap", True),
    ("apps", "v1", "deployments", "deployment", "Deployment", True),
    ("apps", "v1", "daemonsets", "daemonset", "DaemonSet", True),
    ("batch", "v1", "jobs", "job", "Job", True),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions", "customresourcedefinition", "CustomResourceDefinition", False),
)


def debian_kubectl() -> str | None:
    """The path of Debian's kubectl, or None where it is not installed."""
    owner = subprocess.run(["dpkg-query", "-S", "/usr/bin/kubectl"], capture_output=True, text=True) if shutil.which("dpkg-query") else None
    if owner is not None and owner.returncode == 0 and owner.stdout.startswith("kubernetes-client:"):
        return "/usr/bin/kubectl"
    return str(DEBIAN_KUBECTL) if DEBIAN_KUBECTL.is_file() else None


def _field(obj: dict, dotted: str):
    for part in dotted.split("."):
        obj = obj.get(part, {}) if isinstance(obj, dict) else {}
    return obj


class _Handler(BaseHTTPRequestHandler):
    objects: list[dict] = []

    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 - http.server's name
        url = urlparse(self.path)
        parts = [p for p in url.path.split("/") if p]
        if parts == ["api"]:
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        if parts == ["apis"]:
            groups = sorted({g for g, *_ in RESOURCES if g})
            return self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/v1", "version": "v1"}],
                 "preferredVersion": {"groupVersion": f"{g}/v1", "version": "v1"}} for g in groups]})
        if parts[:1] == ["api"]:
            group, rest = "", parts[1:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, rest = parts[1], parts[2:]
        else:
            return self._send(404, {"kind": "Status", "status": "Failure", "code": 404})
        version, rest = rest[0], rest[1:]
        if not rest:
            return self._send(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}".lstrip("/"), "resources": [
                {"name": plural, "singularName": singular, "kind": kind, "namespaced": namespaced, "verbs": ["get", "list"]}
                for g, v, plural, singular, kind, namespaced in RESOURCES if g == group and v == version]})
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        plural, name = rest[0], (rest[1] if len(rest) > 1 else None)
        (kind,) = [k for g, v, p, _, k, _ in RESOURCES if g == group and p == plural]
        found = [o for o in self.objects if o["kind"] == kind and (namespace is None or o["metadata"].get("namespace") == namespace)]
        if name is not None:
            match = [o for o in found if o["metadata"]["name"] == name]
            if not match:
                return self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
                                        "message": f'{plural} "{name}" not found'})
            return self._send(200, match[0])
        for selector in parse_qs(url.query).get("fieldSelector", []):
            path, _, value = selector.partition("=")
            found = [o for o in found if _field(o, path) == value]
        api_version = f"{group}/{version}" if group else version
        return self._send(200, {"apiVersion": api_version, "kind": f"{kind}List", "metadata": {"resourceVersion": "1"}, "items": found})


class ApiServer:
    """A local server of `objects` for kubectl (a context manager)."""

    def __init__(self, objects: list[dict], workdir: Path):
        self._handler = type("Handler", (_Handler,), {"objects": objects})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.workdir = workdir

    def __enter__(self) -> "ApiServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def serve(self, objects: list[dict]) -> "ApiServer":
        """The same server (so kubectl's discovery cache, by server, holds) with other objects."""
        self._handler.objects = objects
        return self

    def kubectl(self, *args: str) -> subprocess.CompletedProcess:
        binary = debian_kubectl()
        assert binary, "Debian's kubernetes-client kubectl is not installed (bash .ci/run installs it)"
        kubeconfig = self.workdir / "kubeconfig"
        kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
        host, port = self._server.server_address
        return subprocess.run(
            [binary, f"--kubeconfig={kubeconfig}", f"--server=http://{host}:{port}", f"--cache-dir={self.workdir / 'cache'}", *args],
            capture_output=True, text=True, timeout=60,
        )
