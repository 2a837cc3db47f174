"""Task governance: priority classes, teams and their quotas, topology-aware scheduling."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from infra.config.base import Model


TOPOLOGY_LEVELS = (
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "topology.k8s.aws/ultraserver-id",
)


class PriorityClass(Model):
    name: str = Field(description="Class name; Kubernetes sees `<name>-priority`.")
    weight: int = Field(description="Higher preempts lower.")


class AcceleratorPartition(Model):
    type: str = Field(description="A MIG slice, `mig-<profile>` (e.g. `mig-1g.10gb`), that some group is cut into.")
    count: int = Field(description="Slices.")


# The resource kinds a quota entry can name, beside whole instances ("count").
KINDS = ("accelerators", "vcpu", "memory_gib")


class QuotaResource(Model):
    """One instance type's share (ComputeQuotaResourceConfig): whole instances (count), or any
    of accelerators, vCPUs, memory and MIG slices of the type."""

    instance_type: str = Field(description="An instance type some group provides.")
    count: Optional[int] = Field(
        default=None, description="Whole instances, alone; or give any of `accelerators`, `vcpu`, `memory_gib` and `accelerator_partition` instead."
    )
    accelerators: Optional[int] = Field(
        default=None, description="Accelerators (GPUs, Trainium chips); alone, SageMaker adds their share of vCPUs and memory."
    )
    vcpu: Optional[float] = Field(default=None, description="vCPUs; alone, SageMaker adds their share of memory and no accelerators.")
    memory_gib: Optional[float] = Field(default=None, description="Memory in GiB; alone, SageMaker adds its share of vCPUs.")
    accelerator_partition: Optional[AcceleratorPartition] = Field(default=None, description="MIG slices of a group with `mig_profile`.")

    def given(self) -> dict[str, float]:
        """The kinds set here and their amounts (a partition as its "mig-<profile>" kind)."""
        out = {k: getattr(self, k) for k in ("count", *KINDS) if getattr(self, k) is not None}
        if self.accelerator_partition is not None:
            out[self.accelerator_partition.type] = self.accelerator_partition.count
        return out

    def takes(self, capacity: dict[str, float], gpus_per_instance: int) -> dict[str, float]:
        """What the entry takes of each kind of its type's `capacity`. SageMaker fills in what
        is not given in proportion (ComputeQuotaResourceConfig's documentation): a count takes
        whole instances of every kind; accelerators alone bring their share of vCPUs and
        memory; vCPUs alone their share of memory, memory alone its share of vCPUs, neither
        any accelerators. A partition brings the share of the type's GPU compute its slices
        are (a 4g slice is 4 of a GPU's 7 compute units)."""
        given = self.given()
        if "count" in given:
            share = given["count"] / capacity["count"] if capacity.get("count") else 0
            return {kind: total * share for kind, total in capacity.items()}
        out = dict(given)
        if "accelerators" in given:
            share = given["accelerators"] / capacity["accelerators"] if capacity.get("accelerators") else 0
        elif self.accelerator_partition is not None:
            units = int(self.accelerator_partition.type.removeprefix("mig-").split("g", 1)[0])
            gpus = capacity.get("count", 0) * gpus_per_instance
            share = self.accelerator_partition.count * units / (7 * gpus) if gpus else 0
        elif "vcpu" in given:
            share = given["vcpu"] / capacity["vcpu"] if capacity.get("vcpu") else 0
        else:
            share = given["memory_gib"] / capacity["memory_gib"] if capacity.get("memory_gib") else 0
        for kind in ("vcpu", "memory_gib"):
            out.setdefault(kind, capacity.get(kind, 0) * share)
        return out


class Team(Model):
    name: str = Field(description="Team; it gets namespace `hyperpod-ns-<team>` and its queues.")
    quotas: tuple[QuotaResource, ...] = Field(
        min_length=1,
        description="Its guaranteed share per instance type (`ComputeQuotaResourceConfig`): whole instances, or any of "
        "accelerators, vCPUs, memory and MIG slices of the type.",
    )
    sharing: Literal["Lend", "DontLend", "LendAndBorrow"] = Field(
        default="LendAndBorrow",
        description="Whether it lends its idle share and borrows.",
    )
    borrow_limit: Optional[int] = Field(
        default=None,
        description="Percent of its quota the team may borrow from idle capacity (`LendAndBorrow` only); unset: SageMaker's default 50.",
    )
    absolute_borrow_limits: tuple[QuotaResource, ...] = Field(
        default=(), description="Per instance type, the most the team may borrow (`LendAndBorrow`), beside the percentage."
    )
    preempt: Literal["Never", "LowerPriority"] = Field(
        default="LowerPriority", description="Whether a higher-priority job of the team preempts its lower-priority ones."
    )
    principals: tuple[str, ...] = Field(
        default=(),
        description="IAM role ARNs of the team's people: an EKS access entry each, into the team's namespace only (submit "
        "and watch jobs there), none elsewhere (docs/governance.md, A team's kit).",
    )
    fair_share_weight: int = Field(default=50, description="Its weight in fair-share scheduling.")
    active: bool = Field(default=True, description="The quota is enabled.")
    pod_security: Literal["baseline", "restricted"] = Field(
        default="restricted",
        description="The Pod Security Standard its namespace enforces (warn and audit are always `restricted`): `restricted` "
        "requires non-root, no privilege escalation, an explicit seccomp profile and every capability dropped (the sample "
        "job and the acceptance probes meet it); `baseline`, the opt-out for images that must run as root, refuses only "
        "privileged pods, host namespaces, hostPath and added capabilities, and its warnings and audit events name what "
        "restricted would refuse.",
    )


class GovernanceSettings(Model):
    priority_classes: tuple[PriorityClass, ...] = Field(
        default=(),
        description="Priority classes: a job labelled `kueue.x-k8s.io/priority-class: <name>-priority` may preempt lower ones.",
    )
    fair_share: bool = Field(default=True, description="Fair-share scheduling between teams.")
    idle_resource_sharing: bool = Field(
        default=True,
        description="Capacity no team's quota holds is borrowable by the teams that borrow, within their borrow limits "
        "(SchedulerConfig.IdleResourceSharing); what a team lends of its own quota is its sharing.",
    )
    allow_oversubscription: bool = Field(
        default=False, description="Team quotas may add up to more than the cluster has (a warning names the teams)."
    )
    teams: tuple[Team, ...] = Field(
        default=(),
        description="One compute quota per team, with its namespace `hyperpod-ns-<team>` and queues.",
    )


class TopologySettings(Model):
    mode: Literal["none", "preferred", "required"] = Field(
        default="none", description="`kueue.x-k8s.io/podset-required-topology` or `-preferred-topology` on jobs, or none."
    )
    level: str = Field(
        default="topology.k8s.aws/network-node-layer-3",
        description="`topology.k8s.aws/network-node-layer-1`, `-2` or `-3`, or `topology.k8s.aws/ultraserver-id`.",
    )


# admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy, which refuses a team's job without
# its queue label (manifests/tenancy.py), is GA and on from Kubernetes 1.30.
QUEUE_POLICY_SINCE = (1, 30)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
