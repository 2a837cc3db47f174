"""A synthesized cloud assembly as the review reads it: its stacks in deploy order, their
resources, the exports one stack hands another, and the validation report synthesis writes
beside them (the nag packs' findings, and what `cdk synth` refuses)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator


@dataclass
class StackSummary:
    name: str  # the CloudFormation stack's name
    template: dict
    depends_on: list[str]
    termination_protection: bool = False
    environment: str = ""  # aws://account/region, as the manifest says
    # The template's file in the assembly, and the stack's id for the CDK CLI (`cdk diff --exclusively`):
    # under the App both are the stack's name; in a pipeline Stage's nested assembly (assembly-<stage>/)
    # the artifact id is hashed and the CLI knows the stack as `<stage>/<name>`.
    template_file: str = ""
    cli_id: str = ""

    def __post_init__(self):
        self.template_file = self.template_file or f"{self.name}.template.json"
        self.cli_id = self.cli_id or self.name

    @property
    def resources(self) -> dict:
        return self.template.get("Resources", {})

    def counts(self) -> Counter:
        return Counter(r["Type"] for r in self.resources.values())

    def exports(self) -> dict[str, str]:
        """export name -> the output's logical id."""
        return {
            o["Export"]["Name"]: lid
            for lid, o in self.template.get("Outputs", {}).items()
            if isinstance(o.get("Export", {}).get("Name"), str)
        }

    def imports(self) -> set[str]:
        return set(import_names(self.template))


def import_names(value) -> list[str]:
    """The export names a template, or any part of one, imports (Fn::ImportValue)."""
    if isinstance(value, dict):
        name = value.get("Fn::ImportValue")
        own = [name] if isinstance(name, str) else []
        return own + [n for v in value.values() for n in import_names(v)]
    if isinstance(value, list):
        return [n for v in value for n in import_names(v)]
    return []


