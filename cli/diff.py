"""Compare two synthesized assemblies resource by resource: added, removed, modified, or
replaced (a create-only property changed, per cfn-lint's resource schemas)."""

from __future__ import annotations

from dataclasses import dataclass

from cli import replacement

# Losing one of these takes a GPU cluster or data with it: called out first.
CRITICAL_TYPES = ("AWS::EKS::Cluster", "AWS::SageMaker::Cluster", "AWS::S3::Bucket")


@dataclass(frozen=True)
class Change:
    stack: str
    logical_id: str
    type: str
    action: str  # added | removed | modified | replaced
    because: tuple[str, ...] = ()

    @property
    def critical(self) -> bool:
        return self.type in CRITICAL_TYPES and self.action in ("replaced", "removed")


def _resources(stack) -> dict:
    return stack.resources


def compare(old_stacks, new_stacks, region: str = "us-east-1") -> list[Change]:
    """Stacks are cli.review.StackSummary lists."""
    old = {s.name: s for s in old_stacks}
    new = {s.name: s for s in new_stacks}
    changes = []
    for name in sorted(set(old) | set(new)):
        before = _resources(old[name]) if name in old else {}
        after = _resources(new[name]) if name in new else {}
        for lid in sorted(set(before) | set(after)):
            if lid not in before:
                changes.append(Change(name, lid, after[lid]["Type"], "added"))
            elif lid not in after:
                changes.append(Change(name, lid, before[lid]["Type"], "removed"))
            elif _comparable(before[lid]) != _comparable(after[lid]):
                because = tuple(replacement.replaced_by(before[lid], after[lid], region))
                changes.append(Change(name, lid, after[lid]["Type"], "replaced" if because else "modified", because))
    return sorted(changes, key=lambda c: (not c.critical, c.stack, c.logical_id))


def _comparable(resource: dict) -> dict:
    # Construct metadata (paths, nag acknowledgments) changes nothing that is deployed.
    return {k: v for k, v in resource.items() if k != "Metadata"}
