"""Per-environment settings: cdk.json context -> one immutable, validated object.

`cdk.json` holds `defaults` and an `environments` map. The chosen environment's block is
deep-merged over `defaults` (mappings merge key by key, lists and scalars replace), then
parsed by the pydantic models below, then checked across fields by `_cross_checks`.
Every problem becomes one line naming the field path, the value and what is allowed.
Nothing below app.py reads context: stacks get the `Settings` this module returns.
"""

from __future__ import annotations

import copy
import importlib.metadata
import ipaddress
import json
import re
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from infra import catalogue, cfn_schema, naming, timing, versions

DEFAULT_ENV = "dev"


class ConfigError(Exception):
    """Bad config: `problems` holds one human-readable line per problem, `warnings` the
    warnings found beside them (shown with the errors, never hidden by them)."""

    def __init__(self, problems: list[str], warnings: list[str] | None = None):
        super().__init__("\n".join(problems))
        self.problems = problems
        self.warnings = warnings or []


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- network

SubnetId = Annotated[str, StringConstraints(pattern=r"^subnet-[0-9a-f]{8,17}$")]
RouteTableId = Annotated[str, StringConstraints(pattern=r"^rtb-[0-9a-f]{8,17}$")]


class HyperPodSubnet(_Model):
    """A private subnet for HyperPod nodes, in the AZ where the GPU capacity is."""

    availability_zone: str
    # New VPC: the subnet's CIDR, inside `vpc_cidr` or one of `secondary_cidrs`.
    cidr: Optional[ipaddress.IPv4Network] = None
    # Existing VPC: the subnet's ID.
    subnet_id: Optional[SubnetId] = None
    # Existing VPC: its route table, so the S3 gateway endpoint can be attached.
    route_table_id: Optional[RouteTableId] = None


class ExistingVpc(_Model):
    """Import a VPC by IDs (no lookups). Its subnets must already route to NAT or endpoints."""

    vpc_id: str = Field(pattern=r"^vpc-[0-9a-f]{8,17}$")
    vpc_cidr: ipaddress.IPv4Network
    # The VPC's other CIDR blocks: interface endpoints admit HTTPS from every block.
    secondary_cidrs: tuple[ipaddress.IPv4Network, ...] = ()
    # One private subnet per entry of `availability_zones`, in the same order, for EKS.
    private_subnet_ids: tuple[SubnetId, ...] = Field(min_length=2)
    private_subnet_route_table_ids: tuple[RouteTableId, ...] = Field(min_length=2)
    # An S3 gateway endpoint on these route tables (and the HyperPod subnets'): lifecycle scripts,
    # checkpoints and ECR image layers are S3 traffic. False where the VPC already has one there
    # (a second one on the same route table fails; preflight tells).
    s3_gateway_endpoint: bool = True


class NetworkSettings(_Model):
    vpc_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("10.192.0.0/16")
    # Extra VPC CIDR blocks; AWS's HyperPod samples put the large node subnet in one.
    secondary_cidrs: tuple[ipaddress.IPv4Network, ...] = (ipaddress.IPv4Network("10.1.0.0/16"),)
    public_subnet_mask: int = Field(default=24, ge=16, le=28)
    private_subnet_mask: int = Field(default=20, ge=16, le=28)
    # 0: no NAT and no internet route (a closed network; needs interface_endpoints "all").
    # None: 1 in a new VPC; an existing VPC brings its own routes and takes none.
    nat_gateways: Optional[int] = Field(default=None, ge=0, le=6)
    hyperpod_subnets: tuple[HyperPodSubnet, ...] = Field(min_length=1)
    # Interface endpoints: "none"; true (sagemaker.api and eks-auth, so nodes need no NAT for
    # them); "all", every AWS service the nodes and the kubectl Lambda reach (ENDPOINT_SERVICES);
    # or a list of those services (an existing VPC that has some of them already).
    interface_endpoints: Union[bool, Literal["none", "all"], tuple[str, ...]] = False
    flow_logs: bool = True
    existing_vpc: Optional[ExistingVpc] = None

    @property
    def nat_count(self) -> int:
        return 0 if self.existing_vpc else (1 if self.nat_gateways is None else self.nat_gateways)

    @property
    def endpoint_services(self) -> tuple[str, ...]:
        if isinstance(self.interface_endpoints, tuple):
            return self.interface_endpoints
        if self.interface_endpoints == "all":
            return ENDPOINT_SERVICES
        return ("sagemaker.api", "eks-auth") if self.interface_endpoints is True else ()

    @property
    def closed(self) -> bool:
        """No NAT in a new VPC: the nodes reach only what the endpoints serve."""
        return not self.existing_vpc and self.nat_count == 0

    @property
    def cidr_blocks(self) -> tuple[ipaddress.IPv4Network, ...]:
        """Every CIDR block of the VPC, new or existing."""
        if self.existing_vpc:
            return (self.existing_vpc.vpc_cidr, *self.existing_vpc.secondary_cidrs)
        return (self.vpc_cidr, *self.secondary_cidrs)


# What HyperPod nodes and the kubectl Lambda call, as interface endpoints (S3 stays a gateway
# endpoint): the SageMaker API and EKS (node registration, the kubectl Lambda), EKS Auth (Pod
# Identity), EC2 (the VPC CNI), ECR (images), STS, CloudWatch Logs and metrics, SSM's three
# (node access); Lambda, because the kubectl provider's framework function runs in the VPC and
# invokes its handler; and Managed Prometheus, where the observability collector writes.
# A network without NAT needs every one of them.
ENDPOINT_SERVICES = (
    "sagemaker.api", "eks", "eks-auth", "ec2", "ecr.api", "ecr.dkr", "sts", "logs", "monitoring",
    "ssm", "ssmmessages", "ec2messages", "lambda", "aps-workspaces",
)
# --------------------------------------------------------------------------- EKS

LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")


