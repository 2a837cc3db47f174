"""Limits from the services' own definitions, applied to the config fields that become their
properties: the next schema update tightens validation by itself, and no number is copied.

`FIELDS` maps each config field to where its limits are written. A field path is dotted;
`[]` is every item of a list, `{}` every key of a mapping and `{=}` every value (a step into a
free-form mapping, like an add-on's configuration values, follows its keys). The source is a
property of a CloudFormation resource type in cfn-lint's bundled registry schemas, or, where
that schema says nothing about it or less than the API, the shape in the AWS API model botocore
ships (the service's own request definition; CloudFormation hands the value to that API); a
reference grammar (an image reference, an e-mail address: infra/grammars.py); or a property of
an EKS add-on's published configuration schema, which no package ships, written here with
where it was read. A test fails when a mapped property disappears or loses its limits.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

from infra import cfn_schema, grammars, naming

if typing.TYPE_CHECKING:
    from infra.config.settings import Settings

KEYS = ("minItems", "maxItems", "minProperties", "maxProperties", "minLength", "maxLength", "pattern", "enum", "minimum", "maximum")


@dataclass(frozen=True)
class Cfn:
    """A property of a CloudFormation resource type; `path` steps through nested properties,
    `[]` into a list's items."""

    type_: str
    path: str

    def __str__(self) -> str:
        return f"{self.type_} {self.path.replace('.[]', '[]')}"


@dataclass(frozen=True)
class Api:
    """A shape of an AWS API model (botocore's copy of the service definition)."""

    service: str
    shape: str

    def __str__(self) -> str:
        return f"the {self.service} API's {self.shape}"


@dataclass(frozen=True)
class Grammar:
    """A reference grammar (infra/grammars.py): `problem` says why a value breaks it."""

    name: str
    problem: Callable[[str], str | None]
    # What a legal value leaves to chance, as a warning (None: nothing).
    caution: Callable[[str], str | None] | None = None

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class AddonSchema:
    """A property of an EKS add-on's configuration schema (`aws eks describe-addon-configuration`),
    which CreateAddon checks the configuration values against; `rules` in JSON-schema words."""

    addon: str
    path: str
    rules: tuple[tuple[str, Any], ...]
    read_from: str

    def __str__(self) -> str:
        return f"the {self.addon} add-on's configuration schema, {self.path}, per {self.read_from}"


@dataclass(frozen=True)
class Limit:
    source: Cfn | Api | Grammar | AddonSchema
    # What is measured, where it is not the field's own value (the tags every resource gets).
    measure: Callable[[Settings], Any] | None = None
    note: str = ""


_QUOTA = "AWS::SageMaker::ComputeQuota"
_QUOTA_LISTS = {"quotas": "ComputeQuotaConfig.ComputeQuotaResources", "absolute_borrow_limits": "ComputeQuotaConfig.ResourceSharingConfig.AbsoluteBorrowLimits"}
_QUOTA_ENTRY = {
    "count": "Count", "accelerators": "Accelerators", "vcpu": "VCpu", "memory_gib": "MemoryInGiB",
    "accelerator_partition.type": "AcceleratorPartition.Type", "accelerator_partition.count": "AcceleratorPartition.Count",
}

# Every tagged resource type the stacks create; tags are limited by the strictest of them.
TAGGED_TYPES = (
    "AWS::SageMaker::Cluster", "AWS::SageMaker::ComputeQuota", "AWS::SageMaker::ClusterSchedulerConfig", "AWS::IAM::Role",
    "AWS::ECR::Repository", "AWS::EKS::Cluster", "AWS::S3::Bucket", "AWS::KMS::Key", "AWS::EC2::VPC", "AWS::Logs::LogGroup",
    "AWS::Lambda::Function", "AWS::APS::Workspace", "AWS::FSx::FileSystem",
)

_GROUP = "hyperpod.instance_groups[]"
_CLUSTER = "AWS::SageMaker::Cluster"
_MAILBOX = Grammar("an SMTP mailbox (RFC 5321), what SNS's email protocol delivers to", grammars.email_problem)
_IMAGE = Grammar(
    "the distribution reference grammar (distribution/reference reference.go)", grammars.image_reference_problem, grammars.image_reference_caution
)


