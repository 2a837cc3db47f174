"""What a team's people may do in the cluster: their own namespace, nothing in another's.

The dependencies chart's team-role-and-bindings subchart writes these objects for one team
per chart release (`computeQuotaTarget.targetId`); the chart is installed once here, so they
are written per team with the subchart's names and Kubernetes group, which its access entry
maps the team's IAM roles to. Its rules, with what a team needs beyond them to run the
sample job: HyperPodPyTorchJobs (the subchart names only Kubeflow PyTorchJobs), its local
queue, events and the FSx claim. The subchart's "nodes" in a namespaced Role grant nothing
(nodes are not namespaced) and are left out. Four of its grants are not kept, each a way
around the team's quota or its policies:

- `pods: create`: Kueue queues plain pods only with its `pod` integration on, and the VPC CNI
  applies network policy only to pods with an owner; a team's own pod would run outside both.
  Teams create the job kinds Kueue queues (QUEUED_KINDS in manifests/tenancy.py), and debug
  their pods with `exec` and logs.
- `workloads/status: patch`: Kueue's webhook lets a status update set `status.admission`,
  and the job reconciler then starts the job, outside every quota. Kueue's own batch-user role
  reads Workloads and their status only. What a team may write on its Workloads is what
  stopping one needs: a patch of `spec.active` (`kueuectl stop workload`), held to that field
  by a ValidatingAdmissionPolicy, so granted only where there is one (Kubernetes 1.30).
- `pytorchjobs/status: update` and `hyperpodpytorchjobs/status: update, patch`: Kueue decides a
  job is finished from its status alone (a Succeeded or Failed condition: kubernetes-sigs/kueue
  v0.19.2 `pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go` Finished) and then
  finishes its Workload, releasing the quota (`pkg/controller/jobframework/reconciler.go`),
  while the job's pods run on. A job's status is its controller's; the team reads it.
- `secrets: create`: a member who may create secrets may mint a non-expiring service-account
  token. Jobs read their own secrets from Secrets Manager with their Pod Identity role.
"""

from __future__ import annotations

from infra import naming
from manifests.job import API_VERSION

RBAC = "rbac.authorization.k8s.io"
READ = ["get", "list", "watch"]

# What a team principal's own IAM must not hold: each undoes from AWS what the cluster holds
# a team to (the Role, the policies, its quota, the node guard), whatever its Kubernetes group.
# The account's administrators grant it; nothing here can refuse it. `hyperpod-cdk team` prints
# it beside the one action a member needs (eks:DescribeCluster).
ROLE_MUST_NOT_HOLD = (
    (("eks:CreateAccessEntry", "eks:UpdateAccessEntry", "eks:AssociateAccessPolicy"),
     "maps a principal, itself included, to another group or an EKS access policy: around the team's Role"),
    (("eks:CreatePodIdentityAssociation", "eks:UpdatePodIdentityAssociation", "iam:PassRole"),
     "binds a role it may pass (another team's, the platform's) to a service account in its namespace"),
    (("sagemaker:CreateComputeQuota", "sagemaker:UpdateComputeQuota", "sagemaker:DeleteComputeQuota",
      "sagemaker:UpdateClusterSchedulerConfig"),
     "changes its own or another team's quota, sharing or priority"),
    (("lambda:InvokeFunction",),
     "on the lifecycle upload function: writes the scripts every new node runs as root (the only writer the bucket lets in)"),
    (("sagemaker:UpdateCluster", "sagemaker:UpdateClusterSoftware"),
     "changes the instance groups' lifecycle scripts or reruns them"),
    (("eks:UpdateClusterConfig", "eks:UpdateAddon", "eks:DeleteAddon"),
     "turns off the network policy agent (the VPC CNI's enableNetworkPolicy) or task governance"),
    (("ssm:StartSession",),
     "on the cluster's nodes (HyperPod's sagemaker-cluster targets): a root shell beside every team's pods"),
)


def namespace_rules(*, stop_workloads: bool = False) -> list[dict]:
    """What a team member may do in the team's namespace. `stop_workloads`: may patch its
    Workloads (only their `spec.active`, which the policy of manifests/tenancy.py holds them to;
    leave it off where that policy is not made)."""
    jobs_group = API_VERSION.split("/")[0]
    return [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": [*READ, "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": READ},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": READ},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get", "list"]},
        # A shell in the team's own job pods, to debug them (kubectl exec opens it with create).
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
        {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": [*READ, "create", "delete", "update"]},
        {"apiGroups": [jobs_group], "resources": ["hyperpodpytorchjobs"], "verbs": [*READ, "create", "delete", "update", "patch"]},
        # A job's status is its controller's: read only (see the module's note).
        {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs/status"], "verbs": ["get"]},
        {"apiGroups": [jobs_group], "resources": ["hyperpodpytorchjobs/status"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "update", "get", "delete"]},
        # The chart's rule without create (see the module's note).
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "delete"]},
        {"apiGroups": [""], "resources": ["events", "persistentvolumeclaims"], "verbs": READ},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": [*READ, *(["patch"] if stop_workloads else [])]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"], "verbs": ["get"]},
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


def rbac(team: str, *, stop_workloads: bool = False) -> list[dict]:
    """The team's Role and ClusterRole, bound to its Kubernetes group (`stop_workloads`: see
    namespace_rules)."""
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
        {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": {"name": names.role, "namespace": names.namespace}, "rules": namespace_rules(stop_workloads=stop_workloads)},
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{names.role}-binding", "namespace": names.namespace},
            "subjects": subject,
            "roleRef": {"kind": "Role", "name": names.role, "apiGroup": RBAC},
        },
    ]