class CoreAddon(_Model):
    version: Optional[str] = Field(default=None, pattern=r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")
    configuration_values: dict[str, Any] = {}


class CoreAddons(_Model):
    vpc_cni: CoreAddon = CoreAddon()
    kube_proxy: CoreAddon = CoreAddon()
    coredns: CoreAddon = CoreAddon()
    pod_identity_agent: CoreAddon = CoreAddon()


class EksSettings(_Model):
    version: str = Field(default=versions.DEFAULT_EKS_VERSION, pattern=r"^1\.\d{1,2}$")
    cluster_name: Optional[str] = None
    authentication_mode: Literal["API", "API_AND_CONFIG_MAP"] = "API"
    endpoint_access: Literal["public", "private", "public_and_private"] = "public_and_private"
    public_access_cidrs: tuple[ipaddress.IPv4Network, ...] = (ipaddress.IPv4Network("0.0.0.0/0"),)
    admin_principal_arns: tuple[str, ...] = ()
    logging: tuple[Literal["api", "audit", "authenticator", "controllerManager", "scheduler"], ...] = LOG_TYPES
    core_addons: CoreAddons = CoreAddons()

    @field_validator("admin_principal_arns")
    @classmethod
    def _principals(cls, arns):
        for arn in arns:
            session = re.match(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([\w+=,.@-]+)/", arn)
            if session:  # what `aws sts get-caller-identity` prints for a role
                partition, account, role = session.groups()
                raise ValueError(
                    f"{arn!r} is an STS session, which EKS access entries refuse; "
                    f"use the role's ARN, arn:{partition}:iam::{account}:role/{role} (with its path, if any)"
                )
            if not re.match(r"^arn:aws(-cn|-us-gov)?:iam::\d{12}:(role|user)/[\w+=,.@/-]+$", arn):
                raise ValueError(f"{arn!r} is not an IAM role or user ARN (arn:aws:iam::<account>:role/<name>)")
        return arns


# --------------------------------------------------------------------------- HyperPod


class Taint(_Model):
    key: str = Field(min_length=1, max_length=253)
    value: Optional[str] = Field(default=None, max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class RollingBatch(_Model):
    """How many instances an AMI update takes at a time."""

    unit: Literal["instances", "percent"] = "instances"
    value: int = Field(default=1, ge=1)

    @property
    def cfn_type(self) -> str:
        return "INSTANCE_COUNT" if self.unit == "instances" else "CAPACITY_PERCENTAGE"


class ScheduledUpdate(_Model):
    """AMI updates on a schedule (ScheduledUpdateConfig): rolling, rolled back on an alarm."""

    # cron(Minutes Hours Day-of-month Month Day-of-week Year), as the schema's pattern allows.
    schedule: str
    batch: RollingBatch = RollingBatch()
    rollback_batch: Optional[RollingBatch] = None
    wait_seconds: int = Field(default=0, ge=0, le=3600)
    rollback_alarms: tuple[str, ...] = Field(default=(), max_length=10)


class InstanceGroup(_Model):
    name: str
    instance_type: str
    count: int
    # Karpenter scales this group (hyperpod.autoscaling karpenter): count 0, at most max_count.
    autoscaled: bool = False
    max_count: Optional[int] = None
    # The group is InService once this many nodes run (MinInstanceCount); None: all of count.
    min_count: Optional[int] = None
    # Spot or On-Demand (CapacityRequirements); None leaves HyperPod's default, On-Demand.
    capacity: Optional[Literal["on_demand", "spot"]] = None
    # Further types HyperPod may launch for this group (InstanceRequirements); same accelerators.
    alternative_instance_types: tuple[str, ...] = ()
    # A custom AMI built from the HyperPod AMI (ImageId); None: HyperPod's current AMI.
    image_id: Optional[str] = None
    scheduled_update: Optional[ScheduledUpdate] = None
    # EFA interface type (NetworkInterface): "efa-only" gives EFA without an IP interface.
    network_interface: Optional[Literal["efa", "efa-only"]] = None
    threads_per_core: int = 1
    ebs_volume_gb: int = 500
    # None means: both checks on types that support them, none elsewhere.
    deep_health_checks: Optional[tuple[Literal["InstanceStress", "InstanceConnectivity"], ...]] = None
    labels: dict[str, str] = {}
    taints: tuple[Taint, ...] = ()
    training_plan_arn: Optional[str] = Field(
        default=None, pattern=r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:\d{12}:training-plan/[a-zA-Z0-9\-]+$"
    )
    # Place this group in another HyperPod subnet (one of network.hyperpod_subnets).
    availability_zone: Optional[str] = None

    @property
    def spec(self) -> catalogue.InstanceType:
        return catalogue.CATALOGUE[self.instance_type]

    @property
    def ceiling(self) -> int:
        """The most nodes the group can have: what quotas must cover."""
        return self.max_count if self.autoscaled and self.max_count else self.count

    @property
    def boot_minutes(self) -> float:
        """Typical minutes until the group's nodes are all Running (infra/timing.py)."""
        spec = catalogue.lookup(self.instance_type)
        return timing.node_minutes(
            accelerated=bool(spec and spec.is_accelerated),
            efa_interfaces=spec.efa_interfaces if spec else 0,
            count=self.count,
            checks=self.health_checks,
        )

    @property
    def health_checks(self) -> tuple[str, ...]:
        if self.deep_health_checks is not None:
            return self.deep_health_checks
        if self.autoscaled:  # not supported with Karpenter (HyperPod's NodeClass page)
            return ()
        return ("InstanceStress", "InstanceConnectivity") if self.spec.deep_health_checks else ()


class HelmChartSource(_Model):
    """Where `make hyperpod-chart` fetches the HyperPod dependencies chart from."""

    repository: str = "https://github.com/aws/sagemaker-hyperpod-cli.git"
    revision: str = Field(pattern=r"^[0-9a-f]{40}$")
    path: str = "helm_chart/HyperPodHelmChart"
    release: str = "hyperpod-dependencies"
    # Extra chart values, merged over the ones the stack sets from config.
    values: dict[str, Any] = {}
    # Copy the chart's images into this account's ECR at deploy and point the chart at the
    # copies. None: exactly when the network has no NAT (a new VPC with nat_gateways 0).
    mirror_images: Optional[bool] = None
    # A Secrets Manager secret (name) holding Docker Hub credentials, "user:password" or JSON
    # username/password, for the copy: anonymous pulls are rate-limited per source address.
    docker_hub_secret: Optional[str] = None


class HyperPodSettings(_Model):
    cluster_name: Optional[str] = None
    node_recovery: Literal["Automatic", "None"] = "Automatic"
    continuous_provisioning: bool = False
    # "karpenter": HyperPod's managed Karpenter scales the groups marked autoscaled.
    autoscaling: Literal["none", "karpenter"] = "none"
    # Managed tiered checkpointing: this share of each node's memory holds checkpoints
    # (TieredStorageConfig); None leaves it off.
    tiered_storage_memory_percent: Optional[int] = Field(default=None, ge=1, le=100)

    @property
    def continuous(self) -> bool:
        """NodeProvisioningMode Continuous: asked for, or implied by Karpenter, which is built on it."""
        return self.continuous_provisioning or self.autoscaling == "karpenter"
    # A ceiling on any one group's count, so a typo (400 for 4) cannot reach the quota call.
    max_instances_per_group: int = Field(default=64, ge=1, le=10000)
    helm_chart: HelmChartSource
    instance_groups: tuple[InstanceGroup, ...] = Field(min_length=1)


# --------------------------------------------------------------------------- add-ons


class AddonSwitch(_Model):
    enabled: bool = True
    # Pinned EKS add-on version; None lets EKS choose its default at create time.
    version: Optional[str] = Field(default=None, pattern=r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")
    configuration_values: dict[str, Any] = {}


MetricLevel = Literal["BASIC", "ADVANCED"]


class ObservabilityMetrics(_Model):
    training: MetricLevel = "BASIC"
    inference: MetricLevel = "BASIC"
    task_governance: MetricLevel = "BASIC"
    scaling: MetricLevel = "BASIC"
    cluster: MetricLevel = "BASIC"
    node: MetricLevel = "BASIC"
    network: MetricLevel = "BASIC"
    accelerated_compute: MetricLevel = "ADVANCED"


class GrafanaSettings(_Model):
    """Amazon Managed Grafana: AWS_SSO needs IAM Identity Center enabled in the account;
    SAML needs the identity provider's metadata URL. Users and groups are assigned after
    deploy (CloudFormation has no resource for Grafana permissions)."""

    enabled: bool = False
    authentication_providers: tuple[Literal["AWS_SSO", "SAML"], ...] = Field(default=("AWS_SSO",), min_length=1)
    saml_metadata_url: Optional[str] = Field(default=None, pattern=r"^https://\S+$")


class ObservabilityAddon(AddonSwitch):
    scrape_interval_seconds: int = Field(default=30, ge=10, le=300)
    metrics: ObservabilityMetrics = ObservabilityMetrics()
    logging: bool = True
    grafana: GrafanaSettings = GrafanaSettings()


class AddonsSettings(_Model):
    cert_manager: AddonSwitch = AddonSwitch()
    training_operator: AddonSwitch = AddonSwitch()
    observability: ObservabilityAddon = ObservabilityAddon()
    task_governance: AddonSwitch = AddonSwitch()
    # The FSx for Lustre CSI driver: installed only where fsx.enabled (its version and values here).
    fsx_csi: AddonSwitch = AddonSwitch()


# --------------------------------------------------------------------------- governance

TOPOLOGY_LEVELS = (
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "topology.k8s.aws/ultraserver-id",
)


class PriorityClass(_Model):
    name: str
    weight: int


class QuotaResource(_Model):
    instance_type: str
    count: Optional[int] = None
    accelerators: Optional[int] = None


class Team(_Model):
    name: str
    quotas: tuple[QuotaResource, ...] = Field(min_length=1)
    sharing: Literal["Lend", "DontLend", "LendAndBorrow"] = "LendAndBorrow"
    # Percent of the team's quota it may borrow from idle capacity (LendAndBorrow only).
    borrow_limit: Optional[int] = None
    preempt: Literal["Never", "LowerPriority"] = "LowerPriority"
    fair_share_weight: int = Field(default=50, ge=0, le=100)
    active: bool = True


class GovernanceSettings(_Model):
    priority_classes: tuple[PriorityClass, ...] = ()
    fair_share: bool = True
    idle_resource_sharing: bool = True
    # Teams' quotas may add up to more than the cluster has (they borrow from each other).
    allow_oversubscription: bool = False
    teams: tuple[Team, ...] = ()


class TopologySettings(_Model):
    mode: Literal["none", "preferred", "required"] = "none"
    level: str = "topology.k8s.aws/network-node-layer-3"


# --------------------------------------------------------------------------- sample job


class DatasetSettings(_Model):
    name: str = "allenai/c4"
    config: Optional[str] = "en"
    split: str = "train"
    # Text files (glob patterns) on the shared FSx file system, read instead of streaming `name`
    # from Hugging Face (a closed network, or a corpus of your own).
    files: tuple[str, ...] = ()


class SampleJobSettings(_Model):
    enabled: bool = True
    name: str = "llama3-1-8b-fsdp"
    team: Optional[str] = None
    priority: Optional[str] = None
    instance_group: str
    nodes: int = Field(default=1, ge=1)
    model: Literal["llama3.1-8b", "tiny"] = "llama3.1-8b"
    image_uri: Optional[str] = None
    dataset: DatasetSettings = DatasetSettings()
    # Ungated by default. The real LLaMA 3.1 tokenizer (meta-llama/Llama-3.1-8B) is gated: name
    # it here and keep the token in the AWS Secrets Manager secret `hf_token_secret` (its name, in
    # this account and region); the job reads it at start with its own role. A path under /fsx
    # is a tokenizer saved there (a closed network).
    tokenizer: str = "hf-internal-testing/llama-tokenizer"
    hf_token_secret: Optional[str] = None
    # Unset: from the instance catalogue. Set, they must match the instance type.
    gpus_per_node: Optional[int] = None
    efa_per_node: Optional[int] = None
    max_steps: int = Field(default=100, ge=1, le=10_000_000)
    checkpoint_interval_steps: int = Field(default=50, ge=1)
    # Checkpoints go to this S3 prefix in the job's own bucket when true, else to local NVMe.
    # s3: the checkpoint bucket; fsx: the shared FSx for Lustre file system (fsx.enabled);
    # local: the node's NVMe (single-node jobs only).
    checkpoint_to: Literal["s3", "fsx", "local"] = "s3"
    # Complete checkpoints kept; older ones are deleted after each save (S3 keeps noncurrent
    # versions for the bucket's lifecycle window).
    keep_checkpoints: int = Field(default=3, ge=1, le=1000)


# --------------------------------------------------------------------------- root


class ExistingFileSystem(_Model):
    """An FSx for Lustre file system made elsewhere: what a static PersistentVolume needs."""

    file_system_id: str = Field(pattern=r"^fs-[0-9a-f]{8,21}$")
    # From `aws fsx describe-file-systems`: DNSName and LustreConfiguration.MountName.
    dns_name: str = Field(pattern=r"^fs-[0-9a-f]{8,21}\.fsx\.[a-z0-9-]+\.amazonaws\.com$")
    mount_name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,8}$")


class FsxSettings(_Model):
    """Shared storage: FSx for Lustre, mounted in every team's namespace as the claim `fsx`."""

    enabled: bool = False
    # A new file system (PERSISTENT_2): 1200 or 2400 GiB, then steps of 2400 (FSx CreateFileSystem).
    storage_gib: int = 1200
    # MB/s per TiB of storage: PERSISTENT_2 offers 125, 250, 500 and 1000.
    throughput_per_tib: int = 250
    # Its AZ; it must have a HyperPod subnet. None: the first HyperPod subnet's (the GPU AZ).
    availability_zone: Optional[str] = None
    # Use this file system instead of creating one.
    existing: Optional[ExistingFileSystem] = None


FSX_THROUGHPUTS = (125, 250, 500, 1000)


class ProtectionSettings(_Model):
    termination_protection: bool = True
    # Retain buckets, keys and logs when their stack is deleted. dev may trade this for cost.
    retain_data: bool = True
    log_retention_days: Literal[
        1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653
    ] = 365


class Settings(_Model):
    env_name: str
    account: str = Field(pattern=r"^\d{12}$")
    region: str = Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
    availability_zones: tuple[str, ...] = Field(min_length=2, max_length=6)
    # The zone IDs those names map to in this account (e.g. use1-az4), checked by preflight:
    # names are shuffled per account, IDs are not, and GPU capacity is bought per zone ID.
    availability_zone_ids: Optional[tuple[str, ...]] = None
    prefix: str = Field(pattern=r"^[a-z][a-z0-9-]{0,19}$")
    tags: dict[str, str] = {}
    protection: ProtectionSettings = ProtectionSettings()
    network: NetworkSettings
    eks: EksSettings = EksSettings()
    hyperpod: HyperPodSettings
    addons: AddonsSettings = AddonsSettings()
    governance: GovernanceSettings = GovernanceSettings()
    topology: TopologySettings = TopologySettings()
    fsx: FsxSettings = FsxSettings()
    sample_job: SampleJobSettings

    # Derived names, so every consumer uses the same ones.
    @property
    def eks_cluster_name(self) -> str:
        return self.eks.cluster_name or naming.default_eks_cluster_name(self.prefix, self.env_name)

    @property
    def hyperpod_cluster_name(self) -> str:
        return self.hyperpod.cluster_name or naming.default_hyperpod_cluster_name(self.prefix, self.env_name)

    @property
    def lifecycle_bucket_name(self) -> str:
        return naming.lifecycle_bucket_name(self.prefix, self.env_name, self.account, self.region)

    @property
    def checkpoint_bucket_name(self) -> str:
        return naming.checkpoint_bucket_name(self.prefix, self.env_name, self.account, self.region)

    def stack_name(self, suffix: str) -> str:
        return naming.stack_name(self.prefix, self.env_name, suffix)

    @property
    def all_tags(self) -> dict[str, str]:
        return {"project": "hyperpod-cdk", "environment": self.env_name, **self.tags}

    def instance_group(self, name: str) -> InstanceGroup | None:
        return next((g for g in self.hyperpod.instance_groups if g.name == name), None)

    def capacity(self) -> dict[str, int]:
        """Instances per type over all groups."""
        totals: dict[str, int] = {}
        for group in self.hyperpod.instance_groups:
            totals[group.instance_type] = totals.get(group.instance_type, 0) + group.ceiling
        return totals

    @property
    def fsx_availability_zone(self) -> str:
        return self.fsx.availability_zone or self.network.hyperpod_subnets[0].availability_zone

    @property
    def uses_existing_vpc(self) -> bool:
        return self.network.existing_vpc is not None

    @property
    def mirrors_chart_images(self) -> bool:
        asked = self.hyperpod.helm_chart.mirror_images
        return asked if asked is not None else self.network.closed

    @property
    def device_resources(self) -> set[str]:
        """The extended resources some instance group's nodes advertise (accelerators, EFA)."""
        return {r for g in self.hyperpod.instance_groups if catalogue.lookup(g.instance_type) for r in g.spec.device_resources}


# --------------------------------------------------------------------------- loading


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; anything else in `override` replaces what `base` had."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def context_from_cdk_cli(environ: Mapping[str, str]) -> dict[str, Any]:
    """The context the CDK CLI hands the app: the JSON of cdk.json and -c flags in
    CDK_CONTEXT_JSON, and what did not fit in the environment in the file that
    CONTEXT_OVERFLOW_LOCATION_ENV names. Read as JSON, so null means null here exactly as
    in `hyperpod-cdk validate` (the CDK library would drop it and fall back to the default)."""
    context = json.loads(environ.get("CDK_CONTEXT_JSON") or "{}")
    overflow = environ.get("CONTEXT_OVERFLOW_LOCATION_ENV")
    if overflow:
        with open(overflow) as handle:
            context.update(json.load(handle))
    return context


def environment_names(context: Mapping[str, Any]) -> list[str]:
    envs = context.get("environments") or {}
    return sorted(envs) if isinstance(envs, Mapping) else []


def merged_environment(context: Mapping[str, Any], env: str) -> dict[str, Any]:
    envs = context.get("environments")
    if not isinstance(envs, Mapping) or not envs:
        raise ConfigError(["environments: missing from cdk.json context; add at least one environment block"])
    if env not in envs:
        raise ConfigError([f"env: {env!r} is not an environment in cdk.json; valid: {', '.join(sorted(envs))}"])
    defaults = context.get("defaults") or {}
    block = envs[env] or {}
    for where, value in (("defaults", defaults), (f"environments.{env}", block)):
        if not isinstance(value, Mapping):
            raise ConfigError([f"{where}: {value!r} must be a mapping of settings"])
    return deep_merge(defaults, block)


def load_settings(context: Mapping[str, Any], env: str | None = None) -> tuple[Settings, list[str]]:
    """Return the validated settings of `env` and its warnings, or raise ConfigError."""
    env = env or DEFAULT_ENV
    raw = merged_environment(context, env)
    raw.pop("env_name", None)
    try:
        # Strict, from JSON: a number is a number and a string a string in every field
        # ("2" is not a count, 1.3 is not a version), as the services read them.
        settings = Settings.model_validate_json(json.dumps({**raw, "env_name": env}), strict=True)
    except ValidationError as exc:
        raise ConfigError([f"{env}: {line}" for line in _pydantic_lines(exc)]) from None
    return settings, check(settings)


def override(settings: Settings, patch: Mapping[str, Any]) -> tuple[Settings, list[str]]:
    """`settings` with `patch` merged over it, parsed and checked exactly as cdk.json is
    (every field limit, every cross rule): CLI overrides get no looser rules."""
    raw = deep_merge(settings.model_dump(mode="json"), patch)
    try:
        patched = Settings.model_validate_json(json.dumps(raw), strict=True)
    except ValidationError as exc:
        raise ConfigError([f"{settings.env_name}: {line}" for line in _pydantic_lines(exc)]) from None
    return patched, check(patched)


def check(settings: Settings) -> list[str]:
    """Run the cross-field rules on already-parsed settings (also after CLI overrides):
    raise ConfigError on errors, return the warnings."""
    env = settings.env_name
    errors, warnings = _cross_checks(settings)
    warnings = [f"{env}: {line}" for line in warnings]
    if errors:
        raise ConfigError([f"{env}: {line}" for line in errors], warnings)
    return warnings


# --------------------------------------------------------------------------- error text


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel inside an annotation like Optional[tuple[Team, ...]]."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _allowed_keys(loc: tuple) -> list[str]:
    model: type[BaseModel] | None = Settings
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        model = _model_of(field.annotation) if field else None
    return sorted(k for k in (model.model_fields if model else {}) if k != "env_name")


def _path(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _pydantic_lines(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors(include_url=False):
        # Drop pydantic's tagged-union/function markers so the path is the config path.
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))
        path = _path(loc) or "(root)"
        if err["type"] == "extra_forbidden":
            lines.append(f"{path}: unknown field; allowed here: {', '.join(_allowed_keys(loc))}")
        elif err["type"] == "missing":
            lines.append(f"{path}: required field is missing")
        elif err["type"] == "string_pattern_mismatch":
            lines.append(f"{path}: {_short(err.get('input'))} is invalid: {_PATTERN_WORDS.get(loc[-1], 'does not have the expected form')}")
        elif err["type"] == "string_type" and isinstance(err.get("input"), float):
            lines.append(f"{path}: {err['input']!r} is a number; write it in quotes (\"1.30\" as a number reads 1.3)")
        else:
            lines.append(f"{path}: {_short(err.get('input'))} is invalid: {err['msg']}")
    return lines


# What each pattern-checked field allows, in words (pydantic would print the regex).
_PATTERN_WORDS = {
    "version": "must be a Kubernetes minor version in quotes, like \"1.33\"",
    "revision": "must be a full 40-character git commit SHA",
    "saml_metadata_url": "must be an https:// URL",
    "training_plan_arn": "must be a SageMaker training plan ARN, arn:aws:sagemaker:<region>:<account>:training-plan/<name>",
    "subnet_id": "must be a subnet ID, subnet-0123456789abcdef0",
    "route_table_id": "must be a route table ID, rtb-0123456789abcdef0",
    "vpc_id": "must be a VPC ID, vpc-0123456789abcdef0",
    "account": "must be a 12-digit AWS account ID",
    "region": "must be an AWS region name, like us-east-1",
    "prefix": "must start with a lowercase letter, then lowercase letters, digits and hyphens, at most 20 characters",
}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --------------------------------------------------------------------------- cross checks


class _Problems:
    def __init__(self):
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def error(self, path: str, value: Any, allowed: str):
        self.errors.append(f"{path}: {_short(value)} {allowed}")

    def warn(self, line: str):
        self.warnings.append(line)


def _cross_checks(s: Settings) -> tuple[list[str], list[str]]:
    p = _Problems()
    _check_names(s, p)
    _check_region(s, p)
    _check_network(s, p)
    _check_eks(s, p)
    _check_instance_groups(s, p)
    _check_autoscaling(s, p)
    _check_fsx(s, p)
    _check_addons(s, p)
    _check_chart(s, p)
    _check_governance(s, p)
    _check_sample_job(s, p)
    return p.errors, p.warnings


def _duplicates(values) -> list:
    seen, dups = set(), []
    for v in values:
        if v in seen and v not in dups:
            dups.append(v)
        seen.add(v)
    return dups


def _check_names(s: Settings, p: _Problems):
    for suffix in naming.STACK_SUFFIXES:
        name = s.stack_name(suffix)
        if not naming.STACK_NAME.match(name):
            p.error("prefix", s.prefix, f"makes stack name {name!r}, which breaks the CloudFormation stack-name pattern")
    if not naming.K8S_LABEL.match(s.env_name) or len(s.env_name) > 20:
        p.error("env", s.env_name, "must be lowercase letters, digits and hyphens, at most 20 characters")
    eks_name = s.eks_cluster_name
    if not naming.EKS_CLUSTER_NAME.match(eks_name):
        p.error("eks.cluster_name", eks_name, "must match [0-9A-Za-z][A-Za-z0-9-_]*, 1-100 characters")
    hp_name = s.hyperpod_cluster_name
    if not naming.SAGEMAKER_NAME.match(hp_name):
        p.error(
            "hyperpod.cluster_name", hp_name, "must be 1-63 letters, digits and hyphens, starting and ending alphanumeric"
        )
    for kind, bucket in (("lifecycle", s.lifecycle_bucket_name), ("checkpoint", s.checkpoint_bucket_name)):
        if not naming.S3_BUCKET.match(bucket):
            p.error("prefix", s.prefix, f"with env {s.env_name!r} makes {kind} bucket {bucket!r}, over S3's 63 characters")
    # SageMaker's tag rules are the strictest of the services tagged (its CloudFormation schema).
    tag = cfn_schema.definition("AWS::SageMaker::Cluster", "Tag")["properties"]
    for key, value in s.tags.items():
        if key.lower().startswith("aws:") or not cfn_schema.matches(tag["Key"], key):
            p.error("tags", key, f"is not a tag key SageMaker accepts: {cfn_schema.describe(tag['Key'])}, not starting 'aws:'")
        elif not cfn_schema.matches(tag["Value"], value):
            p.error(f"tags.{key}", value, f"is not a tag value SageMaker accepts: {cfn_schema.describe(tag['Value'])}; letters, digits, spaces and _ . : / = + - @")


def _check_region(s: Settings, p: _Problems):
    """Every resource type this config creates must exist in the region (cfn-lint's
    per-region CloudFormation schemas)."""
    if not cfn_schema.known_region(s.region):
        p.error("region", s.region, "is not an AWS region CloudFormation knows (per cfn-lint's region list)")
        return
    wanted = ["AWS::EKS::Cluster", "AWS::SageMaker::Cluster"]
    if s.governance.teams:
        wanted += ["AWS::SageMaker::ClusterSchedulerConfig", "AWS::SageMaker::ComputeQuota"]
    if s.addons.observability.enabled:
        wanted.append("AWS::APS::Workspace")
        if s.addons.observability.grafana.enabled:
            wanted.append("AWS::Grafana::Workspace")
    missing = [t for t in wanted if not cfn_schema.region_has(s.region, t)]
    if missing:
        p.error("region", s.region, f"has no {', '.join(missing)} in CloudFormation; choose a region that offers them")


def _az_checks(s: Settings, p: _Problems):
    for i, az in enumerate(s.availability_zones):
        if not (az.startswith(s.region) and re.fullmatch(r"[a-z]", az[len(s.region) :])):
            p.error(f"availability_zones[{i}]", az, f"must be a zone of region {s.region}, like {s.region}a")
    for az in _duplicates(s.availability_zones):
        p.error("availability_zones", az, "is listed twice")
    ids = s.availability_zone_ids
    if ids is not None and len(ids) != len(s.availability_zones):
        p.error("availability_zone_ids", list(ids), f"needs one zone ID per availability zone ({len(s.availability_zones)}), same order")
    for i, zid in enumerate(ids or ()):
        if not re.fullmatch(r"[a-z]{2,5}\d-az\d+", zid):
            p.error(f"availability_zone_ids[{i}]", zid, "is not a zone ID like use1-az4")


def _planned_primary_subnets(s: Settings) -> list[ipaddress.IPv4Network] | None:
    """The subnets ec2.Vpc allocates from vpc_cidr: public then private, one per AZ, in order."""
    net = s.network
    cursor = int(net.vpc_cidr.network_address)
    planned = []
    for mask in [net.public_subnet_mask] * len(s.availability_zones) + [net.private_subnet_mask] * len(
        s.availability_zones
    ):
        size = 2 ** (32 - mask)
        cursor = (cursor + size - 1) // size * size
        subnet = ipaddress.IPv4Network((cursor, mask))
        if not subnet.subnet_of(net.vpc_cidr):
            return None
        planned.append(subnet)
        cursor += size
    return planned


# EKS's max-pods guidance for the VPC CNI: 110 pods per node under 30 vCPUs, 250 above.
# Each pod takes an address of its node's subnet; AWS keeps 5 addresses of every subnet.
SUBNET_RESERVED = 5


def _max_pods(vcpus: int) -> int:
    return 110 if vcpus < 30 else 250


def _check_subnet_capacity(s: Settings, p: _Problems):
    """Each node needs an address, and each of its pods another, from its HyperPod subnet."""
    default_az = s.network.hyperpod_subnets[0].availability_zone if s.network.hyperpod_subnets else None
    for i, sn in enumerate(s.network.hyperpod_subnets):
        if sn.cidr is None:
            continue  # an existing subnet: its free addresses are the account's to know (preflight)
        groups = [g for g in s.hyperpod.instance_groups if (g.availability_zone or default_az) == sn.availability_zone]
        known = [g for g in groups if catalogue.lookup(g.instance_type)]
        usable = sn.cidr.num_addresses - SUBNET_RESERVED
        nodes = sum(g.ceiling for g in groups)
        at_density = sum(g.ceiling * (1 + _max_pods(g.spec.vcpus)) for g in known)
        if nodes > usable:
            p.error(f"network.hyperpod_subnets[{i}].cidr", str(sn.cidr), f"has {usable} usable addresses for {nodes} nodes")
        elif at_density > usable:
            p.warn(
                f"network.hyperpod_subnets[{i}].cidr: {sn.cidr} has {usable} usable addresses; its {nodes} nodes at EKS's "
                f"max-pods density need {at_density}; pods beyond that stay Pending"
            )


def _check_network(s: Settings, p: _Problems):
    _az_checks(s, p)
    _check_subnet_capacity(s, p)
    net = s.network
    if net.existing_vpc and net.nat_gateways is not None:
        p.error("network.nat_gateways", net.nat_gateways, "must be left out with existing_vpc: that VPC brings its own routes and no NAT gateway is created")
    elif net.nat_count > len(s.availability_zones):
        p.error("network.nat_gateways", net.nat_gateways, f"must be at most the number of AZs ({len(s.availability_zones)})")
    if isinstance(net.interface_endpoints, tuple):
        for i, service in enumerate(net.interface_endpoints):
            if service not in ENDPOINT_SERVICES:
                p.error(f"network.interface_endpoints[{i}]", service, f"is not a service the platform calls; choose from: {', '.join(ENDPOINT_SERVICES)}")
        for service in _duplicates(net.interface_endpoints):
            p.error("network.interface_endpoints", service, "is listed twice")
    if net.closed:
        missing = [svc for svc in ENDPOINT_SERVICES if svc not in net.endpoint_services]
        if missing:
            p.error("network.nat_gateways", 0, f'leaves the nodes no way to {", ".join(missing)}; set network.interface_endpoints to "all" (or add a NAT gateway)')
        elif s.eks.endpoint_access == "public":
            p.error("eks.endpoint_access", "public", "is unreachable from a network without NAT; use 'private' or 'public_and_private'")
        else:
            p.warn(
                "network.nat_gateways: 0 - no internet access: the chart's images are copied into ECR at deploy, the "
                "sample job reads its text and tokenizer from /fsx, and the training image is built and pushed from "
                "the machine that runs cdk deploy"
            )
    for az in _duplicates(sn.availability_zone for sn in net.hyperpod_subnets):
        p.error("network.hyperpod_subnets", az, "has two subnets in the same AZ; give one per AZ")
    for i, sn in enumerate(net.hyperpod_subnets):
        if sn.availability_zone not in s.availability_zones:
            p.error(
                f"network.hyperpod_subnets[{i}].availability_zone",
                sn.availability_zone,
                f"is not one of availability_zones ({', '.join(s.availability_zones)})",
            )
    if net.existing_vpc:
        _check_existing_vpc(s, p)
        return
    for i, sn in enumerate(net.hyperpod_subnets):
        if sn.cidr is None or sn.subnet_id is not None:
            p.error(f"network.hyperpod_subnets[{i}]", sn.subnet_id, "needs cidr (and no subnet_id) for a new VPC")
    if net.vpc_cidr.prefixlen > 24 or net.vpc_cidr.prefixlen < 16:
        p.error("network.vpc_cidr", str(net.vpc_cidr), "must be a /16 to /24 block (VPC size limits)")
    blocks = [net.vpc_cidr, *net.secondary_cidrs]
    for i, block in enumerate(net.secondary_cidrs):
        if not 16 <= block.prefixlen <= 28:
            p.error(f"network.secondary_cidrs[{i}]", str(block), "must be a /16 to /28 block")
        for j, other in enumerate(blocks[: i + 1]):
            if block.overlaps(other):
                where = "vpc_cidr" if j == 0 else f"secondary_cidrs[{j - 1}]"
                p.error(f"network.secondary_cidrs[{i}]", str(block), f"overlaps network.{where} ({other})")
    planned = _planned_primary_subnets(s)
    if planned is None:
        p.error(
            "network.vpc_cidr",
            str(net.vpc_cidr),
            f"is too small for {len(s.availability_zones)} public /{net.public_subnet_mask} and "
            f"{len(s.availability_zones)} private /{net.private_subnet_mask} subnets",
        )
        planned = []
    for i, sn in enumerate(net.hyperpod_subnets):
        if sn.cidr is None:
            continue
        if not any(sn.cidr.subnet_of(b) for b in blocks):
            p.error(
                f"network.hyperpod_subnets[{i}].cidr",
                str(sn.cidr),
                f"is outside the VPC CIDRs ({', '.join(map(str, blocks))})",
            )
        for used in planned:
            if sn.cidr.overlaps(used):
                p.error(
                    f"network.hyperpod_subnets[{i}].cidr",
                    str(sn.cidr),
                    f"overlaps the EKS/public subnet {used} allocated from vpc_cidr; use a secondary CIDR",
                )
                break
        for j, other in enumerate(net.hyperpod_subnets[:i]):
            if other.cidr is not None and sn.cidr.overlaps(other.cidr):
                p.error(f"network.hyperpod_subnets[{i}].cidr", str(sn.cidr), f"overlaps hyperpod_subnets[{j}]")


def _check_existing_vpc(s: Settings, p: _Problems):
    ev = s.network.existing_vpc
    n = len(s.availability_zones)
    if len(ev.private_subnet_ids) != n:
        p.error(
            "network.existing_vpc.private_subnet_ids",
            list(ev.private_subnet_ids),
            f"needs one subnet per availability zone ({n}), in the same order",
        )
    if len(ev.private_subnet_route_table_ids) != len(ev.private_subnet_ids):
        p.error(
            "network.existing_vpc.private_subnet_route_table_ids",
            list(ev.private_subnet_route_table_ids),
            "needs one route table per private subnet",
        )
    for i, sn in enumerate(s.network.hyperpod_subnets):
        if sn.subnet_id is None or sn.cidr is not None:
            p.error(f"network.hyperpod_subnets[{i}]", sn.cidr and str(sn.cidr), "needs subnet_id (and no cidr) for an existing VPC")
        elif ev.s3_gateway_endpoint and sn.route_table_id is None:
            p.error(
                f"network.hyperpod_subnets[{i}].route_table_id",
                None,
                "is required with network.existing_vpc.s3_gateway_endpoint (the endpoint's route goes into it); "
                "or set s3_gateway_endpoint false where the VPC has one",
            )


def _check_eks(s: Settings, p: _Problems):
    for a, b in _collisions(s.eks.admin_principal_arns, lambda arn: naming.admin_entry_id(arn)):
        p.error("eks.admin_principal_arns", b, f"and {a!r} differ only in punctuation, which their access entries' ids drop; list one of them")
    version = versions.parse(s.eks.version)
    if version < versions.MIN_EKS_VERSION or version > versions.MAX_EKS_VERSION:
        p.error(
            "eks.version",
            s.eks.version,
            f"is not allowed; use {versions.fmt(versions.MIN_EKS_VERSION)} to {versions.fmt(versions.MAX_EKS_VERSION)}",
        )
        return
    for line in versions.support_warnings(s.eks.version):
        p.warn(line)
    _, _, package = versions.kubectl_layer_module(s.eks.version)
    try:  # by its distribution, so validation never imports aws_cdk
        importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        p.error("eks.version", s.eks.version, f"needs the kubectl layer package: pip install {package}")
    if s.eks.endpoint_access == "private" and s.eks.public_access_cidrs not in ((), EksSettings().public_access_cidrs):
        p.error("eks.public_access_cidrs", [str(c) for c in s.eks.public_access_cidrs], "must be empty with endpoint_access 'private'")
    if not s.eks.public_access_cidrs and s.eks.endpoint_access != "private":
        p.error("eks.public_access_cidrs", [], "must list at least one CIDR for a public endpoint")
    for arn in _duplicates(s.eks.admin_principal_arns):
        p.error("eks.admin_principal_arns", arn, "is listed twice")
    if not s.eks.admin_principal_arns:
        # CloudFormation's role creates the cluster: with access entries only, nobody else
        # could run kubectl after the deploy.
        p.error(
            "eks.admin_principal_arns",
            [],
            "must name at least one IAM role or user who will run kubectl; find yours with "
            "`aws sts get-caller-identity` (for an assumed-role session, give arn:aws:iam::<account>:role/<role>)",
        )
    if s.eks.endpoint_access != "private" and any(c.prefixlen == 0 for c in s.eks.public_access_cidrs):
        # cdk-nag's EKS1/EKS2 test aws_eks.CfnCluster only and never see aws_eks_v2 clusters.
        line = (
            "the public API endpoint admits 0.0.0.0/0; name your networks' CIDRs, or set endpoint_access 'private'"
        )
        if s.protection.termination_protection:
            p.error("eks.public_access_cidrs", [str(c) for c in s.eks.public_access_cidrs], line + " (required where protection.termination_protection is on)")
        else:
            p.warn(f"eks.public_access_cidrs: {line}")
    if not s.eks.logging:
        p.warn("eks.logging: all control-plane log types are off; audit trails need at least 'audit'")


def _check_instance_groups(s: Settings, p: _Problems):
    groups = s.hyperpod.instance_groups
    hp_azs = {sn.availability_zone for sn in s.network.hyperpod_subnets}
    for name in _duplicates(g.name for g in groups):
        p.error("hyperpod.instance_groups", name, "is used by two groups; group names must be unique")
    for i, g in enumerate(groups):
        path = f"hyperpod.instance_groups[{i}]"
        if not naming.SAGEMAKER_NAME.match(g.name):
            p.error(f"{path}.name", g.name, "must be 1-63 letters, digits and hyphens, starting and ending alphanumeric")
        spec = catalogue.lookup(g.instance_type)
        if spec is None:
            p.error(f"{path}.instance_type", g.instance_type, f"is not a known HyperPod type; known: {', '.join(sorted(catalogue.CATALOGUE))}")
        ceiling = s.hyperpod.max_instances_per_group
        if g.autoscaled:
            if g.count != 0:  # "If you start with more than 0 nodes, Karpenter will scale them down to 0"
                p.error(f"{path}.count", g.count, "must be 0 for an autoscaled group: Karpenter starts it at 0 and adds nodes for pending pods")
            if g.max_count is None or not 1 <= g.max_count <= ceiling:
                p.error(f"{path}.max_count", g.max_count, f"must be 1 to {ceiling} for an autoscaled group (the NodePool's limit)")
        elif not 1 <= g.count <= ceiling:
            p.error(f"{path}.count", g.count, f"must be 1 to {ceiling} (hyperpod.max_instances_per_group)")
        elif g.max_count is not None:
            p.error(f"{path}.max_count", g.max_count, "applies only with autoscaled: true")
        if g.threads_per_core not in (1, 2):
            p.error(f"{path}.threads_per_core", g.threads_per_core, "must be 1 or 2")
        if not 1 <= g.ebs_volume_gb <= 16384:
            p.error(f"{path}.ebs_volume_gb", g.ebs_volume_gb, "must be 1 to 16384 GiB")
        if spec is not None and g.deep_health_checks and not spec.deep_health_checks:
            p.error(
                f"{path}.deep_health_checks",
                list(g.deep_health_checks),
                f"are not supported on {g.instance_type}; deep health checks run on accelerated p/trn types only",
            )
        if g.availability_zone is not None and g.availability_zone not in hp_azs:
            p.error(f"{path}.availability_zone", g.availability_zone, f"has no HyperPod subnet; subnets exist in: {', '.join(sorted(hp_azs))}")
        taint = cfn_schema.definition("AWS::SageMaker::Cluster", "ClusterKubernetesTaint")["properties"]
        for j, t in enumerate(g.taints):
            if t.key.startswith("sagemaker.amazonaws.com/"):
                p.error(f"{path}.taints[{j}].key", t.key, "is reserved for HyperPod itself")
            elif not _k8s_qualified_name(t.key, taint["Key"]):
                p.error(f"{path}.taints[{j}].key", t.key, _QUALIFIED_NAME_WORDS)
            if t.value is not None and not cfn_schema.matches(taint["Value"], t.value):
                p.error(f"{path}.taints[{j}].value", t.value, _LABEL_VALUE_WORDS)
        # Kubernetes label keys and values follow the same rules as taint keys and values
        # (HyperPod's schema spells those out; its Labels map does not).
        for key, value in g.labels.items():
            if not _k8s_qualified_name(key, taint["Key"]):
                p.error(f"{path}.labels", key, _QUALIFIED_NAME_WORDS)
            elif value and not cfn_schema.matches(taint["Value"], value):
                p.error(f"{path}.labels.{key}", value, _LABEL_VALUE_WORDS)
        _check_group_options(s, g, path, p)
        if g.training_plan_arn:
            plan_region, plan_account = g.training_plan_arn.split(":")[3:5]
            if (plan_region, plan_account) != (s.region, s.account):
                p.error(
                    f"{path}.training_plan_arn",
                    g.training_plan_arn,
                    f"is in {plan_region}/{plan_account}; a training plan serves clusters of its own region and account ({s.region}/{s.account})",
                )


def _check_group_options(s: Settings, g: InstanceGroup, path: str, p: _Problems) -> None:
    """The AWS::SageMaker::Cluster options beyond type and count, against the schema's own rules."""
    if g.min_count is not None and not 0 <= g.min_count <= g.count:
        p.error(f"{path}.min_count", g.min_count, f"must be 0 to count ({g.count})")
    if g.image_id is not None and not cfn_schema.matches(cfn_schema.definition("AWS::SageMaker::Cluster", "ImageId"), g.image_id):
        p.error(f"{path}.image_id", g.image_id, "must be an AMI id like ami-0123456789abcdef0")
    if g.capacity == "spot" and g.training_plan_arn:
        p.error(f"{path}.capacity", "spot", "cannot use a training plan (reserved capacity); drop one of them")
    spec = catalogue.lookup(g.instance_type)
    limit = cfn_schema.definition("AWS::SageMaker::Cluster", "InstanceRequirements")["properties"]["InstanceTypes"]["maxItems"]
    if len(g.alternative_instance_types) + 1 > limit:
        p.error(f"{path}.alternative_instance_types", list(g.alternative_instance_types), f"with instance_type makes more than {limit} types")
    for j, other in enumerate(g.alternative_instance_types):
        alt = catalogue.lookup(other)
        where = f"{path}.alternative_instance_types[{j}]"
        if alt is None:
            p.error(where, other, "is not a known HyperPod type")
        elif other == g.instance_type or other in g.alternative_instance_types[:j]:
            p.error(where, other, "is listed twice")
        elif spec is not None and (alt.accelerators, alt.accelerator_resource) != (spec.accelerators, spec.accelerator_resource):
            p.error(where, other, f"has {alt.accelerators} x {alt.accelerator_resource}, {g.instance_type} {spec.accelerators}: a job sized for one must fit the other")
    if g.scheduled_update is not None:
        update = g.scheduled_update
        rule = cfn_schema.definition("AWS::SageMaker::Cluster", "ScheduledUpdateConfig")["properties"]["ScheduleExpression"]
        if not cfn_schema.matches(rule, update.schedule):
            p.error(f"{path}.scheduled_update.schedule", update.schedule, "must be cron(minutes hours day-of-month month day-of-week year), e.g. cron(0 3 ? * SUN *)")
        for name, batch in (("batch", update.batch), ("rollback_batch", update.rollback_batch)):
            if batch is not None and batch.unit == "percent" and batch.value > 100:
                p.error(f"{path}.scheduled_update.{name}.value", batch.value, "must be 1 to 100 percent")
    if g.autoscaled:
        if s.hyperpod.autoscaling != "karpenter":
            p.error(f"{path}.autoscaled", True, 'needs hyperpod.autoscaling "karpenter"')
        # HyperPod's NodeClass page: groups with deep health checks or a training plan are not supported.
        if g.deep_health_checks:
            p.error(f"{path}.deep_health_checks", list(g.deep_health_checks), "are not supported on an autoscaled group (they take 60-90 minutes while pods wait)")
        if g.training_plan_arn:
            p.error(f"{path}.training_plan_arn", g.training_plan_arn, "is not supported on an autoscaled group (On-Demand or Spot only)")


def _check_fsx(s: Settings, p: _Problems) -> None:
    fsx = s.fsx
    if not fsx.enabled:
        return
    if fsx.existing is None:
        if fsx.storage_gib not in (1200, 2400) and (fsx.storage_gib < 2400 or fsx.storage_gib % 2400):
            p.error("fsx.storage_gib", fsx.storage_gib, "must be 1200, 2400 or a multiple of 2400 GiB (PERSISTENT_2 SSD)")
        if fsx.throughput_per_tib not in FSX_THROUGHPUTS:
            p.error("fsx.throughput_per_tib", fsx.throughput_per_tib, f"must be one of {', '.join(map(str, FSX_THROUGHPUTS))} MB/s/TiB (PERSISTENT_2)")
    elif fsx.existing.file_system_id not in fsx.existing.dns_name:
        p.error("fsx.existing.dns_name", fsx.existing.dns_name, f"is not the DNS name of {fsx.existing.file_system_id}")
    hp_azs = [sn.availability_zone for sn in s.network.hyperpod_subnets]
    if fsx.availability_zone is not None and fsx.availability_zone not in hp_azs:
        p.error("fsx.availability_zone", fsx.availability_zone, f"has no HyperPod subnet; subnets exist in: {', '.join(hp_azs)}")
    if not s.addons.fsx_csi.enabled:
        p.error("addons.fsx_csi.enabled", False, "must be on with fsx.enabled: pods mount the file system through the CSI driver")


def _check_autoscaling(s: Settings, p: _Problems) -> None:
    groups = s.hyperpod.instance_groups
    scaled = [g.name for g in groups if g.autoscaled]
    if s.hyperpod.autoscaling == "karpenter":
        if not scaled:
            p.error("hyperpod.autoscaling", "karpenter", "needs at least one instance group with autoscaled: true")
        if len(scaled) > 10:  # HyperPod's NodeClass page: up to 10 instance groups
            p.error("hyperpod.instance_groups", scaled, "more than 10 autoscaled groups; a HyperpodNodeClass names at most 10")
        if not any(g.count > 0 for g in groups):
            p.error("hyperpod.instance_groups", [g.name for g in groups], "need one group with count >= 1 that is not autoscaled, for cert-manager and the add-ons' controllers")
        if s.hyperpod.continuous_provisioning is False and "continuous_provisioning" in s.hyperpod.model_fields_set:
            p.error("hyperpod.continuous_provisioning", False, 'must be true (or left out) with autoscaling "karpenter", which is built on it')


_QUALIFIED_NAME_WORDS = (
    "is not a Kubernetes label/taint key: an optional DNS-subdomain prefix and '/', then a name of at most 63 "
    "letters, digits, '-', '_' and '.', starting and ending alphanumeric"
)
_LABEL_VALUE_WORDS = "is not a Kubernetes label/taint value: at most 63 letters, digits, '-', '_' and '.', starting and ending alphanumeric"


def _k8s_qualified_name(key: str, rule: dict) -> bool:
    """The schema's key pattern, plus Kubernetes' 63-character limit on the name after the
    prefix (apimachinery IsQualifiedName), which a single pattern cannot say."""
    return cfn_schema.matches(rule, key) and len(key.rsplit("/", 1)[-1]) <= 63


def _collisions(values, key) -> list[tuple[Any, Any]]:
    """Pairs of distinct values with the same key (e.g. the construct id they become)."""
    seen: dict[Any, Any] = {}
    pairs = []
    for value in values:
        k = key(value)
        if k in seen and seen[k] != value:
            pairs.append((seen[k], value))
        seen.setdefault(k, value)
    return pairs


def _check_addons(s: Settings, p: _Problems):
    a = s.addons
    if a.observability.enabled:
        big = [
            g.name
            for g in s.hyperpod.instance_groups
            if catalogue.lookup(g.instance_type) and g.spec.vcpus >= catalogue.OBSERVABILITY_MIN_VCPUS
        ]
        if not big:
            p.error(
                "addons.observability.enabled",
                True,
                "needs an instance group of 4xlarge (16 vCPUs) or larger for its collectors; add one or turn it off",
            )
        grafana = a.observability.grafana
        if grafana.enabled and "AWS_SSO" in grafana.authentication_providers:
            p.warn(
                "addons.observability.grafana.authentication_providers: AWS_SSO needs IAM Identity Center enabled in "
                f"{s.region} for this account (an organization instance); without it the Grafana workspace fails to create"
            )
        if grafana.enabled and "SAML" in grafana.authentication_providers and not grafana.saml_metadata_url:
            p.error(
                "addons.observability.grafana.saml_metadata_url",
                None,
                "is required when Grafana authenticates with SAML (the identity provider's metadata URL)",
            )
    elif a.observability.grafana.enabled:
        p.error("addons.observability.grafana.enabled", True, "needs addons.observability.enabled (Grafana reads its Prometheus workspace)")
    tg, to = a.task_governance, a.training_operator
    if tg.enabled and to.enabled and tg.version and not versions.addon_version_at_least(
        tg.version, versions.TASK_GOVERNANCE_MIN_FOR_TRAINING_OPERATOR
    ):
        p.error(
            "addons.task_governance.version",
            tg.version,
            f"is refused by the training operator; use {versions.TASK_GOVERNANCE_MIN_FOR_TRAINING_OPERATOR} or newer",
        )
    if s.topology.mode != "none" and tg.enabled and tg.version and not versions.addon_version_at_least(
        tg.version, versions.TASK_GOVERNANCE_MIN_FOR_TOPOLOGY
    ):
        p.error(
            "addons.task_governance.version",
            tg.version,
            f"is too old for topology-aware scheduling; use {versions.TASK_GOVERNANCE_MIN_FOR_TOPOLOGY} or newer",
        )


def _check_chart(s: Settings, p: _Problems):
    """What the dependencies chart can and cannot pull where its images are copied into ECR."""
    from infra import chart

    source = s.hyperpod.helm_chart
    if source.docker_hub_secret and not s.mirrors_chart_images:
        p.error("hyperpod.helm_chart.docker_hub_secret", source.docker_hub_secret, "applies only where the chart's images are copied (mirror_images)")
    if not s.mirrors_chart_images:
        return
    why = "copied into ECR (no NAT)" if source.mirror_images is None else "copied into ECR (mirror_images)"
    for image in chart.CHART_IMAGES:
        if image.keys or image.serves not in s.device_resources:
            continue
        groups = [g.name for g in s.hyperpod.instance_groups if catalogue.lookup(g.instance_type) and image.serves in g.spec.device_resources]
        p.error(
            "hyperpod.instance_groups",
            groups,
            f"need the chart's {image.subchart}, whose image {image.source} is written into its template ({image.where}) "
            f"and cannot be pointed at a copy while the chart's images are {why}; give the network a NAT gateway",
        )


def _check_governance(s: Settings, p: _Problems):
    g = s.governance
    if len(g.priority_classes) > 10:
        p.error("governance.priority_classes", len(g.priority_classes), "entries; at most 10 are allowed")
    for name in _duplicates(pc.name for pc in g.priority_classes):
        p.error("governance.priority_classes", name, "is defined twice")
    for i, pc in enumerate(g.priority_classes):
        if not 0 <= pc.weight <= 100:
            p.error(f"governance.priority_classes[{i}].weight", pc.weight, "must be 0 to 100")
        if not naming.K8S_LABEL.match(naming.priority_class_name(pc.name)) or len(naming.priority_class_name(pc.name)) > naming.K8S_LABEL_MAX:
            p.error(f"governance.priority_classes[{i}].name", pc.name, "must be lowercase letters, digits and hyphens (it becomes <name>-priority)")
    if (g.teams or g.priority_classes) and not s.addons.task_governance.enabled:
        p.error("addons.task_governance.enabled", False, "must be true when governance.teams or priority_classes are set")
    capacity = s.capacity()
    for name in _duplicates(t.name for t in g.teams):
        p.error("governance.teams", name, "is defined twice")
    for a, b in _collisions([t.name for t in g.teams], naming.construct_key):
        p.error("governance.teams", b, f"and {a!r} differ only in punctuation, which CloudFormation logical ids drop; rename one")
    demand: dict[str, list[tuple[str, int]]] = {}
    for i, team in enumerate(g.teams):
        path = f"governance.teams[{i}]"
        names = naming.team_names(team.name)
        if not naming.SAGEMAKER_NAME.match(team.name) or not naming.K8S_LABEL.match(team.name) or len(names.cluster_queue) > naming.K8S_LABEL_MAX:
            p.error(
                f"{path}.name",
                team.name,
                f"must be lowercase letters, digits and hyphens, short enough that {names.cluster_queue!r} is at most 63 characters",
            )
        quota_name = f"{s.prefix}-{s.env_name}-{team.name}"
        if not naming.SAGEMAKER_NAME.match(quota_name):
            p.error(f"{path}.name", team.name, f"makes compute-quota name {quota_name!r}, longer than 63 characters")
        if team.borrow_limit is not None and team.sharing != "LendAndBorrow":
            p.error(f"{path}.borrow_limit", team.borrow_limit, "applies only with sharing 'LendAndBorrow'")
        if team.borrow_limit is not None and not 1 <= team.borrow_limit <= 500:
            p.error(f"{path}.borrow_limit", team.borrow_limit, "must be 1 to 500 (percent of the team's quota)")
        for itype in _duplicates(q.instance_type for q in team.quotas):
            p.error(f"{path}.quotas", itype, "is listed twice in one team's quota; SageMaker takes one entry per instance type")
        for j, q in enumerate(team.quotas):
            qpath = f"{path}.quotas[{j}]"
            if q.instance_type not in capacity:
                p.error(f"{qpath}.instance_type", q.instance_type, f"is provided by no instance group; groups have: {', '.join(sorted(capacity))}")
                continue
            if (q.count is None) == (q.accelerators is None):
                p.error(qpath, q.model_dump(exclude_none=True), "needs exactly one of count or accelerators")
                continue
            spec = catalogue.lookup(q.instance_type)
            have = capacity[q.instance_type]
            asked = q.count if q.count is not None else -(-q.accelerators // max(spec.accelerators, 1))
            if (q.count is not None and q.count < 1) or (q.accelerators is not None and q.accelerators < 1):
                p.error(qpath, q.model_dump(exclude_none=True), "must ask for at least 1")
            elif q.accelerators is not None and not spec.accelerators:
                p.error(f"{qpath}.accelerators", q.accelerators, f"but {q.instance_type} has no accelerators; use count")
            elif asked > have:
                p.error(qpath, q.model_dump(exclude_none=True), f"is more than the cluster's {have} x {q.instance_type}")
            else:
                demand.setdefault(q.instance_type, []).append((team.name, asked))
    for itype, asks in demand.items():
        total = sum(n for _, n in asks)
        if total > capacity[itype]:
            teams = ", ".join(t for t, _ in asks)
            line = f"governance.teams: quotas for {itype} add up to {total}, above the cluster's {capacity[itype]} (teams: {teams})"
            if g.allow_oversubscription:
                p.warn(line + "; allowed by governance.allow_oversubscription")
            else:
                p.errors.append(line + "; set governance.allow_oversubscription to intend it")
    t = s.topology
    if t.level not in TOPOLOGY_LEVELS:
        p.error("topology.level", t.level, f"is not a topology level; allowed: {', '.join(TOPOLOGY_LEVELS)}")
    if t.mode != "none" and t.level == "topology.k8s.aws/ultraserver-id":
        for i, grp in enumerate(s.hyperpod.instance_groups):
            spec = catalogue.lookup(grp.instance_type)
            if spec and spec.is_accelerated and not spec.ultraserver:
                line = f"{grp.instance_type} (hyperpod.instance_groups[{i}]) is not an UltraServer type, so its nodes have no ultraserver-id label"
                if t.mode == "required":
                    p.error("topology.level", t.level, f"is required but {line}; use a network-node layer")
                else:
                    p.warn(f"topology.level: {t.level} is preferred but {line}; jobs are placed without it")
    if t.mode == "required":
        for i, grp in enumerate(s.hyperpod.instance_groups):
            spec = catalogue.lookup(grp.instance_type)
            if spec and spec.is_accelerated and not spec.topology:
                p.error(
                    "topology.mode",
                    "required",
                    f"but hyperpod.instance_groups[{i}] ({grp.instance_type}) has no EC2 topology labels; use 'preferred'",
                )


def _check_sample_job(s: Settings, p: _Problems):
    job = s.sample_job
    if not job.enabled:
        return
    group = s.instance_group(job.instance_group)
    if group is None:
        p.error(
            "sample_job.instance_group",
            job.instance_group,
            f"is not an instance group; groups: {', '.join(g.name for g in s.hyperpod.instance_groups)}",
        )
    elif job.nodes > group.ceiling:
        p.error("sample_job.nodes", job.nodes, f"is more than instance group {group.name!r} can have ({group.ceiling})")
    elif catalogue.lookup(group.instance_type) and not group.spec.is_accelerated:
        p.error("sample_job.instance_group", job.instance_group, f"is {group.instance_type}, which has no GPUs")
    elif catalogue.lookup(group.instance_type):
        spec = group.spec
        if job.gpus_per_node is not None and job.gpus_per_node != spec.accelerators:
            p.error("sample_job.gpus_per_node", job.gpus_per_node, f"does not match {spec.name}, which has {spec.accelerators}")
        if job.efa_per_node is not None and job.efa_per_node != spec.efa_interfaces:
            p.error("sample_job.efa_per_node", job.efa_per_node, f"does not match {spec.name}, which has {spec.efa_interfaces} EFA interfaces")
    team_names = [t.name for t in s.governance.teams]
    if job.team is not None and job.team not in team_names:
        p.error("sample_job.team", job.team, f"is not a team; teams: {', '.join(team_names) or '(none)'}")
    priorities = [pc.name for pc in s.governance.priority_classes]
    if job.priority is not None and job.priority not in priorities:
        p.error("sample_job.priority", job.priority, f"is not a priority class; classes: {', '.join(priorities) or '(none)'}")
    if not s.addons.training_operator.enabled:
        p.error("sample_job.enabled", True, "needs addons.training_operator.enabled (the job is a HyperPodPyTorchJob)")
    if not naming.K8S_LABEL.match(job.name) or len(job.name) > naming.K8S_LABEL_MAX:
        p.error("sample_job.name", job.name, "must be a Kubernetes name: lowercase letters, digits and hyphens, at most 63 characters")
    if job.checkpoint_interval_steps > job.max_steps:
        # Fine for a short smoke run; a long one would be restarted by CheckpointCadence.
        p.warn(
            f"sample_job.checkpoint_interval_steps: {job.checkpoint_interval_steps} is more than max_steps "
            f"({job.max_steps}): the only checkpoint is the last, so a run longer than "
            "30 minutes is restarted by the CheckpointCadence rule"
        )
    if group is not None and catalogue.lookup(group.instance_type) and group.spec.accelerator_resource != "nvidia.com/gpu" and group.spec.is_accelerated:
        p.error(
            "sample_job.instance_group",
            job.instance_group,
            f"is {group.instance_type} ({group.spec.accelerator}); the sample job's image is CUDA PyTorch, which needs NVIDIA GPUs",
        )
    if job.checkpoint_to == "local" and job.nodes > 1:
        p.error(
            "sample_job.checkpoint_to",
            "local",
            f"must be s3 or fsx with {job.nodes} nodes: each node's NVMe holds only its own ranks' shards, so no node could resume",
        )
    if s.network.closed:
        # Nothing reaches Hugging Face from a network without NAT.
        if not job.dataset.files:
            p.error("sample_job.dataset.files", [], f"must name text under {naming.FSX_MOUNT}/: a network without NAT cannot stream {job.dataset.name} from Hugging Face")
        if not job.tokenizer.startswith(naming.FSX_MOUNT + "/"):
            p.error("sample_job.tokenizer", job.tokenizer, f"cannot be downloaded in a network without NAT; save it under {naming.FSX_MOUNT}/ (tokenizer.save_pretrained) and give that path")
    for i, path in enumerate(job.dataset.files):
        if not s.fsx.enabled or not path.startswith(naming.FSX_MOUNT + "/"):
            p.error(f"sample_job.dataset.files[{i}]", path, f"must be a path under {naming.FSX_MOUNT}/ with fsx.enabled (the claim the job mounts)")
    if job.checkpoint_to == "fsx" and not s.fsx.enabled:
        p.error("sample_job.checkpoint_to", "fsx", "needs fsx.enabled (the shared file system the job mounts)")
    if job.tokenizer.startswith("meta-llama/") and not job.hf_token_secret:
        p.error(
            "sample_job.hf_token_secret",
            None,
            f"is required: {job.tokenizer} is gated on Hugging Face; store your token with `aws secretsmanager "
            f"create-secret --name {s.prefix}/{s.env_name}/hf-token --secret-string <token>` and name that secret here",
        )
    if job.hf_token_secret is not None:
        # AWS::SecretsManager::Secret Name: its schema's length, and the characters its description allows.
        rule = cfn_schema.resource("AWS::SecretsManager::Secret")["properties"]["Name"]
        if not (1 <= len(job.hf_token_secret) <= rule["maxLength"] and re.fullmatch(r"[A-Za-z0-9/_+=.@-]+", job.hf_token_secret)):
            p.error("sample_job.hf_token_secret", job.hf_token_secret, f"is not a Secrets Manager secret name: 1-{rule['maxLength']} ASCII letters, digits and /_+=.@-")
        elif re.search(r"-[A-Za-z0-9]{6}$", job.hf_token_secret):
            p.error("sample_job.hf_token_secret", job.hf_token_secret, "ends in a hyphen and six characters, which Secrets Manager reads as an ARN suffix; give the name without it")
    if job.model == "llama3.1-8b" and not job.tokenizer.startswith("meta-llama/Llama-3"):
        p.warn(
            f"sample_job.tokenizer: {job.tokenizer} is not the LLaMA 3 tokenizer, so the 8B model's 128,256-row "
            "embedding shrinks to its vocabulary; for the real model name meta-llama/Llama-3.1-8B and hf_token_secret"
        )


def field_paths(model: type[BaseModel] | None = None, prefix: str = "") -> list[tuple[str, Any]]:
    """Every config field as (dotted path, default), nested models expanded; for the README."""
    out = []
    for name, field in (model or Settings).model_fields.items():
        if name == "env_name":
            continue
        path = f"{prefix}{name}"
        default = "(required)" if field.is_required() else field.get_default()
        nested = _model_of(field.annotation)
        if nested is None:
            out.append((path, default))
            continue
        is_list = "tuple" in str(field.annotation)
        if is_list or default is None:
            out.append((path, default))
        out += field_paths(nested, f"{path}[]." if is_list else f"{path}.")
    return out
