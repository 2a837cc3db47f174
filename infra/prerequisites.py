"""What each feature needs beside its own config, as data: one row per need, with the
predicate that says the feature is on, the one that says the need is met, what it needs in
words and where that is written. Validation reads this table (`check`, from
infra/validation.py): a missing prerequisite is refused in one line, a contradiction (both
may be set, but one undoes the other) is a warning.

A row's `field` is the config field that turns the feature on; `[]` steps into each item of a
list, and the row's predicates then take that item. The line names that field, or, where one
field gives the need and the config set it against the feature (`needs_field` given, say
`node_recovery: "None"` beside Karpenter), that field: the value someone chose that breaks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from infra.field_paths import values

if TYPE_CHECKING:
    from infra.config.base import Problems
    from infra.config.settings import Settings


@dataclass(frozen=True)
class Prerequisite:
    feature: str
    field: str
    on: Callable[[Settings, Any], bool]
    needs: str | Callable[[Settings, Any], str]
    met: Callable[[Settings, Any], bool]
    source: str
    contradiction: bool = False
    needs_field: str | None = None
    # Name needs_field even where it was left out (a field that has no usable default).
    always_name_needs_field: bool = False
    # What the line shows for the field, where its own value would not say it (group names).
    shown: Callable[[Settings, Any], Any] | None = None

    def needs_words(self, s: Settings, item: Any) -> str:
        return self.needs(s, item) if callable(self.needs) else self.needs


# ------------------------------------------------------------------ interface endpoints

# The interface endpoints a network without NAT needs: each service, and what calls it when
# (the EKS user guide, "Deploy private clusters with limited internet access", lists the
# endpoints such a cluster needs and when: ECR for images, EC2 for the VPC CNI, STS and EKS
# Auth for pod credentials, CloudWatch Logs, EKS for nodes that register; Managed Prometheus
# "if using" it). None: whatever is turned on, something calls it.
ENDPOINTS: dict[str, tuple[str, Callable[[Settings], bool] | None]] = {
    "sagemaker.api": ("HyperPod's nodes (the cluster agent calls the SageMaker API)", None),
    "eks": ("nodes registering and the kubectl Lambda", None),
    "eks-auth": ("EKS Pod Identity, the add-ons' and the job's AWS credentials", None),
    "ec2": ("the VPC CNI", None),
    "ecr.api": ("every image pull from ECR (the add-ons, the chart's copies, the training image)", None),
    "ecr.dkr": ("every image pull from ECR", None),
    "sts": ("pods' and Lambdas' role credentials", None),
    "logs": ("CloudWatch Logs from the nodes and the in-VPC Lambdas", None),
    "monitoring": ("CloudWatch metrics from the nodes", None),
    "ssm": ("node access through Session Manager", None),
    "ssmmessages": ("node access through Session Manager", None),
    "ec2messages": ("node access through Session Manager", None),
    "lambda": ("the kubectl provider's in-VPC function, which invokes its handler", None),
    "aps-workspaces": ("the observability add-on's collector, which writes to Managed Prometheus", lambda s: s.addons.observability.enabled),
    "secretsmanager": (
        "the job reading its Hugging Face token at start (sample_job.hf_token_secret)",
        lambda s: s.sample_job.enabled and bool(s.sample_job.hf_token_secret),
    ),
}


def needed_endpoints(s: Settings) -> list[str]:
    """The interface endpoints what this config turns on calls, in ENDPOINTS' order."""
    return [service for service, (_, when) in ENDPOINTS.items() if when is None or when(s)]


def _missing_endpoints(s: Settings) -> list[str]:
    return [service for service in needed_endpoints(s) if service not in s.network.endpoint_services]


def _endpoint_words(s: Settings, _) -> str:
    missing = _missing_endpoints(s)
    return (
        "an interface endpoint for each AWS service what is turned on calls; missing: "
        + "; ".join(f"{svc} ({ENDPOINTS[svc][0]})" for svc in missing)
        + '. List them in network.interface_endpoints, or set network.interface_endpoints to "all" (or add a NAT gateway)'
    )


