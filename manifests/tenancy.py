"""What keeps one team's pods, data and credentials from another's, as Kubernetes objects.

Task governance creates each team's namespace (after its quota) and labels it for itself;
these objects go onto that namespace once it exists (addons/task_governance.py):

- Pod Security Admission labels: `enforce` at the team's level (baseline by default: no
  privileged pod, no host namespace, no hostPath, no added capability), `warn` and `audit`
  at restricted, so people see what restricted would refuse before anyone enforces it.
  They are a merge patch of the namespace's labels (aws_eks_v2 KubernetesPatch), not a
  Namespace manifest: the namespace is task governance's, and a manifest that owned it would
  `kubectl delete` it, with the team's queue and jobs, when the stack or the team goes. The
  patch's delete only removes our labels (its restore patch sets them to null); CloudFormation
  re-applies it when its labels change, and `hyperpod-cdk accept` reads them back from the
  cluster, which is the only place a later reconciliation by the add-on would show.
- A default-deny ingress NetworkPolicy: the team's own pods, the training operator on the
  agent's port, the observability collectors; nothing from another team. Enforced by the
  VPC CNI's network policy agent (its `enableNetworkPolicy`, stacks/cluster.py).
- A ValidatingAdmissionPolicy: what a team's people create in a team namespace (pods, batch
  Jobs, PyTorchJobs, HyperPodPyTorchJobs) names that namespace's own local queue. Kueue's
  `manageJobsWithoutQueueName` would do it for jobs, but it is the add-on's Kueue
  configuration, which the add-on owns; so the rule is ours. It keys on the people's
  Kubernetes groups (their access entries), so pods the job controllers create from an
  admitted job, and the platform's own objects, are not held to it. ValidatingAdmissionPolicy
  is GA in Kubernetes 1.30 (admissionregistration.k8s.io/v1); below that validation warns
  that jobs without a queue label are not refused.
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
# The observability add-on's collectors (FACTS, add-ons: its Pod Identity namespace).
OBSERVABILITY_NAMESPACE = "hyperpod-observability"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
QUEUE_POLICY = "hyperpod-cdk-team-queue-label"
# What a team's Role lets its people create that Kueue admits (manifests/teams.py).
QUEUED_KINDS = (
    ("", "v1", "pods"),
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


def queue_label_policy(settings: Settings) -> list[dict]:
    """The ValidatingAdmissionPolicy and its binding to the team namespaces (none below 1.30)."""
    if not queue_label_enforced(settings):
        return []
    names = [naming.team_names(t.name) for t in settings.governance.teams]
    groups = ", ".join(f"'{n.group}'" for n in names)
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": QUEUE_POLICY, "labels": dict(PART_OF)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [group], "apiVersions": [version], "operations": ["CREATE", "UPDATE"], "resources": [resource]}
                    for group, version, resource in QUEUED_KINDS
                ]
            },
            # Only what a team's people submit themselves: their access entries' groups.
            "matchConditions": [{"name": "submitted-by-a-team", "expression": f"request.userInfo.groups.exists(g, g in [{groups}])"}],
            "validations": [
                {
                    "expression": (
                        f"has(object.metadata.labels) && '{QUEUE_LABEL}' in object.metadata.labels && "
                        f"object.metadata.labels['{QUEUE_LABEL}'] == namespaceObject.metadata.name + '-localqueue'"
                    ),
                    "messageExpression": (
                        f"'label {QUEUE_LABEL}: ' + namespaceObject.metadata.name + '-localqueue is required "
                        "(your team\\'s queue; without it the job would bypass its quota)'"
                    ),
                    "reason": "Invalid",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": QUEUE_POLICY, "labels": dict(PART_OF)},
        "spec": {
            "policyName": QUEUE_POLICY,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": [n.namespace for n in names]}]
                }
            },
        },
    }
    return [policy, binding]