def _vpc_cni(path: str) -> AddonSchema:
    return AddonSchema(
        "vpc-cni", path, (("type", "string"), ("format", "boolean or integer")),
        "describe-addon-configuration (v1.18.6-eksbuild.1) quoted in aws/amazon-vpc-cni-k8s issue 3059",
    )
FIELDS: dict[str, Limit] = {
    "delivery.source.connection_arn": Limit(Api("codeconnections", "ConnectionArn")),
    "delivery.source.branch": Limit(Api("codeconnections", "BranchName")),
    "hyperpod.cluster_name": Limit(Cfn(_CLUSTER, "ClusterName")),
    "hyperpod.instance_groups": Limit(Cfn(_CLUSTER, "InstanceGroups")),
    "hyperpod.tiered_storage_memory_percent": Limit(Cfn(_CLUSTER, "TieredStorageConfig.InstanceMemoryAllocationPercentage")),
    f"{_GROUP}.name": Limit(Cfn(_CLUSTER, "InstanceGroups.[].InstanceGroupName")),
    f"{_GROUP}.count": Limit(Cfn(_CLUSTER, "InstanceGroups.[].InstanceCount")),
    f"{_GROUP}.min_count": Limit(Cfn(_CLUSTER, "InstanceGroups.[].MinInstanceCount")),
    f"{_GROUP}.threads_per_core": Limit(Cfn(_CLUSTER, "InstanceGroups.[].ThreadsPerCore")),
    f"{_GROUP}.ebs_volume_gb": Limit(Cfn(_CLUSTER, "InstanceGroups.[].InstanceStorageConfigs.[].EbsVolumeConfig.VolumeSizeInGB")),
    f"{_GROUP}.deep_health_checks": Limit(Cfn(_CLUSTER, "InstanceGroups.[].OnStartDeepHealthChecks")),
    f"{_GROUP}.taints": Limit(Cfn(_CLUSTER, "InstanceGroups.[].KubernetesConfig.Taints")),
    f"{_GROUP}.labels": Limit(Api("sagemaker", "ClusterKubernetesLabels")),
    f"{_GROUP}.labels{{}}": Limit(Api("sagemaker", "ClusterKubernetesLabelKey")),
    f"{_GROUP}.labels{{=}}": Limit(Api("sagemaker", "ClusterKubernetesLabelValue")),
    f"{_GROUP}.scheduled_update.wait_seconds": Limit(
        Cfn(_CLUSTER, "InstanceGroups.[].ScheduledUpdateConfig.DeploymentConfig.WaitIntervalInSeconds")
    ),
    f"{_GROUP}.scheduled_update.rollback_alarms": Limit(
        Cfn(_CLUSTER, "InstanceGroups.[].ScheduledUpdateConfig.DeploymentConfig.AutoRollbackConfiguration")
    ),
    # Each alarm's name: the schema's AlarmName allows 256 characters, the API it is handed to 255.
    f"{_GROUP}.scheduled_update.rollback_alarms[]": Limit(Api("sagemaker", "AlarmName")),
    f"{_GROUP}.auto_patch.rollback_alarms[]": Limit(Api("sagemaker", "AlarmName")),
    f"{_GROUP}.auto_patch.strategy": Limit(Cfn(_CLUSTER, "InstanceGroups.[].AutoPatchConfig.PatchingStrategy")),
    f"{_GROUP}.auto_patch.wait_seconds": Limit(Cfn(_CLUSTER, "InstanceGroups.[].AutoPatchConfig.DeploymentConfig.WaitIntervalInSeconds")),
    f"{_GROUP}.auto_patch.rollback_alarms": Limit(
        Cfn(_CLUSTER, "InstanceGroups.[].AutoPatchConfig.DeploymentConfig.AutoRollbackConfiguration")
    ),
    f"{_GROUP}.image_release_version": Limit(Cfn(_CLUSTER, "InstanceGroups.[].ImageReleaseVersion")),
    "hyperpod.volume_encryption.kms_key_arn": Limit(
        Cfn(_CLUSTER, "InstanceGroups.[].InstanceStorageConfigs.[].EbsVolumeConfig.VolumeKmsKeyId")
    ),
    # ARNs as the API that receives them reads them, beside IAM's grammar (infra/identity.py):
    # SageMaker's and Lambda's RoleArn take fewer path characters than IAM does (no ~ or !).
    "hyperpod.existing_execution_role_arn": Limit(Api("sagemaker", "RoleArn"), note="which CreateCluster takes as InstanceGroups[].ExecutionRole"),
    "eks.existing_cluster.kubectl_role_arn": Limit(Api("lambda", "RoleArn"), note="which CreateFunction takes as Role: the kubectl Lambda runs as it"),
    f"{_GROUP}.training_plan_arn": Limit(Api("sagemaker", "TrainingPlanArn"), note="which CreateCluster takes as InstanceGroups[].TrainingPlanArn"),
    "eks.cluster_name": Limit(Cfn("AWS::EKS::Cluster", "Name")),
    "governance.priority_classes": Limit(Cfn("AWS::SageMaker::ClusterSchedulerConfig", "SchedulerConfig.PriorityClasses")),
    "governance.priority_classes[].name": Limit(Cfn("AWS::SageMaker::ClusterSchedulerConfig", "SchedulerConfig.PriorityClasses.[].Name")),
    "governance.priority_classes[].weight": Limit(Cfn("AWS::SageMaker::ClusterSchedulerConfig", "SchedulerConfig.PriorityClasses.[].Weight")),
    "governance.teams[].name": Limit(Cfn("AWS::SageMaker::ComputeQuota", "ComputeQuotaTarget.TeamName")),
    "governance.teams[].fair_share_weight": Limit(Cfn("AWS::SageMaker::ComputeQuota", "ComputeQuotaTarget.FairShareWeight")),
    "governance.teams[].borrow_limit": Limit(Cfn("AWS::SageMaker::ComputeQuota", "ComputeQuotaConfig.ResourceSharingConfig.BorrowLimit")),
    # Both lists of quota entries (ComputeQuotaResourceConfig), and each field of an entry.
    **{f"governance.teams[].{field}": Limit(Cfn(_QUOTA, prop)) for field, prop in _QUOTA_LISTS.items()},
    **{
        f"governance.teams[].{field}[].{entry}": Limit(Cfn(_QUOTA, f"{prop}.[].{entry_prop}"))
        for field, prop in _QUOTA_LISTS.items()
        for entry, entry_prop in _QUOTA_ENTRY.items()
    },
    "protection.log_retention_days": Limit(Cfn("AWS::Logs::LogGroup", "RetentionInDays")),
    "protection.permissions_boundary": Limit(Api("iam", "policyNameType"), note="the name IAM gives a managed policy"),
    "sample_job.hf_token_secret": Limit(Cfn("AWS::SecretsManager::Secret", "Name")),
    "operations.notifications.emails[]": Limit(_MAILBOX),
    "sample_job.image_uri": Limit(_IMAGE),
    "acceptance.nccl_image": Limit(_IMAGE),
    "acceptance.dcgm_image": Limit(_IMAGE),
    "acceptance.probe_image": Limit(_IMAGE),
    "fsx.directory_image": Limit(_IMAGE),
    # Every variable of the VPC CNI's env is a string (its booleans and integers are strings of
    # format boolean or integer), and so are its switches: JSON true is refused by CreateAddon.
    "eks.core_addons.vpc_cni.configuration_values.env{=}": Limit(_vpc_cni("env.*")),
    "eks.core_addons.vpc_cni.configuration_values.enableNetworkPolicy": Limit(_vpc_cni("enableNetworkPolicy")),
    "eks.core_addons.vpc_cni.configuration_values.enableWindowsIpam": Limit(_vpc_cni("enableWindowsIpam")),
}


