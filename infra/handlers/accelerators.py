"""Custom-resource handlers (CDK provider framework): wait until every accelerated instance
group has its configured count of nodes that can run training, as one link of a chained
wait (chain.py).

A node can run training when Kubernetes says so, not when SageMaker says Running: it is
Ready, not cordoned, HyperPod's health label says Schedulable (the job's node affinity
requires it), and the chart's device plugins have registered its accelerators (and EFA
devices, where the type has them) as allocatable. Without the device plugin (an image that
cannot be pulled, in a closed network) no node advertises `nvidia.com/gpu` and every GPU pod
stays Pending, which SageMaker cannot see.

Runs in Lambda inside the VPC (the API endpoint may be private) with only the runtime's
standard library and botocore: it signs an EKS token itself (aws-iam-authenticator's
format) and reads `/api/v1/nodes`, which its access entry's Kubernetes group may list.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

if __package__:  # imported as infra.handlers.* (the tests)
    from . import chain
else:  # in Lambda the handler folder is the root
    import chain

GROUP_LABEL = "sagemaker.amazonaws.com/instance-group-name"
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
# A presigned GetCallerIdentity is valid 15 minutes whatever X-Amz-Expires says;
# aws-iam-authenticator accepts 0-900 and its own client sends 60.
TOKEN_EXPIRES_S = 60
PAGE_SIZE = 500
# Statuses that pass: an access entry EKS has not propagated yet (401/403), throttling, the
# API server's own faults.
TRANSIENT_STATUS = {401, 403, 429, 500, 502, 503, 504}
# DescribeCluster's faults that pass (EKS's model: its server errors; botocore retries throttling).
DESCRIBE_CLUSTER_TRANSIENT = {"ServerException", "ServiceUnavailableException"}


def eks_token(cluster_name: str, region: str, session=None) -> str:
    """A bearer token for the EKS API: a presigned STS GetCallerIdentity URL that signs the
    cluster's name in the x-k8s-aws-id header, base64url without padding."""
    import botocore.session

    session = session or botocore.session.get_session()
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    sts = session.create_client("sts", region_name=region, endpoint_url=f"https://sts.{region}.{suffix}")

    def sign_cluster(request, **_):
        request.headers[CLUSTER_ID_HEADER] = cluster_name

    sts.meta.events.register("before-sign.sts.GetCallerIdentity", sign_cluster)
    url = sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=TOKEN_EXPIRES_S, HttpMethod="GET")
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class KubernetesApi:
    """GETs against one cluster's API server, trusting only the cluster's own CA. Each GET
    has KUBERNETES_TIMEOUT_S per connect, handshake and read, and none starts that the
    invocation (`invocation`: Lambda's context) has no time left to finish (chain.within_time)."""

    def __init__(self, endpoint: str, certificate_authority: str, token, invocation=None):
        self.endpoint = endpoint.rstrip("/")
        self.context = ssl.create_default_context(cadata=base64.b64decode(certificate_authority).decode())
        self.token = token  # a callable: a fresh token per request (they last 15 minutes)
        self.invocation = invocation
        self.timeout = chain.setting("KUBERNETES_TIMEOUT_S")

    def get(self, path: str, query: dict | None = None) -> dict:
        chain.within_time(self.invocation, f"GET {path}")
        url = self.endpoint + path + ("?" + urllib.parse.urlencode(query) if query else "")
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token()}", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=self.timeout) as response:
                return json.load(response)
        except urllib.error.HTTPError as err:
            if err.code in TRANSIENT_STATUS:
                raise chain.NotYet(f"GET {path}: HTTP {err.code} {err.reason}") from err
            raise RuntimeError(f"GET {path}: HTTP {err.code} {err.reason}: {err.read()[:300]!r}") from err
        except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
            raise chain.NotYet(f"GET {path}: {err}") from err

    def nodes(self, selector: str) -> list[dict]:
        items, token = [], None
        while True:
            query = {"labelSelector": selector, "limit": str(PAGE_SIZE), **({"continue": token} if token else {})}
            page = self.get("/api/v1/nodes", query)
            items += page.get("items", [])
            token = page.get("metadata", {}).get("continue")
            if not token:
                return items


