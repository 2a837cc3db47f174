"""What a team's people may do in the cluster: their own namespace, nothing in another's.

The dependencies chart's team-role-and-bindings subchart writes these objects for one team
per chart release (`computeQuotaTarget.targetId`); the chart is installed once here, so they
are written per team with the subchart's names and Kubernetes group, which its access entry
maps the team's IAM roles to. Its rules, with what a team needs beyond them to run the
sample job: HyperPodPyTorchJobs (the subchart names only Kubeflow PyTorchJobs), its local
queue, events and the FSx claim; it may not create secrets (see namespace_rules). The subchart's "nodes" in a namespaced Role grant nothing
(nodes are not namespaced) and are left out.
"""

from __future__ import annotations

from infra import naming
from manifests.job import API_VERSION

RBAC = "rbac.authorization.k8s.io"
READ = ["get", "list", "watch"]


def namespace_rules() -> list[dict]:
    """What a team member may do in the team's namespace."""
    jobs_group = API_VERSION.split("/")[0]
    return [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": [*READ, "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", *READ]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": READ},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get", "list"]},
        {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs", "pytorchjobs/status"], "verbs": [*READ, "create", "delete", "update"]},
        {"apiGroups": [jobs_group], "resources": ["hyperpodpytorchjobs", "hyperpodpytorchjobs/status"], "verbs": [*READ, "create", "delete", "update", "patch"]},
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "update", "get", "delete"]},
        # The chart's rule without create: a member who may create secrets may mint a
        # non-expiring service-account token. Jobs read their own secrets from Secrets
        # Manager with their Pod Identity role (the sample job's Hugging Face token).
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "delete"]},
        {"apiGroups": [""], "resources": ["events", "persistentvolumeclaims"], "verbs": READ},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "workloads/status"], "verbs": [*READ, "patch"]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": READ},
    ]


def cluster_rules(team: str) -> list[dict]:
    """What a team member may read cluster-wide: namespace names, the team's own cluster
    queue, and the flavors and priority classes jobs name (as the subchart grants)."""
    return [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "get"]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "resourceNames": [naming.team_names(team).cluster_queue], "verbs": READ},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["resourceflavors", "workloadpriorityclasses"], "verbs": READ},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["list", "get"]},
    ]


def rbac(team: str) -> list[dict]:
    """The team's Role and ClusterRole, bound to its Kubernetes group."""
    names = naming.team_names(team)
    subject = [{"kind": "Group", "name": names.group, "apiGroup": RBAC}]
    return [
        {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": {"name": names.cluster_role}, "rules": cluster_rules(team)},
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{names.cluster_role}-binding"},
            "subjects": subject,
            "roleRef": {"kind": "ClusterRole", "name": names.cluster_role, "apiGroup": RBAC},
        },
        {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": {"name": names.role, "namespace": names.namespace}, "rules": namespace_rules()},
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{names.role}-binding", "namespace": names.namespace},
            "subjects": subject,
            "roleRef": {"kind": "Role", "name": names.role, "apiGroup": RBAC},
        },
    ]