@lru_cache(maxsize=None)
def tags_limit() -> Limit:
    """Every resource gets config's tags and the project and environment tags: the strictest
    tagged type's limit applies to all of them together."""
    strictest = min(TAGGED_TYPES, key=lambda t: constraints(Cfn(t, "Tags")).get("maxItems", float("inf")))
    return Limit(
        Cfn(strictest, "Tags"),
        measure=lambda s: {**s.all_tags, **naming.HYPERPOD_CLUSTER_TAGS},
        note="counting the project and environment tags and the HyperPod cluster's own",
    )


@lru_cache(maxsize=None)
def _cfn_node(type_: str, path: str) -> dict:
    schema = cfn_schema.resource(type_)

    def deref(node: dict) -> dict:
        while "$ref" in node:
            node = schema["definitions"][node["$ref"].rsplit("/", 1)[-1]]
        return node

    node = deref(schema["properties"][path.split(".")[0]])
    for step in path.split(".")[1:]:
        if step == "[]":
            node = deref(node["items"])
            continue
        branches = [node, *(deref(b) for b in node.get("oneOf", []))]
        node = deref(next(b["properties"][step] for b in branches if step in b.get("properties", {})))
    return node


@lru_cache(maxsize=None)
def constraints(source: Cfn | Api) -> dict:
    """The limits a source writes down, in JSON-schema words (empty: none)."""
    if isinstance(source, Grammar):
        return {"grammar": source.name}
    if isinstance(source, AddonSchema):
        return dict(source.rules)
    if isinstance(source, Cfn):
        node = _cfn_node(source.type_, source.path)
        return {k: node[k] for k in KEYS if k in node}
    shape = _service_model(source.service).shape_for(source.shape)
    meta, words = shape.metadata, {}
    kind = {"list": "Items", "map": "Properties", "string": "Length"}.get(shape.type_name)
    if kind:
        words.update({f"min{kind}": meta["min"]} if "min" in meta else {})
        words.update({f"max{kind}": meta["max"]} if "max" in meta else {})
    elif shape.type_name in ("integer", "long"):
        words.update({"minimum": meta["min"]} if "min" in meta else {})
        words.update({"maximum": meta["max"]} if "max" in meta else {})
    if "pattern" in meta:
        # API patterns describe the whole value; anchor them as the service reads them.
        words["pattern"] = f"^(?:{meta['pattern']})$"
    if getattr(shape, "enum", None):
        words["enum"] = list(shape.enum)
    return words


