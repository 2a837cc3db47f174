"""The acceptance run's rules that span fields: which GPU groups it can prove, and what images
it pulls where the network lets it."""

from __future__ import annotations

from infra import catalogue
from infra.config.acceptance import unprovable
from infra.config.base import Problems
from infra.config.settings import Settings


def accepted_groups(s: Settings) -> list:
    """The instance groups an acceptance run proves."""
    if s.acceptance.instance_groups:
        return [g for g in s.hyperpod.instance_groups if g.name in s.acceptance.instance_groups]
    return [g for g in s.hyperpod.instance_groups if catalogue.lookup(g.instance_type) and not unprovable(g)]


def unpullable_images(s: Settings) -> list[str]:
    """One line per image the acceptance run would pull that a network without NAT cannot:
    anything but ECR in its region (Settings.pulls_without_nat). The GPU
    checks pull nccl_image and dcgm_image, each team namespace's tenancy probes probe_image."""
    if not s.network.closed:
        return []
    used = (["nccl_image", "dcgm_image"] if accepted_groups(s) else []) + (["probe_image"] if s.governance.teams else [])
    return [
        f"acceptance.{name}: {getattr(s.acceptance, name)} cannot be pulled in a network without NAT; copy it into this "
        f"account's ECR in {s.region} and name that copy"
        for name in used if not s.pulls_without_nat(getattr(s.acceptance, name))
    ]


def check_acceptance(s: Settings, p: Problems):
    names = [g.name for g in s.hyperpod.instance_groups]
    for i, name in enumerate(s.acceptance.instance_groups):
        path = f"acceptance.instance_groups[{i}]"
        group = s.instance_group(name)
        if group is None:
            p.error(path, name, f"is not an instance group; groups: {', '.join(names)}")
        elif not catalogue.lookup(group.instance_type):
            continue  # the instance type's own error names it
        elif why := unprovable(group):
            p.error(path, name, f"is {why}")
    # Only `accept` pulls them, so the deploy goes ahead; `accept` refuses to start with them.
    for line in unpullable_images(s):
        p.warn(f"{line} (`hyperpod-cdk accept` refuses to run until then)")
