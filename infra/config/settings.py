"""The root of one environment's settings and the names derived from it (the checks that span
the whole config, names and region, read it from infra/checks/settings.py)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from infra import catalogue, hyperpod_chart, naming
from infra.config.base import Model
from infra.config.network import NetworkSettings
from infra.config.eks import EksSettings
from infra.config.hyperpod import HyperPodSettings, InstanceGroup
from infra.config.addons import AddonsSettings
from infra.config.governance import GovernanceSettings, TopologySettings
from infra.config.storage import FsxSettings
from infra.config.sample_job import SampleJobSettings
from infra.config.acceptance import AcceptanceSettings
from infra.config.operations import OperationsSettings
from infra.config.delivery import DeliverySettings


class ProtectionSettings(Model):
    termination_protection: bool = Field(default=True, description="Termination protection on every stack.")
    retain_data: bool = Field(
        default=True,
        description="Keep buckets, keys, log groups and the Prometheus workspace when a stack is deleted; `false` destroys "
        "them (dev). The EKS and HyperPod clusters are never kept (docs/deploying.md, Tearing down).",
    )
    log_retention_days: Literal[
        1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653
    ] = Field(default=365, description="Retention of every log group, in days (a value CloudWatch Logs allows).")


class Settings(Model):
    env_name: str = Field(description="The environment's name (-c env=NAME); not a cdk.json field.")
    account: str = Field(
        pattern=r"^\d{12}$", description="AWS account ID the stacks deploy into; replace the example `111111111111` with yours."
    )
    region: str = Field(
        pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$",
        description="AWS region; it must offer HyperPod and every type the config creates (task governance's scheduler "
        "config and quotas among them): `validate` warns of one cfn-lint's region list lacks, `preflight` asks CloudFormation.",
    )
    availability_zones: tuple[str, ...] = Field(
        min_length=2, max_length=6, description="Zones of `region`, given explicitly so synth needs no lookups."
    )
    availability_zone_ids: Optional[tuple[str, ...]] = Field(
        default=None,
        description="The zone IDs (e.g. `use1-az4`) the names must map to in your account, which `preflight` checks: names "
        "are shuffled per account, IDs are not, and GPU capacity is bought per zone ID.",
    )
    prefix: str = Field(pattern=r"^[a-z][a-z0-9-]{0,19}$", description="Name prefix; stacks are `<prefix>-<env>-<stack>`.")
    tags: dict[str, str] = Field(default={}, description="Tags on every resource, beside `project` and `environment`.")
    protection: ProtectionSettings = Field(
        default=ProtectionSettings(),
        description="What a stack delete may take with it: safe values by default, which dev trades for cost.",
    )
    network: NetworkSettings = Field(description="The VPC (a new one, or `existing_vpc`), its subnets, NAT and interface endpoints.")
    eks: EksSettings = Field(
        default=EksSettings(),
        description="The EKS control plane (a new one, or `existing_cluster`), its access and its core add-ons.",
    )
    hyperpod: HyperPodSettings = Field(
        description="The `AWS::SageMaker::Cluster` the EKS cluster orchestrates: its instance groups, autoscaling, and the "
        "dependencies chart installed before its nodes.",
    )
    addons: AddonsSettings = Field(
        default=AddonsSettings(),
        description="The EKS add-ons of the addons stack, installed in the order their requirements set (`addons/registry.py`); the "
        "core add-ons are `eks.core_addons`.",
    )
    governance: GovernanceSettings = Field(
        default=GovernanceSettings(),
        description="Task governance's scheduler config (priority classes, fair share) and one compute quota per team "
        "(docs/governance.md).",
    )
    topology: TopologySettings = Field(
        default=TopologySettings(),
        description="Topology-aware scheduling: the annotation jobs carry on their pod template.",
    )
    fsx: FsxSettings = Field(
        default=FsxSettings(),
        description="Shared storage: FSx for Lustre, new or existing, mounted in every team's namespace as the claim `fsx`.",
    )
    sample_job: SampleJobSettings = Field(
        description="The sample LLaMA FSDP `HyperPodPyTorchJob`, applied by the sample-job stack and printed by `render-job` "
        "(docs/sample-job.md).",
    )
    acceptance: AcceptanceSettings = Field(
        default=AcceptanceSettings(),
        description="What `hyperpod-cdk accept` proves on the deployed cluster, and the images it runs (docs/operations.md, "
        "Acceptance run).",
    )
    operations: OperationsSettings = Field(
        default=OperationsSettings(),
        description="The operations stack: who is told, and how, when the platform stops working (docs/operations.md).",
    )
    delivery: Optional[DeliverySettings] = Field(
        default=None,
        description="A pipeline (CDK Pipelines) that deploys the environments in waves from a repository branch, set in the "
        "one environment whose `cdk synth` builds the delivery stack (docs/delivery.md).",
    )

    # Derived names, so every consumer uses the same ones.
    @property
    def eks_cluster_name(self) -> str:
        if self.eks.existing_cluster:
            return self.eks.existing_cluster.name
        return self.eks.cluster_name or naming.default_eks_cluster_name(self.prefix, self.env_name)

    @property
    def eks_deletion_protection(self) -> bool:
        """Whether the EKS cluster refuses DeleteCluster: eks.deletion_protection, else the stacks' termination protection."""
        given = self.eks.deletion_protection
        return self.protection.termination_protection if given is None else given

    @property
    def kubeconfig_command(self) -> str:
        """The command that points kubectl at the EKS cluster (the stacks' outputs, the team kit)."""
        return f"aws eks update-kubeconfig --region {self.region} --name {self.eks_cluster_name}"

    @property
    def private_endpoint_reach(self) -> str:
        """Where the kubeconfig works when the API endpoint is private (the cluster stack's output,
        the team kit); empty where the endpoint has a public side, or the cluster is not ours."""
        if self.eks.endpoint_access != "private" or self.uses_existing_cluster:
            return ""
        # A private endpoint answers only inside the VPC: CloudShell's VPC environments (or any
        # host there) with our security group, which the control plane admits.
        return (f"from inside the VPC (stack {self.stack_name('network')}, outputs VpcId and EfaSecurityGroupId; for example "
                "an AWS CloudShell VPC environment in one of its private subnets with that security group)")

    @property
    def hyperpod_cluster_name(self) -> str:
        return self.hyperpod.cluster_name or naming.default_hyperpod_cluster_name(self.prefix, self.env_name)

    @property
    def lifecycle_bucket_name(self) -> str:
        if self.hyperpod.existing_lifecycle_bucket:
            return self.hyperpod.existing_lifecycle_bucket
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
        return {itype: kinds["count"] for itype, kinds in self.resource_capacity().items()}

    def resource_capacity(self) -> dict[str, dict[str, float]]:
        """Per instance type, what its groups hold at their ceilings, by the kinds a quota
        names: instances ("count"), whole accelerators, vCPUs, memory (GiB) and MIG slices
        ("mig-<profile>"). A group cut into slices has no whole accelerators. A kind whose
        figure no source states for the type is None (unknown, never 0); instances always count."""
        out: dict[str, dict[str, float | None]] = {}
        for g in self.hyperpod.instance_groups:
            if catalogue.lookup(g.instance_type) is None:
                continue
            spec, kinds = g.spec, out.setdefault(g.instance_type, {})
            per_node = {"count": 1, "accelerators": 0 if g.mig_slices else spec.accelerators, "vcpu": spec.vcpus, "memory_gib": spec.memory_gib}
            per_node.update({f"mig-{profile}": n for profile, n in g.mig_slices.items()})
            for kind, n in per_node.items():
                if n is None or (kind in kinds and kinds[kind] is None):
                    kinds[kind] = None
                else:
                    kinds[kind] = kinds.get(kind, 0) + n * g.ceiling
        return out

    @property
    def fsx_availability_zone(self) -> str:
        return self.fsx.availability_zone or self.network.hyperpod_subnets[0].availability_zone

    @property
    def uses_existing_vpc(self) -> bool:
        return self.network.existing_vpc is not None

    @property
    def uses_existing_cluster(self) -> bool:
        """HyperPod joins an EKS cluster this project does not create (eks.existing_cluster)."""
        return self.eks.existing_cluster is not None

    @property
    def core_addons_installed(self) -> tuple[str, ...]:
        """The eks.core_addons this deploy installs (their config keys): all four on a cluster
        of ours; on an existing one, which runs its own, the Pod Identity agent where asked."""
        ec = self.eks.existing_cluster
        if ec is None:
            return ("vpc_cni", "kube_proxy", "coredns", "pod_identity_agent")
        return ("pod_identity_agent",) if ec.install_pod_identity_agent else ()

    @property
    def regional_resource_types(self) -> list[str]:
        """The CloudFormation types this config creates whose offer varies by region (the
        clusters, task governance's two, the Prometheus and Grafana workspaces, FSx): what
        validate checks against cfn-lint's region lists, and `preflight` asks CloudFormation for."""
        wanted = ["AWS::SageMaker::Cluster"]
        if not self.uses_existing_cluster:
            wanted.insert(0, "AWS::EKS::Cluster")
        if self.governance.teams:
            wanted += ["AWS::SageMaker::ClusterSchedulerConfig", "AWS::SageMaker::ComputeQuota"]
        obs = self.addons.observability
        if obs.enabled and not obs.existing:
            wanted.append("AWS::APS::Workspace")
            if obs.grafana.enabled:
                wanted.append("AWS::Grafana::Workspace")
        if self.fsx.enabled and self.fsx.existing is None:
            wanted.append("AWS::FSx::FileSystem")
        return wanted

    @property
    def addon_pins(self) -> list[tuple[str, str, str]]:
        """(config path of the pin, EKS add-on name, pinned version) of every add-on this deploy
        installs with a pinned version: the core ones it installs and the enabled add-ons it creates."""
        from infra.config.addons import EKS_ADDON_NAMES
        from infra.config.eks import CORE_ADDON_NAMES

        core = self.eks.core_addons
        out = [(f"eks.core_addons.{key}.version", CORE_ADDON_NAMES[key], getattr(core, key).version)
               for key in self.core_addons_installed]
        for key, name in EKS_ADDON_NAMES.items():
            switch = getattr(self.addons, key)
            if switch.enabled and not switch.existing and (key != "fsx_csi" or self.fsx.enabled):
                out.append((f"addons.{key}.version", name, switch.version))
        return [pin for pin in out if pin[2]]

    def pulls_without_nat(self, image: str) -> bool:
        """Whether a network without NAT can pull `image`: only from a private ECR registry of
        this region, which its ecr.api and ecr.dkr interface endpoints serve (ECR user guide,
        interface VPC endpoints; public ECR and other regions are not served)."""
        return image.split("/", 1)[0].endswith(f".dkr.ecr.{self.region}.{hyperpod_chart.url_suffix(self.region)}")

    @property
    def mirrors_chart_images(self) -> bool:
        asked = self.hyperpod.helm_chart.mirror_images
        return asked if asked is not None else self.network.closed

    @property
    def device_resources(self) -> set[str]:
        """The extended resources some instance group's nodes advertise (accelerators, EFA)."""
        return {r for g in self.hyperpod.instance_groups if catalogue.figures(g.instance_type) for r in g.device_resources}

    @property
    def gpu_operator(self) -> bool:
        """The chart's GPU operator runs (some group is cut into MIG slices); it then serves
        every NVIDIA node, and the chart's plain device plugin stays off."""
        return any(g.mig_profile for g in self.hyperpod.instance_groups)
