"""What keeps one team's pods, data and credentials from another's, as Kubernetes objects.

Task governance creates each team's namespace (after its quota) and labels it for itself;
these objects go onto that namespace once it exists (addons/task_governance.py):

- Pod Security Admission labels: `enforce` at the team's level (restricted by default:
  non-root, no privilege escalation, an explicit seccomp profile, no capability; baseline, the
  opt-out, refuses only privileged pods, host namespaces, hostPath and added capabilities),
  `warn` and `audit` at restricted, so a baseline team sees what restricted would refuse.
  They are a merge patch of the namespace's labels (aws_eks_v2 KubernetesPatch), not a
  Namespace manifest: the namespace is task governance's, and a manifest that owned it would
  `kubectl delete` it, with the team's queue and jobs, when the stack or the team goes. The
  patch's delete only removes our labels (its restore patch sets them to null); CloudFormation
  re-applies it when its labels change, and `hyperpod-cdk accept` reads them back from the
  cluster, which is the only place a later reconciliation by the add-on would show.
- A default-deny ingress NetworkPolicy: the team's own pods, the training operator on the
  agent's port, the observability collectors; nothing from another team. Enforced by the
  VPC CNI's network policy agent (its `enableNetworkPolicy`, stacks/cluster.py).
- A default-deny egress NetworkPolicy beside it, every rule by port: DNS (CoreDNS), the team's
  own pods on the unprivileged ports (a job's ranks), the Services' addresses for DNS and the
  API server's HTTPS, the Pod Identity agent on 80, and HTTPS anywhere (the cluster's API and
  interface endpoints in the VPC, S3 through its gateway endpoint, which has public addresses,
  the AWS APIs where there is no interface endpoint, and the sample job's C4 stream from
  Hugging Face through NAT). Nothing else leaves: not kubelet or the node's exporters and
  agents, no other namespace's pods but on 443, no plain HTTP, not the instance metadata
  service. FSx for Lustre is mounted by the node's kernel client, not from the pod.
- A ValidatingAdmissionPolicy: what a team's people create in a team namespace (batch Jobs,
  PyTorchJobs, HyperPodPyTorchJobs: the kinds Kueue queues; their Role creates no pods) names
  that namespace's own local queue, and they update only what is in it, keeping its label (a
  suspended job whose label is taken off leaves Kueue, and would then start unqueued once
  unsuspended; an unlabelled job in their namespace is someone else's, run outside every
  queue). Kueue's `manageJobsWithoutQueueName` would do the first for jobs, but it is the
  add-on's Kueue configuration, which the add-on owns; so the rule is ours. It keys on the
  people's Kubernetes groups (their access entries), so what the job controllers create from
  an admitted job, and the platform's own objects, are not held to it.
- A second one on their DELETEs of those kinds: never orphaning (DeleteOptions'
  `propagationPolicy: Orphan` or `orphanDependents: true`, what `kubectl delete --cascade=orphan`
  sends). Kueue finishes a Workload whose job is gone "to release quota" (kubernetes-sigs/kueue
  v0.19.2 `pkg/workload/workload.go` FinalizeOrphanedWorkload) while orphaned pods run on. A
  batch/v1 Job deleted with no policy at all orphans its pods too (Kubernetes
  `pkg/registry/batch/job/strategy.go` DefaultGarbageCollectionPolicy: OrphanDependents "for
  backwards compatibility"), so a team's Job delete must name Background or Foreground; kubectl
  sends Background by default.
- A third one on Workloads, an allow-list: a member's update may change `spec.active` and
  nothing else, metadata included (Kueue reads labels, annotations, owner references and
  finalizers), but for what the API server itself writes on every update (resourceVersion,
  generation, managedFields): stopping and resuming a job, `kueuectl stop workload`. Status is
  not theirs to write at all, a Workload's nor any job's (manifests/teams.py).
  ValidatingAdmissionPolicy is GA in Kubernetes 1.30 (admissionregistration.k8s.io/v1); below
  that none is made, the Role may not patch Workloads, and validation warns that jobs
  without a queue label are not refused.

The policies' CEL is run by a CEL runtime in tests/manifests/test_admission_cel.py against the
requests each must allow and refuse. In an admission policy `object`, `oldObject` and
`request.options` are untyped maps (the API server's unstructured objects; its CEL
environment declares them dyn), so the expressions iterate keys and compare whole values with
CEL's own macros and no Kubernetes library function.
"""

from __future__ import annotations

from typing import NamedTuple