def quantity(value: str | None) -> int:
    """An extended resource's quantity (device plugins advertise whole numbers)."""
    try:
        return int(value or 0)
    except ValueError:
        return 0


def why_not(node: dict, resources: dict[str, int]) -> str | None:
    """None when the node can run training, else what stops it."""
    status, labels = node.get("status", {}), node.get("metadata", {}).get("labels", {})
    ready = next((c.get("status") for c in status.get("conditions", []) if c.get("type") == "Ready"), None)
    if ready != "True":
        return "not Ready"
    if node.get("spec", {}).get("unschedulable"):
        return "cordoned"
    if labels.get(HEALTH_LABEL) != "Schedulable":
        return f"health {labels.get(HEALTH_LABEL, 'unlabelled')}"
    allocatable = status.get("allocatable", {})
    short = [f"{r} {quantity(allocatable.get(r))} of {n}" for r, n in sorted(resources.items()) if quantity(allocatable.get(r)) < n]
    return f"allocatable {', '.join(short)}" if short else None


def shortfall(groups: dict[str, dict], nodes: list[dict]) -> list[str]:
    """One phrase per group with fewer training-ready nodes than wanted, naming a few nodes and why."""
    lines = []
    for group, want in sorted(groups.items()):
        count = int(want["Count"])
        resources = {r: int(n) for r, n in want["Resources"].items()}
        mine = [n for n in nodes if n.get("metadata", {}).get("labels", {}).get(GROUP_LABEL) == group]
        reasons = {n["metadata"]["name"]: why_not(n, resources) for n in mine}
        ready = sum(1 for r in reasons.values() if r is None)
        if ready < count:
            named = [f"{name}: {r}" for name, r in sorted(reasons.items()) if r is not None][:3]
            wanted = ", ".join(f"{n} {r}" for r, n in sorted(resources.items()))
            lines.append(
                f"{group} has {ready} of {count} nodes that can train ({wanted} allocatable, Ready, Schedulable; "
                f"{len(mine)} registered)" + (f": {'; '.join(named)}" if named else "")
            )
    return lines


def cluster_address(props: dict, client=None, context=None) -> tuple[str, str]:
    """The API server's URL and CA: from the template for a cluster the stacks create; for an
    existing cluster, which the template knows by name only, from DescribeCluster."""
    if props.get("Endpoint"):
        return props["Endpoint"], props["CertificateAuthority"]
    from botocore.exceptions import BotoCoreError, ClientError

    client = client or chain.client("eks", props["Region"], context)
    try:
        cluster = client.describe_cluster(name=props["ClusterName"])["cluster"]
    except ClientError as err:
        if err.response["Error"]["Code"] not in DESCRIBE_CLUSTER_TRANSIENT:
            raise
        raise chain.NotYet(f"DescribeCluster: {err}") from err
    except BotoCoreError as err:  # connection errors and timeouts
        raise chain.NotYet(f"DescribeCluster: {err}") from err
    return cluster["endpoint"], cluster["certificateAuthority"]["data"]


def on_event(event, _context):
    return chain.start(event, event["ResourceProperties"]["ClusterName"])


def is_complete(event, context, api: KubernetesApi | None = None, now=time.time):
    props = event["ResourceProperties"]
    name, groups = props["ClusterName"], props["Groups"]

    def check() -> list[str]:
        reader = api
        if reader is None:
            endpoint, authority = cluster_address(props, context=context)
            reader = KubernetesApi(endpoint, authority, lambda: eks_token(name, props["Region"]), invocation=context)
        return shortfall(groups, reader.nodes(f"{GROUP_LABEL} in ({','.join(sorted(groups))})"))

    def timed_out(missing: list[str], error: str | None, minutes: int) -> str:
        return (
            f"EKS cluster {name}: accelerators not allocatable after {minutes} min: {'; '.join(missing)}"
            + (f" (last error: {error})" if error else "")
            + f". Look: kubectl get nodes -L {GROUP_LABEL},{HEALTH_LABEL}; kubectl describe node <name> (Allocatable); "
            "kubectl -n kube-system get daemonsets,pods -o wide (device plugins: an image that cannot be pulled "
            "leaves them ImagePullBackOff)"
        )

    return chain.poll(event, check, timed_out, now=now)
