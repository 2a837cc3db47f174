"""Every IAM role and policy in a synthesized assembly, and where they use wildcards.

Used by the review report (roles with any wildcard, out of all roles) and by the
least-privilege test: `Action: "*"` is never allowed, and `Resource: "*"` on a mutating
action only where an acknowledgment on that policy explains the AWS requirement.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

READ_PREFIXES = ("Describe", "Get", "List", "Head", "BatchGet", "BatchCheck", "Query", "Search", "View")


@dataclass
class Statement:
    stack: str
    policy: str  # logical id of the role or policy resource that holds it
    path: str  # its construct path
    actions: list[str]
    resources: list[str]

    @property
    def wildcard_actions(self) -> list[str]:
        return [a for a in self.actions if "*" in a]

    @property
    def wildcard_resources(self) -> list[str]:
        return [r for r in self.resources if "*" in r]

    @property
    def any_action(self) -> bool:
        return "*" in self.actions

    @property
    def mutating_on_any_resource(self) -> list[str]:
        if "*" not in self.resources:
            return []
        return [a for a in self.actions if not a.split(":", 1)[-1].startswith(READ_PREFIXES)]


@dataclass
class Role:
    stack: str
    logical_id: str
    path: str
    managed_policies: list[str]
    statements: list[Statement] = field(default_factory=list)

    @property
    def has_wildcard(self) -> bool:
        return any(s.wildcard_actions or s.wildcard_resources for s in self.statements)


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _text(value) -> str:
    """A resource or ARN as readable text: tokens become <LogicalId.Attr>."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        if "Ref" in value:
            return f"<{value['Ref']}>"
        if "Fn::GetAtt" in value:
            return f"<{'.'.join(value['Fn::GetAtt'])}>"
        if "Fn::ImportValue" in value:
            return f"<import {value['Fn::ImportValue']}>"
        if "Fn::Join" in value:
            sep, parts = value["Fn::Join"]
            return sep.join(_text(p) for p in parts)
    return json.dumps(value)


def _statements(stack: str, logical_id: str, path: str, document: dict) -> list[Statement]:
    out = []
    for st in _as_list(document.get("Statement", [])):
        if st.get("Effect") != "Allow":
            continue
        out.append(
            Statement(
                stack=stack,
                policy=logical_id,
                path=path,
                actions=[_text(a) for a in _as_list(st.get("Action", []))],
                resources=[_text(r) for r in _as_list(st.get("Resource", []))],
            )
        )
    return out


def audit(templates: dict[str, dict]) -> list[Role]:
    """templates: stack name -> template. Roles with the statements of every policy on them."""
    roles: dict[tuple[str, str], Role] = {}
    policies = []
    for stack, template in templates.items():
        for lid, res in template.get("Resources", {}).items():
            path = res.get("Metadata", {}).get("aws:cdk:path", lid)
            props = res.get("Properties", {})
            if res["Type"] == "AWS::IAM::Role":
                role = Role(stack, lid, path, [_text(p) for p in props.get("ManagedPolicyArns", [])])
                for inline in props.get("Policies", []):
                    role.statements += _statements(stack, lid, path, inline["PolicyDocument"])
                roles[(stack, lid)] = role
            elif res["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                policies.append((stack, lid, path, props))
    for stack, lid, path, props in policies:
        statements = _statements(stack, lid, path, props.get("PolicyDocument", {}))
        for ref in props.get("Roles", []):
            target = ref.get("Ref") if isinstance(ref, dict) else None
            if (stack, target) in roles:
                roles[(stack, target)].statements += statements
    return list(roles.values())


def all_statements(roles: list[Role]) -> list[Statement]:
    return [s for r in roles for s in r.statements]


def wildcard_figure(roles: list[Role]) -> tuple[int, int]:
    """(roles with any wildcard, all roles)."""
    return sum(r.has_wildcard for r in roles), len(roles)