from infra import naming
from infra.checks.governance import queue_label_enforced
from infra.config import Settings, Team
from infra.config.governance import QUEUE_LABEL
from manifests.job import AGENT_PORT, API_VERSION, OPERATOR_NAMESPACE

PART_OF = {"app.kubernetes.io/part-of": "hyperpod-cdk"}
# Pod Security Admission's namespace labels (Kubernetes, "Pod Security Admission").
PSA_PREFIX = "pod-security.kubernetes.io/"
PSA_MODES = ("enforce", "warn", "audit")
# What warn and audit hold every team namespace to, whatever it enforces.
ADVISORY_LEVEL = "restricted"
ISOLATION_POLICY = "hyperpod-cdk-tenant-isolation"
# Where a team serves: its endpoint's model servers on their port, from any address (docs/serving.md).
ENDPOINT_POLICY = "hyperpod-cdk-endpoint-ingress"
# The label the inference operator gives an endpoint's pods: its InferenceEndpointConfig's name (the
# sagemaker-hyperpod SDK's HPEndpoint.list_pods finds them by it).
ENDPOINT_POD_LABEL = "app"
EGRESS_POLICY = "hyperpod-cdk-tenant-egress"
# CoreDNS, as EKS labels it in kube-system.
DNS_PODS = {"k8s-app": "kube-dns"}
# EKS Pod Identity's agent on every node (EKS user guide, "EKS Pod Identity agent": 169.254.170.23, port 80).
POD_IDENTITY_AGENT = "169.254.170.23/32"
# Where EKS puts Services' addresses when the cluster names none (EKS user guide, CreateCluster
# serviceIpv4Cidr: "either the 10.100.0.0/16 or 172.20.0.0/16 CIDR blocks").
SERVICE_CIDRS = ("10.100.0.0/16", "172.20.0.0/16")
# The observability add-on's collectors (FACTS, add-ons: its Pod Identity namespace).
OBSERVABILITY_NAMESPACE = "hyperpod-observability"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
QUEUE_POLICY = "hyperpod-cdk-team-queue-label"
DELETE_POLICY = "hyperpod-cdk-team-no-orphaning"
WORKLOAD_POLICY = "hyperpod-cdk-team-workload-stop"
# The policies, in the order the addons stack applies them; the teams' Roles wait for all.
POLICIES = (QUEUE_POLICY, DELETE_POLICY, WORKLOAD_POLICY)


class QueuedKind(NamedTuple):
    """A kind a team's Role lets its people create that runs pods, and the name Kueue's
    configuration gives its integration (`integrations.frameworks`, or for a kind whose own
    controller talks to Kueue, `integrations.externalFrameworks`: Kind.version.group)."""

    group: str
    version: str
    resource: str
    integration: str
    external: bool = False


# Each a kind Kueue queues only where its configuration lists the integration (Kueue's
# configuration reference, Integrations.Frameworks; its "Run a Kubeflow PyTorchJob" page for
# kubeflow.org/pytorchjob; the SageMaker developer guide's "Installing the training operator",
# Kueue (optional), for HyperPodPytorchJob.v1.sagemaker.amazonaws.com). Never plain pods, which
# Kueue leaves alone without its pod integration. `hyperpod-cdk accept` reads the cluster's
# Kueue configuration and fails naming any of them it does not list.
QUEUED_KINDS = (
    QueuedKind("batch", "v1", "jobs", "batch/job"),
    QueuedKind("kubeflow.org", "*", "pytorchjobs", "kubeflow.org/pytorchjob"),
    QueuedKind(API_VERSION.split("/")[0], "*", "hyperpodpytorchjobs", "HyperPodPytorchJob.v1." + API_VERSION.split("/")[0], external=True),
)


def pod_security_labels(team: Team) -> dict[str, str]:
    """The namespace labels: enforce at the team's level, warn and audit at restricted."""
    return {f"{PSA_PREFIX}{mode}": team.pod_security if mode == "enforce" else ADVISORY_LEVEL for mode in PSA_MODES}


def namespace_patch(team: Team) -> tuple[dict, dict]:
    """(apply, restore) merge patches of the team namespace: our labels on, then off again."""
    labels = pod_security_labels(team)
    return {"metadata": {"labels": labels}}, {"metadata": {"labels": {k: None for k in labels}}}


def _from_namespace(name: str) -> dict:
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: name}}}