def load_stacks(outdir: Path) -> list[StackSummary]:
    """The stacks of the assembly, by their CloudFormation names, in deploy order (dependencies
    first): an App's assembly (`cdk synth`) or a pipeline Stage's (assembly-<stage>/, what the
    pipeline's stage deploys)."""
    manifest = json.loads((outdir / "manifest.json").read_text())
    arts = {k: a for k, a in manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack"}
    name_of = {k: a["properties"].get("stackName") or k for k, a in arts.items()}
    stacks = {}
    for artifact_id, art in arts.items():
        name = name_of[artifact_id]
        template = json.loads((outdir / art["properties"]["templateFile"]).read_text())
        deps = [name_of[d] for d in art.get("dependencies", []) if d in arts]
        protected = bool(art["properties"].get("terminationProtection", False))
        stacks[name] = StackSummary(name, template, deps, protected, art.get("environment", ""),
                                    art["properties"]["templateFile"], art.get("displayName") or artifact_id)
    ordered, seen = [], set()

    def visit(name):
        if name in seen:
            return
        seen.add(name)
        for dep in stacks[name].depends_on:
            visit(dep)
        ordered.append(stacks[name])

    for name in stacks:
        visit(name)
    return ordered


def stage_of(outdir: Path) -> tuple[Path, str] | None:
    """(the parent assembly, the Stage's name) where `outdir` is a pipeline Stage's nested
    assembly: synthesis writes one validation report, in the parent, for every stage."""
    parent = outdir.resolve().parent
    try:
        manifest = json.loads((parent / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    for art in manifest.get("artifacts", {}).values():
        if art["type"] == "cdk:cloud-assembly" and art.get("properties", {}).get("directoryName") == outdir.resolve().name:
            return parent, art.get("properties", {}).get("displayName") or outdir.name.removeprefix("assembly-")
    return None


def _report(outdir: Path) -> tuple[dict | None, str]:
    """The validation report that covers `outdir`, and the construct-path prefix of its stacks'
    entries ("" for an App's own assembly; "<stage>/" for a Stage's, whose report is its parent's)."""
    if (outdir / "validation-report.json").exists():
        return json.loads((outdir / "validation-report.json").read_text()), ""
    stage = stage_of(outdir)
    if stage is not None and (stage[0] / "validation-report.json").exists():
        return json.loads((stage[0] / "validation-report.json").read_text()), f"{stage[1]}/"
    return None, ""


def region_of(outdir: Path) -> str:
    """The region of the assembly's stacks (one region per environment)."""
    manifest = json.loads((outdir / "manifest.json").read_text())
    for art in manifest["artifacts"].values():
        if art["type"] == "aws:cloudformation:stack":
            return art["environment"].rsplit("/", 1)[-1]
    return "us-east-1"


def of_type(stacks: list[StackSummary], *types: str) -> Iterator[tuple[StackSummary, str, dict]]:
    """(stack, logical id, resource) of every resource of these types."""
    for stack in stacks:
        for lid, res in stack.resources.items():
            if res["Type"] in types:
                yield stack, lid, res


def manifest_text(manifest) -> str:
    """A KubernetesResource's Manifest property as text: a literal, or a join whose tokens
    (references to other resources) are read as TOKEN."""
    return manifest if isinstance(manifest, str) else "".join(p if isinstance(p, str) else "TOKEN" for p in manifest["Fn::Join"][1])


def manifest_objects(stacks: list[StackSummary]) -> Iterator[tuple[StackSummary, str, dict]]:
    """(stack, logical id, object) of every Kubernetes object the stacks apply."""
    for stack, lid, res in of_type(stacks, "Custom::AWSCDK-EKS-KubernetesResource"):
        try:
            objects = json.loads(manifest_text(res.get("Properties", {}).get("Manifest")))
        except (TypeError, KeyError, ValueError):
            continue
        for obj in objects if isinstance(objects, list) else []:
            if isinstance(obj, dict):
                yield stack, lid, obj


def path_of(resource: dict, logical_id: str) -> str:
    return resource.get("Metadata", {}).get("aws:cdk:path", logical_id)


def group_instance_type(group: dict) -> str:
    """An instance group's type; a flexible group (InstanceRequirements) by its first type."""
    return group.get("InstanceType") or group.get("InstanceRequirements", {}).get("InstanceTypes", ["?"])[0]


# ------------------------------------------------------------------ the validation report

# The cdk-nag packs infra.compliance adds; other validation plugins are not ours to report.
PACK_NAMES = ("AwsSolutions", "NIST.800.53.R5")


@dataclass
class NagSummary:
    errors: list[tuple[str, str, str]] = field(default_factory=list)  # (pack, rule, construct)
    acknowledged: list[tuple[str, str, str, str]] = field(default_factory=list)  # (+ reason)


def load_nag(outdir: Path) -> NagSummary:
    summary = NagSummary()
    report, prefix = _report(outdir)
    if report is None:
        return summary
    for plugin in report["pluginReports"]:
        if plugin["pluginName"] not in PACK_NAMES:
            continue
        for v in plugin["violations"]:
            if v.get("severity") == "error":
                for c in v["violatingConstructs"]:
                    if c["constructPath"].startswith(prefix):
                        summary.errors.append((plugin["pluginName"], v["ruleName"], c["constructPath"]))
        for v in plugin.get("suppressedViolations", []):
            for c in v["violatingConstructs"]:
                if c["constructPath"].startswith(prefix):
                    summary.acknowledged.append((plugin["pluginName"], v["ruleName"], c["constructPath"], v.get("reason", "")))
    return summary


@dataclass(frozen=True)
class Refusal:
    """An unacknowledged error of a validation plugin other than the nag packs: CDK's own
    CloudFormation validator ("CloudFormation Validate", on with the flag
    @aws-cdk/core:validateAgainstDefaultRules) or a construct annotation. `cdk synth` exits 1
    on each, so nothing that has one may pass the review or the tests."""

    plugin: str
    rule: str
    construct: str
    description: str

    def __str__(self) -> str:
        return f"{self.construct}: {self.description} ({self.plugin} {self.rule}; cdk synth refuses it)"


def load_refusals(outdir: Path) -> list[Refusal]:
    """What `cdk synth` refuses in an assembly beyond the nag packs (which the review reports
    as nag errors), read from the validation report synthesis writes."""
    report, prefix = _report(outdir)
    if report is None:
        return []
    return [
        Refusal(plugin["pluginName"], v["ruleName"], c.get("constructPath", ""), v.get("description", ""))
        for plugin in report["pluginReports"]
        if plugin["pluginName"] not in PACK_NAMES
        for v in plugin["violations"]
        if v.get("severity") in ("error", "fatal")
        for c in v["violatingConstructs"]
        if c.get("constructPath", "").startswith(prefix)
    ]