# ------------------------------------------------------------------ the chart's training operator

# The dependencies chart's Kubeflow training operator (charts/training-operators): its
# Deployment sets no tolerations, no affinity and no node selector, and its values.yaml offers
# no key for them, at the pinned revision a00b22d and at the newest, 011ca92 (2026-06-22);
# aws/sagemaker-hyperpod-cli PR 449, open since 2026-08, adds the toleration of HyperPod's
# deep-health-check taint, sagemaker.amazonaws.com/node-health-status=Unschedulable:NoSchedule.
# Until then it runs only on a node with no NoSchedule/NoExecute taint: one of a group without
# deep health checks and without such a taint. HyperPod's deep health checks reconcile a
# PyTorchJob through it (PR 449), so without such a node they never finish.
def training_operator_runs_on(g) -> bool:
    """Whether the chart's training operator can be scheduled on this group's nodes while the
    deep-checked ones run their checks."""
    from infra import catalogue

    return (
        catalogue.lookup(g.instance_type) is not None
        and not g.autoscaled
        and g.count >= 1
        and not g.health_checks
        and not any(t.effect in ("NoSchedule", "NoExecute") for t in g.taints)
    )


def unreachable_chart_images(s: Settings) -> list[str]:
    """The images the chart renders with its values that a network without NAT cannot pull
    from where they are (Settings.pulls_without_nat)."""
    from infra import hyperpod_chart

    rendered = hyperpod_chart.rendered_images(s.hyperpod.helm_chart.values, s.region)
    return [image for image in rendered.values() if not s.pulls_without_nat(image)]


def _chart_training_operator(s: Settings) -> bool:
    values = s.hyperpod.helm_chart.values.get("trainingOperators")
    return not (isinstance(values, dict) and values.get("enabled") is False)


# ------------------------------------------------------------------ the table

_AUTOSCALING_PAGE = "HyperPod's autoscaling page (sagemaker-hyperpod-eks-autoscaling), Prerequisites"
# ECR's interface endpoints serve this region's private registries, not public ECR or others.
_ECR_ENDPOINTS = "ECR user guide, interface VPC endpoints: they serve this account's private registries"
_NAT = "give the network a NAT gateway"

_INFERENCE_SETUP = "HyperPod docs, Setting up your HyperPod clusters for model deployment"