def isolation_policy(team: str) -> dict:
    """Default-deny ingress for every pod of the team's namespace, except from its own pods,
    the training operator to the agent's port, and the observability collectors."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": ISOLATION_POLICY, "namespace": naming.team_names(team).namespace, "labels": dict(PART_OF)},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {}}]},
                {"from": [_from_namespace(OPERATOR_NAMESPACE)], "ports": [{"protocol": "TCP", "port": AGENT_PORT}]},
                {"from": [_from_namespace(OBSERVABILITY_NAMESPACE)]},
            ],
        },
    }


def _label(obj: str) -> str:
    """CEL: the object's queue label, or '' where it has none."""
    return (f"(has({obj}.metadata.labels) && '{QUEUE_LABEL}' in {obj}.metadata.labels ? "
            f"{obj}.metadata.labels['{QUEUE_LABEL}'] : '')")


def _same_but(new: str, old: str, free: tuple[str, ...]) -> str:
    """CEL: the maps `new` and `old` hold the same keys with the same values, but for the keys
    in `free` (an allow-list: a key added to the object later is held too)."""
    allowed = "[" + ", ".join(f"'{k}'" for k in free) + "]"
    return (f"{new}.all(k, k in {allowed} || (k in {old} && {new}[k] == {old}[k])) && "
            f"{old}.all(k, k in {allowed} || k in {new})")


# What a member may change on a Workload: spec.active (Kueue docs, concepts/workload "Active";
# kueuectl stop workload). What the API server itself changes on any update, before validating
# admission runs: metadata.resourceVersion, metadata.generation (a custom resource's strategy
# bumps it when spec changes), metadata.managedFields (the field manager). Everything else of
# the object, status, labels, annotations, owner references and finalizers included, stays.
WORKLOAD_FREE_SPEC = ("active",)
WORKLOAD_FREE_METADATA = ("resourceVersion", "generation", "managedFields")


def _orphaning() -> str:
    """CEL: the DELETE's options orphan the dependents (DeleteOptions, meta/v1: propagationPolicy
    Orphan, or the deprecated orphanDependents true), or name no policy on a batch/v1 Job, whose
    default is to orphan."""
    options = "request.options"
    named = f"(has({options}.propagationPolicy) || has({options}.orphanDependents))"
    return (f"(has({options}) && (has({options}.propagationPolicy) && {options}.propagationPolicy == 'Orphan' || "
            f"has({options}.orphanDependents) && {options}.orphanDependents == true)) || "
            f"(request.resource.group == 'batch' && !(has({options}) && {named}))")


def _binding(policy: str, names) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy, "labels": dict(PART_OF)},
        "spec": {
            "policyName": policy,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": [n.namespace for n in names]}]
                }
            },
        },
    }


def _policy(name: str, rules: list[dict], groups: str, validations: list[dict]) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(PART_OF)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": rules},
            # Only what a team's people do themselves: their access entries' groups.
            "matchConditions": [{"name": "submitted-by-a-team", "expression": f"request.userInfo.groups.exists(g, g in [{groups}])"}],
            "validations": validations,
        },
    }


# What a job's pods open to each other: torch's rendezvous store, NCCL's bootstrap and socket
# transport and Gloo listen on ports the kernel hands out (the ephemeral range), the elastic
# agent on AGENT_PORT; none below 1024.
PEER_PORTS = {"protocol": "TCP", "port": 1024, "endPort": 65535}
HTTPS = {"protocol": "TCP", "port": 443}
DNS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]


