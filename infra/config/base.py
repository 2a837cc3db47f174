"""Shared pieces of the config models and the checks above them: the base model, the error type,
the problem collector and the small helpers several areas use."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from infra import cfn_schema


class ConfigError(Exception):
    """Bad config: `problems` holds one human-readable line per problem, `warnings` the
    warnings found beside them (shown with the errors, never hidden by them)."""

    def __init__(self, problems: list[str], warnings: list[str] | None = None):
        super().__init__("\n".join(problems))
        self.problems = problems
        self.warnings = warnings or []


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Problems:
    def __init__(self):
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self._paths: set[str] = set()

    def error(self, path: str, value: Any, allowed: str):
        self.errors.append(f"{path}: {short(value)} {allowed}")
        self._paths.add(path)

    def named(self, path: str) -> bool:
        """Whether an error already names this field (or a field inside it)."""
        return any(p == path or p.startswith(path + ".") or p.startswith(path + "[") for p in self._paths)

    def warn(self, line: str):
        self.warnings.append(line)


def duplicates(values) -> list:
    seen, dups = set(), []
    for v in values:
        if v in seen and v not in dups:
            dups.append(v)
        seen.add(v)
    return dups


def collisions(values, key) -> list[tuple[Any, Any]]:
    """Pairs of distinct values with the same key (e.g. the construct id they become)."""
    seen: dict[Any, Any] = {}
    pairs = []
    for value in values:
        k = key(value)
        if k in seen and seen[k] != value:
            pairs.append((seen[k], value))
        seen.setdefault(k, value)
    return pairs


QUALIFIED_NAME_WORDS = (
    "is not a Kubernetes label/taint key: an optional DNS-subdomain prefix and '/', then a name of at most 63 "
    "letters, digits, '-', '_' and '.', starting and ending alphanumeric"
)


LABEL_VALUE_WORDS = "is not a Kubernetes label/taint value: at most 63 letters, digits, '-', '_' and '.', starting and ending alphanumeric"


def k8s_qualified_name(key: str, rule: dict) -> bool:
    """The schema's key pattern, plus Kubernetes' 63-character limit on the name after the
    prefix (apimachinery IsQualifiedName), which a single pattern cannot say."""
    return cfn_schema.matches(rule, key) and len(key.rsplit("/", 1)[-1]) <= 63