TABLE: tuple[Prerequisite, ...] = (
    Prerequisite(
        "the inference operator", "inference.enabled",
        on=lambda s, _: s.inference.enabled and not s.inference.existing,
        needs="a NAT gateway (network.nat_gateways): its load balancer controller calls Elastic Load Balancing and ACM, for which "
              "network.interface_endpoints offers no endpoint, and each endpoint's load balancer answers from the VPC's public side",
        met=lambda s, _: not s.network.closed,
        source=f"{_INFERENCE_SETUP}; the quick setup's AlbControllerPolicy",
    ),
    Prerequisite(
        "the inference operator", "inference.enabled",
        on=lambda s, _: s.inference.enabled and not s.inference.existing,
        needs="inference.existing: true on eks.existing_cluster (the quick setup installs the operator), or a cluster this project "
              "creates: the operator's roles trust the cluster's IAM OIDC provider, which this project creates only for its own cluster",
        met=lambda s, _: not s.uses_existing_cluster,
        source=f"{_INFERENCE_SETUP}; HyperPod inference troubleshooting, IAM trust relationship issue (sts:AssumeRoleWithWebIdentity)",
    ),
    Prerequisite(
        "Karpenter autoscaling", "hyperpod.autoscaling",
        on=lambda s, _: s.hyperpod.autoscaling == "karpenter",
        needs='hyperpod.node_recovery "Automatic"', met=lambda s, _: s.hyperpod.node_recovery == "Automatic",
        source=f"{_AUTOSCALING_PAGE}: NodeRecovery set to Automatic", needs_field="hyperpod.node_recovery",
    ),
    Prerequisite(
        "Karpenter autoscaling", "hyperpod.autoscaling",
        on=lambda s, _: s.hyperpod.autoscaling == "karpenter",
        needs="hyperpod.continuous_provisioning true (or left out), which Karpenter is built on",
        met=lambda s, _: s.hyperpod.continuous_provisioning or "continuous_provisioning" not in s.hyperpod.model_fields_set,
        source=f"{_AUTOSCALING_PAGE}: continuous provisioning enabled", needs_field="hyperpod.continuous_provisioning",
    ),
    Prerequisite(
        "Karpenter autoscaling", "hyperpod.autoscaling",
        on=lambda s, _: s.hyperpod.autoscaling == "karpenter",
        needs="at least one instance group with autoscaled: true",
        met=lambda s, _: any(g.autoscaled for g in s.hyperpod.instance_groups),
        source="HyperPod's NodeClass page: a HyperpodNodeClass names the instance groups Karpenter scales",
    ),
    Prerequisite(
        "Karpenter autoscaling", "hyperpod.autoscaling",
        on=lambda s, _: s.hyperpod.autoscaling == "karpenter",
        needs="one instance group with count >= 1 that is not autoscaled, for cert-manager and the add-ons' controllers",
        met=lambda s, _: any(g.count > 0 and not g.autoscaled for g in s.hyperpod.instance_groups),
        source="HyperPod's autoscaling page: Karpenter scales its groups to zero when no pod asks for them",
    ),
    Prerequisite(
        "an autoscaled group", "hyperpod.instance_groups[].autoscaled",
        on=lambda s, g: g.autoscaled,
        needs='hyperpod.autoscaling "karpenter"', met=lambda s, g: s.hyperpod.autoscaling == "karpenter",
        source=f"{_AUTOSCALING_PAGE}: HyperPod's managed Karpenter scales the groups",
    ),
    Prerequisite(
        "customer managed volume keys", "hyperpod.volume_encryption",
        on=lambda s, _: s.hyperpod.volume_encryption is not None,
        needs="hyperpod.continuous_provisioning true: HyperPod supports customer managed keys only with continuous node provisioning",
        met=lambda s, _: s.hyperpod.continuous,
        source="HyperPod's customer managed key page (smcluster-cmk)", needs_field="hyperpod.continuous_provisioning",
    ),
    Prerequisite(
        "cluster events", "operations.notifications.cluster_event_levels",
        on=lambda s, _: s.operations.enabled and "cluster_event_levels" in s.operations.notifications.model_fields_set,
        needs="hyperpod.continuous_provisioning true: a cluster without it emits no cluster events",
        met=lambda s, _: s.hyperpod.continuous,
        source="the HyperPod cluster events reference: events are available for clusters with NodeProvisioningMode Continuous",
        needs_field="hyperpod.continuous_provisioning",
    ),
    Prerequisite(
        "automatic AMI patching", "hyperpod.instance_groups[].auto_patch",
        on=lambda s, g: g.auto_patch is not None,
        needs=lambda s, g: f"the group also pins image_release_version {g.image_release_version}, and auto-patching moves "
        "its nodes to newer AMI patch releases, past the pin; drop one of them",
        met=lambda s, g: g.image_release_version is None,
        source="SageMaker API reference, ClusterAutoPatchConfig: the system automatically applies security patch AMI updates",
        contradiction=True,
    ),
    Prerequisite(
        "a network without NAT", "network.nat_gateways",
        on=lambda s, _: s.network.closed,
        needs=_endpoint_words, met=lambda s, _: not _missing_endpoints(s),
        source='EKS user guide, "Deploy private clusters with limited internet access"',
    ),
    Prerequisite(
        "a network without NAT", "network.nat_gateways",
        on=lambda s, _: s.network.closed,
        needs="eks.endpoint_access 'private' or 'public_and_private': a public-only endpoint is unreachable from it",
        met=lambda s, _: s.eks.endpoint_access != "public",
        source='EKS user guide, "Deploy private clusters with limited internet access": endpoint private access enabled',
        needs_field="eks.endpoint_access",
    ),
    Prerequisite(
        "MIG", "hyperpod.instance_groups",
        on=lambda s, _: any(g.mig_profile for g in s.hyperpod.instance_groups),
        needs="a NAT gateway, and the chart's images pulled from their registries: the MIG groups' GPU operator pulls "
        "node-feature-discovery from registry.k8s.io (its NVIDIA chart's default), which a network without NAT cannot reach",
        met=lambda s, _: not s.mirrors_chart_images,
        source="the chart's gpu-operator subchart values at the pinned revision; " + _NAT,
        shown=lambda s, _: [g.name for g in s.hyperpod.instance_groups if g.mig_profile],
    ),
    Prerequisite(
        "streaming the dataset from Hugging Face", "sample_job.dataset.files",
        on=lambda s, _: s.sample_job.enabled and not s.sample_job.dataset.files,
        needs="a NAT gateway; in a network without NAT name text under /fsx/ instead",
        met=lambda s, _: not s.network.closed,
        source="the job streams its dataset from huggingface.co",
        shown=lambda s, _: [],
    ),
    Prerequisite(
        "downloading the tokenizer from Hugging Face", "sample_job.tokenizer",
        on=lambda s, _: s.sample_job.enabled and not s.sample_job.tokenizer.startswith("/fsx/"),
        needs="a NAT gateway; in a network without NAT save it under /fsx/ (tokenizer.save_pretrained) and give that path",
        met=lambda s, _: not s.network.closed,
        source="the job downloads its tokenizer from huggingface.co",
    ),
    Prerequisite(
        "the dependencies chart's Kubeflow training operator", "hyperpod.instance_groups",
        on=lambda s, _: not s.uses_existing_cluster and _chart_training_operator(s),
        needs="an instance group with count >= 1, not autoscaled, without deep health checks and without a NoSchedule or "
        "NoExecute taint: the chart's training operator tolerates no taint, so while deep-checked nodes carry "
        "sagemaker.amazonaws.com/node-health-status=Unschedulable it has nowhere to run, and the checks' PyTorchJob is never reconciled",
        met=lambda s, _: any(training_operator_runs_on(g) for g in s.hyperpod.instance_groups),
        source="aws/sagemaker-hyperpod-cli charts/training-operators (no tolerations at a00b22d or 011ca92; PR 449 open)",
        shown=lambda s, _: [g.name for g in s.hyperpod.instance_groups],
    ),
    Prerequisite(
        "Amazon Managed Grafana", "addons.observability.grafana.enabled",
        on=lambda s, _: s.addons.observability.grafana.enabled,
        needs="addons.observability.enabled (Grafana reads its Prometheus workspace)",
        met=lambda s, _: s.addons.observability.enabled,
        source="the observability add-on page: Grafana dashboards read the add-on's Managed Prometheus workspace",
    ),
    Prerequisite(
        "Grafana with SAML", "addons.observability.grafana.authentication_providers",
        on=lambda s, _: s.addons.observability.enabled and s.addons.observability.grafana.enabled
        and "SAML" in s.addons.observability.grafana.authentication_providers,
        needs="the identity provider's metadata URL", met=lambda s, _: bool(s.addons.observability.grafana.saml_metadata_url),
        source="AWS::Grafana::Workspace SamlConfiguration (IdpMetadata)",
        needs_field="addons.observability.grafana.saml_metadata_url", always_name_needs_field=True,
    ),
    Prerequisite(
        "the observability add-on", "addons.observability.enabled",
        on=lambda s, _: s.addons.observability.enabled,
        needs="an instance group of 4xlarge (16 vCPUs) or larger for its collectors; add one or turn it off",
        # A type whose vCPUs no source gives cannot be checked: infra/checks/addons.py warns instead.
        met=lambda s, _: observability_node(s) or any(_vcpus(g) is None for g in s.hyperpod.instance_groups),
        source="the observability add-on page: a HyperPod node of 4xlarge or larger",
    ),
    Prerequisite(
        "alert rules", "operations.alerts.enabled",
        on=lambda s, _: s.operations.alerts.enabled,
        needs="addons.observability.enabled (the rules read its Prometheus workspace)",
        met=lambda s, _: s.addons.observability.enabled,
        source="Managed Prometheus alert manager: rules evaluate the workspace's metrics",
    ),
    Prerequisite(
        "alert rules", "operations.alerts.enabled",
        on=lambda s, _: s.operations.alerts.enabled and s.addons.observability.enabled,
        needs="the Prometheus workspace this project creates with observability; with addons.observability.existing the "
        "workspace is the cluster owner's", met=lambda s, _: not s.addons.observability.existing,
        source="this project: the rules are written into the workspace the addons stack creates",
    ),
    Prerequisite(
        "the sample job", "sample_job.enabled",
        on=lambda s, _: s.sample_job.enabled,
        needs="addons.training_operator.enabled (the job is a HyperPodPyTorchJob)",
        met=lambda s, _: s.addons.training_operator.enabled,
        source="the HyperPod training operator page: it serves HyperPodPyTorchJob",
    ),
    Prerequisite(
        "checkpoints on FSx", "sample_job.checkpoint_to",
        on=lambda s, _: s.sample_job.enabled and s.sample_job.checkpoint_to == "fsx",
        needs="fsx.enabled (the shared file system the job mounts)", met=lambda s, _: s.fsx.enabled,
        source="this project: the job mounts the fsx claim of its team's namespace",
    ),
    Prerequisite(
        "FSx for Lustre", "fsx.enabled",
        on=lambda s, _: s.fsx.enabled,
        needs="addons.fsx_csi.enabled: pods mount the file system through the CSI driver",
        met=lambda s, _: s.addons.fsx_csi.enabled,
        source="the FSx for Lustre CSI driver page of the EKS user guide", needs_field="addons.fsx_csi.enabled",
    ),
    Prerequisite(
        "the teams' FSx directories in a network without NAT", "fsx.directory_image",
        on=lambda s, _: s.fsx.enabled and s.network.closed and bool(s.governance.teams),
        needs="a copy in this account's ECR in this region, named here: a network without NAT cannot pull it from elsewhere",
        met=lambda s, _: s.pulls_without_nat(s.fsx.directory_image),
        source=_ECR_ENDPOINTS,
    ),
    Prerequisite(
        "the chart's images pulled from their own registries", "hyperpod.helm_chart.mirror_images",
        on=lambda s, _: s.hyperpod.helm_chart.mirror_images is False and not s.uses_existing_cluster,
        needs=lambda s, _: "a NAT gateway: in a network without NAT the chart's "
        + ", ".join(unreachable_chart_images(s)) + " cannot be pulled from there; leave mirror_images unset, and they are "
        "copied into ECR at deploy",
        met=lambda s, _: not s.network.closed or not unreachable_chart_images(s),
        source=f"the chart's images at the pinned revision (infra/hyperpod_chart.py); {_ECR_ENDPOINTS}",
    ),
    Prerequisite(
        "the job's image in a network without NAT", "sample_job.image_uri",
        on=lambda s, _: s.sample_job.enabled and s.network.closed and bool(s.sample_job.image_uri),
        needs=lambda s, _: f"a copy in a private ECR registry of {s.region}, named here: a network without NAT cannot pull "
        "it from another registry or region (or leave image_uri unset: cdk deploy builds training/ into this region's ECR)",
        met=lambda s, _: s.pulls_without_nat(s.sample_job.image_uri),
        source=_ECR_ENDPOINTS + " of their region (ECR Public and other regions' ECR are not)",
    ),
    Prerequisite(
        "a Docker Hub secret", "hyperpod.helm_chart.docker_hub_secret",
        on=lambda s, _: bool(s.hyperpod.helm_chart.docker_hub_secret),
        needs="the chart's images copied into ECR (mirror_images, or a network without NAT): only the copy uses it",
        met=lambda s, _: s.mirrors_chart_images,
        source="this project: the image copy signs in to Docker Hub with it",
    ),
    Prerequisite(
        "an existing execution role", "hyperpod.existing_execution_role_arn",
        on=lambda s, _: s.hyperpod.existing_execution_role_arn is not None,
        needs="hyperpod.existing_lifecycle_bucket, a bucket the role can already read (the stack's own is under a key made at deploy)",
        met=lambda s, _: bool(s.hyperpod.existing_lifecycle_bucket),
        source="this project: a role it may not change cannot be granted the stack's key beforehand",
    ),
    Prerequisite(
        "an existing security group", "network.existing_security_group_id",
        on=lambda s, _: s.network.existing_security_group_id is not None,
        needs="network.existing_vpc, the VPC the group is in", met=lambda s, _: s.network.existing_vpc is not None,
        source="EC2: a security group belongs to one VPC",
    ),
)