def endpoint_policy(team: str, endpoint: str, port: int) -> dict:
    """Ingress beside the default deny, for the endpoint a team serves: its pods (the operator's
    `app` label) on the port its model server listens on, the one the endpoint's load balancer
    Service refers to (the InferenceEndpointConfig model's `modelInvocationPort.name`), from any
    address: no source states whether the load balancer reaches pod IPs or node ports, from which
    subnets, and requests reach it through the SageMaker endpoint and the load balancer anyway.
    Nothing else of the namespace, and no other port of these pods, is opened."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": ENDPOINT_POLICY, "namespace": naming.team_names(team).namespace, "labels": dict(PART_OF)},
        "spec": {
            "podSelector": {"matchLabels": {ENDPOINT_POD_LABEL: endpoint}},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"protocol": "TCP", "port": port}]}],
        },
    }


def egress_policy(team: str) -> dict:
    """Default-deny egress for every pod of the team's namespace, but for what a job needs, each
    by port: DNS to CoreDNS; its own pods on the unprivileged ports; the Services' addresses for
    DNS and the API server's HTTPS (kubernetes.default); the Pod Identity agent on 80; HTTPS
    anywhere (the VPC's API and interface endpoints included). Nothing else: not kubelet
    (10250), the node exporters, the agents' ports, another namespace's Services, plain HTTP or
    the instance metadata service. FSx is mounted by the node, not the pod. A Service in front
    of the allowed pods (CoreDNS's kube-dns, a job's own) is reached on its ClusterIP: the VPC
    CNI's network policy controller adds the ClusterIPs of the Services that select a rule's
    pods to that rule (aws/amazon-network-policy-controller-k8s pkg/resolvers/endpoints.go,
    getMatchingServiceClusterIPs), so only kubernetes.default, which selects no pod, needs the
    Services' range."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": EGRESS_POLICY, "namespace": naming.team_names(team).namespace, "labels": dict(PART_OF)},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {"to": [{**_from_namespace("kube-system"), "podSelector": {"matchLabels": dict(DNS_PODS)}}], "ports": list(DNS)},
                {"to": [{"podSelector": {}}], "ports": [dict(PEER_PORTS)]},
                {"to": [{"ipBlock": {"cidr": c}} for c in SERVICE_CIDRS], "ports": [dict(HTTPS), *DNS]},
                {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": [{"protocol": "TCP", "port": 80}]},
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [dict(HTTPS)]},
            ],
        },
    }


def _queue_of_namespace() -> str:
    return "namespaceObject.metadata.name + '-localqueue'"


def _on_queued_kinds(operations: list[str]) -> list[dict]:
    return [{"apiGroups": [k.group], "apiVersions": [k.version], "operations": operations, "resources": [k.resource]} for k in QUEUED_KINDS]


def queue_label_policy(settings: Settings) -> list[dict]:
    """The ValidatingAdmissionPolicies, the queue label's, the delete's and the Workloads', and
    their bindings to the team namespaces (none below 1.30)."""
    if not queue_label_enforced(settings):
        return []
    names = [naming.team_names(t.name) for t in settings.governance.teams]
    groups = ", ".join(f"'{n.group}'" for n in names)
    queue = _policy(
        QUEUE_POLICY,
        _on_queued_kinds(["CREATE", "UPDATE"]),
        groups,
        [
            {
                "expression": f"request.operation != 'CREATE' || {_label('object')} == {_queue_of_namespace()}",
                "messageExpression": (
                    f"'label {QUEUE_LABEL}: ' + namespaceObject.metadata.name + '-localqueue is required "
                    "(your team\\'s queue; without it the job would bypass its quota)'"
                ),
                "reason": "Invalid",
            },
            {
                "expression": f"request.operation != 'UPDATE' || {_label('oldObject')} == {_queue_of_namespace()}",
                "message": (f"only a job in your team's queue may be changed (this one has no {QUEUE_LABEL} of "
                            "your namespace's local queue: it was made outside the team's quota)"),
                "reason": "Forbidden",
            },
            {
                "expression": f"request.operation != 'UPDATE' || {_label('object')} == {_label('oldObject')}",
                "message": f"the label {QUEUE_LABEL} may not change (a job taken out of its queue would run outside its quota)",
                "reason": "Invalid",
            },
        ],
    )
    delete = _policy(
        DELETE_POLICY,
        _on_queued_kinds(["DELETE"]),
        groups,
        [
            {
                "expression": f"!({_orphaning()})",
                "message": ("delete with propagationPolicy Background or Foreground (kubectl's default; not --cascade=orphan): "
                            "Kueue releases the quota of a job that is gone while orphaned pods would run on"),
                "reason": "Forbidden",
            },
        ],
    )
    held = "a team may change only spec.active of a Workload (stop or resume it: kueuectl stop workload)"
    workloads = _policy(
        WORKLOAD_POLICY,
        [{"apiGroups": ["kueue.x-k8s.io"], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["workloads"]}],
        groups,
        [
            {"expression": _same_but("object.spec", "oldObject.spec", WORKLOAD_FREE_SPEC), "message": held, "reason": "Forbidden"},
            {"expression": _same_but("object.metadata", "oldObject.metadata", WORKLOAD_FREE_METADATA),
             "message": held + "; its labels, annotations, owner references and finalizers are Kueue's", "reason": "Forbidden"},
            {"expression": _same_but("object", "oldObject", ("metadata", "spec")), "message": held, "reason": "Forbidden"},
        ],
    )
    return [queue, _binding(QUEUE_POLICY, names), delete, _binding(DELETE_POLICY, names), workloads, _binding(WORKLOAD_POLICY, names)]
