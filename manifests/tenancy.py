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
- A default-deny egress NetworkPolicy beside it: DNS (CoreDNS), the VPC (the team's and the
  operators' pods, the cluster's API and interface endpoints, FSx; another team's pods keep
  their own ingress deny), the Services' addresses, the Pod Identity agent, and HTTPS anywhere
  (S3 through its gateway endpoint has public addresses, the AWS APIs where there is no
  interface endpoint, and the sample job's C4 stream from Hugging Face through NAT). Nothing
  else leaves: no plain HTTP, no other port, not the instance metadata service.
- A ValidatingAdmissionPolicy: what a team's people create in a team namespace (batch Jobs,
  PyTorchJobs, HyperPodPyTorchJobs: the kinds Kueue queues; their Role creates no pods) names
  that namespace's own local queue, and an update keeps the label it has (a suspended job
  whose label is taken off leaves Kueue, and would then start unqueued once unsuspended).
  Kueue's `manageJobsWithoutQueueName` would do the first for jobs, but it is the add-on's
  Kueue configuration, which the add-on owns; so the rule is ours. It keys on the people's
  Kubernetes groups (their access entries), so what the job controllers create from an
  admitted job, and the platform's own objects, are not held to it; and an update that leaves
  the label as it was passes, so members may label or annotate what an operator created.
- A second one on Workloads: a member's update may change `spec.active` and nothing else
  (stopping and resuming a job: `kueuectl stop workload`), never its pod sets, queue or
  priority; status is not theirs to write at all (manifests/teams.py).
  ValidatingAdmissionPolicy is GA in Kubernetes 1.30 (admissionregistration.k8s.io/v1); below
  that neither is made, the Role may not patch Workloads, and validation warns that jobs
  without a queue label are not refused.
"""

from __future__ import annotations

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
WORKLOAD_POLICY = "hyperpod-cdk-team-workload-stop"
# What a team's Role lets its people create that runs pods, each a kind Kueue queues
# (manifests/teams.py): never plain pods, which Kueue leaves alone without its pod integration.
QUEUED_KINDS = (
    ("batch", "v1", "jobs"),
    ("kubeflow.org", "*", "pytorchjobs"),
    (API_VERSION.split("/")[0], "*", "hyperpodpytorchjobs"),
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


def _unchanged(field: str) -> str:
    """CEL: `field` of spec is as it was (set to the same value, or unset in both)."""
    new, old = f"object.spec.{field}", f"oldObject.spec.{field}"
    return f"(has({new}) == has({old}) && (!has({new}) || {new} == {old}))"


# Every field of Kueue's WorkloadSpec but `active` (kubernetes-sigs/kueue apis/kueue/v1beta1 and
# v1beta2 workload_types.go: task governance before v1.5 serves v1beta1, from v1.5 v1beta2).
WORKLOAD_SPEC_HELD = (
    "podSets", "queueName", "priorityClassName", "priorityClassRef", "priority", "priorityClassSource",
    "maximumExecutionTimeSeconds", "preemptionGates",
)


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


def vpc_cidrs(settings: Settings) -> list[str]:
    """The VPC's address blocks: the one this project makes, or the existing one's."""
    net = settings.network.existing_vpc or settings.network
    return [str(c) for c in (net.vpc_cidr, *net.secondary_cidrs)]


def egress_policy(settings: Settings, team: str) -> dict:
    """Default-deny egress for every pod of the team's namespace, but for what a job needs."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": EGRESS_POLICY, "namespace": naming.team_names(team).namespace, "labels": dict(PART_OF)},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {"to": [{**_from_namespace("kube-system"), "podSelector": {"matchLabels": dict(DNS_PODS)}}],
                 "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                {"to": [{"podSelector": {}}]},
                {"to": [{"ipBlock": {"cidr": c}} for c in (*vpc_cidrs(settings), *SERVICE_CIDRS)]},
                {"to": [{"ipBlock": {"cidr": POD_IDENTITY_AGENT}}], "ports": [{"protocol": "TCP", "port": 80}]},
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": 443}]},
            ],
        },
    }


def queue_label_policy(settings: Settings) -> list[dict]:
    """The ValidatingAdmissionPolicies, the queue label's and the Workloads', and their
    bindings to the team namespaces (none below 1.30)."""
    if not queue_label_enforced(settings):
        return []
    names = [naming.team_names(t.name) for t in settings.governance.teams]
    groups = ", ".join(f"'{n.group}'" for n in names)
    queue = _policy(
        QUEUE_POLICY,
        [{"apiGroups": [group], "apiVersions": [version], "operations": ["CREATE", "UPDATE"], "resources": [resource]}
         for group, version, resource in QUEUED_KINDS],
        groups,
        [
            {
                "expression": f"request.operation != 'CREATE' || {_label('object')} == namespaceObject.metadata.name + '-localqueue'",
                "messageExpression": (
                    f"'label {QUEUE_LABEL}: ' + namespaceObject.metadata.name + '-localqueue is required "
                    "(your team\\'s queue; without it the job would bypass its quota)'"
                ),
                "reason": "Invalid",
            },
            {
                "expression": f"request.operation != 'UPDATE' || {_label('object')} == {_label('oldObject')}",
                "message": f"the label {QUEUE_LABEL} may not change (a job taken out of its queue would run outside its quota)",
                "reason": "Invalid",
            },
        ],
    )
    workloads = _policy(
        WORKLOAD_POLICY,
        [{"apiGroups": ["kueue.x-k8s.io"], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["workloads"]}],
        groups,
        [
            {
                "expression": " && ".join(_unchanged(f) for f in WORKLOAD_SPEC_HELD),
                "message": "a team may change only spec.active of a Workload (stop or resume it: kueuectl stop workload)",
                "reason": "Forbidden",
            },
            {
                "expression": "(has(object.metadata.labels) ? object.metadata.labels : {}) == "
                "(has(oldObject.metadata.labels) ? oldObject.metadata.labels : {})",
                "message": "a Workload's labels are Kueue's: a team may change only its spec.active",
                "reason": "Forbidden",
            },
        ],
    )
    return [queue, _binding(QUEUE_POLICY, names), workloads, _binding(WORKLOAD_POLICY, names)]