def _vcpus(g) -> int | None:
    """A group's vCPUs per node: 0 for a type the catalogue lacks (its own error says so), None
    where the catalogue knows the type but no source gives its vCPUs."""
    from infra import catalogue

    spec = catalogue.lookup(g.instance_type)
    return spec.vcpus if spec else 0


def observability_node(s: Settings) -> bool:
    """Whether some group's nodes are big enough for the observability collectors."""
    from infra import catalogue

    return any((_vcpus(g) or 0) >= catalogue.OBSERVABILITY_MIN_VCPUS for g in s.hyperpod.instance_groups)


# ------------------------------------------------------------------ reading the table


def _get(obj: Any, dotted: str) -> Any:
    for step in dotted.split("."):
        obj = getattr(obj, step, None)
    return obj


def given(s: Settings, dotted: str) -> bool:
    """Whether the config set this field itself (a default is not given)."""
    obj: Any = s
    for step in dotted.split("."):
        if step not in getattr(obj, "model_fields_set", ()):
            return False
        obj = getattr(obj, step)
    return True


def places(s: Settings, row: Prerequisite) -> list[tuple[str, Any, Any]]:
    """(the field's concrete path, its value, the item the predicates take) of each place the
    row's field is: one, or one per item where the field steps into a list."""
    if "[]" not in row.field:
        return [(row.field, _get(s, row.field), s)]
    scope, leaf = row.field.rsplit("[].", 1)
    return [(f"{where}.{leaf}", _get(item, leaf), item) for where, item in values(s, scope + "[]")]


def unmet(s: Settings) -> list[tuple[Prerequisite, str, Any, Any]]:
    """(row, path, value, item) of every feature that is on without what it needs."""
    out = []
    for row in TABLE:
        for path, value, item in places(s, row):
            if row.on(s, item) and not row.met(s, item):
                out.append((row, path, value, item))
    return out


def check(s: Settings, p: Problems) -> None:
    """Every row of the table against the config: one line per feature without what it needs."""
    for row, path, value, item in unmet(s):
        if p.named(path):
            continue  # a rule of the field's own already said what is wrong with it
        needs = row.needs_words(s, item)
        value = row.shown(s, item) if row.shown else value
        if row.contradiction:
            p.warn(f"{path}: {needs} ({row.source})")
        elif row.needs_field and (row.always_name_needs_field or given(s, row.needs_field)):
            p.error(row.needs_field, _get(s, row.needs_field), f"does not give what {path} {value!r} needs: {needs} ({row.source})")
        else:
            p.error(path, value, f"needs {needs} ({row.source})")