@lru_cache(maxsize=None)
def _service_model(service: str):
    import botocore.session  # its models load in about 0.1 s each: only for fields that are set

    return botocore.session.get_session().get_service_model(service)


def violation(value: Any, rules: dict) -> str | None:
    """What about `value` breaks `rules`, in words; None when nothing does."""
    if rules.get("type") == "string" and not isinstance(value, str):
        kind = "boolean" if isinstance(value, bool) else "number" if isinstance(value, (int, float)) else "object or array"
        return f"is a JSON {kind}; a string is required here (write \"{str(value).lower()}\")"
    if isinstance(value, (tuple, list, dict)):
        n, what = len(value), ("entries" if isinstance(value, dict) else "items")
        high = rules.get("maxItems", rules.get("maxProperties"))
        low = rules.get("minItems", rules.get("minProperties"))
        if high is not None and n > high:
            return f"{what}; at most {high}"
        if low is not None and 0 < n < low:  # an empty optional list is left out of the template
            return f"{what}; at least {low}"
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if "enum" in rules and value not in rules["enum"]:
            return f"is not one of {', '.join(map(str, rules['enum']))}"
        if "minimum" in rules and value < rules["minimum"]:
            return f"is below the minimum {rules['minimum']}"
        if "maximum" in rules and value > rules["maximum"]:
            return f"is above the maximum {rules['maximum']}"
        return None
    text = str(value)
    if "enum" in rules and text not in rules["enum"]:
        return f"is not one of {', '.join(map(str, rules['enum']))}"
    if not cfn_schema.matches({k: rules[k] for k in ("minLength", "maxLength", "pattern") if k in rules}, text):
        lengths = f"{rules.get('minLength', 0)}-{rules['maxLength']} characters" if "maxLength" in rules else ""
        return "does not match " + ("; ".join(p for p in (lengths, f"pattern {rules['pattern']}" if "pattern" in rules else "") if p))
    return None
