"""The review's findings as SARIF 2.1.0 that GitHub code scanning accepts (and Azure DevOps and
most review bots): one run, one rule per kind of finding, each rule with a short and a full
description and a help text, each result at a line of a file the repository tracks.

Where a finding comes from a config field, its location is that field's line in cdk.json (the
environment's own block, else `defaults`); otherwise it is the class of the stack that holds
it (`stacks/hyperpod.py`), never the git-ignored template synth writes. URIs are relative to
the repository root and fingerprints are made of the rule, the place and the message only,
so the same finding keeps its alert from one run to the next.

GitHub's subset and limits: docs.github.com/en/code-security/code-scanning/
integrating-with-code-scanning/sarif-support-for-code-scanning.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cli.review.cdk_json import CdkJson
from infra import naming

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
TOOL = "hyperpod-cdk review"

# (short description, full description, help) of each rule the review itself defines.
RULES: dict[str, tuple[str, str, str]] = {
    "cdk-synth/refused": (
        "Refused by cdk synth",
        "CDK's own CloudFormation validator (@aws-cdk/core:validateAgainstDefaultRules) or a construct annotation reports "
        "an error nobody acknowledged: `cdk synth` exits 1 on it, so nothing deploys.",
        "Fix the construct; where the validator's bundled schema is older than CloudFormation's, acknowledge the finding "
        "on that construct with infra.compliance.acknowledge_newer_schema, naming the schema that has it.",
    ),
    "iam/unknown-action": (
        "IAM action that does not exist",
        "A role's policy names an action that is not in the AWS Service Authorization Reference: a typo or a renamed "
        "action, which IAM accepts and never grants.",
        "Correct the action's name in the stack that builds the policy; the review fails until it is an action AWS "
        "documents.",
    ),
    "iam/mutating-on-any-resource": (
        "Write or permissions-management access on Resource '*'",
        "A role may change any resource of these services in the account: Write or Permissions management access "
        "(as the Service Authorization Reference levels them) on Resource '*'.",
        "Scope the statement to the resources the role needs where the service supports resource-level permissions, "
        "or confirm in the review that it cannot.",
    ),
    "exposure/public-endpoint": (
        "Public Kubernetes API endpoint",
        "The EKS cluster's API endpoint is reachable from the internet for the CIDRs listed; 0.0.0.0/0 admits "
        "everyone.",
        "Set eks.public_access_cidrs to your networks' CIDRs, or eks.endpoint_access to 'private' and reach the "
        "cluster from inside the VPC.",
    ),
    "exposure/open-ingress": (
        "Security group open to addresses outside the VPC",
        "A security group rule admits traffic from a CIDR outside the VPC's own blocks.",
        "Narrow the rule's source to the VPC or to the peers that need it.",
    ),
}

# What each kind of change callout means (the rule's short and full description).
CHANGE_KINDS: dict[str, tuple[str, str]] = {
    "REPLACED": ("A cluster, bucket or key is replaced", "CloudFormation replaces a stateful or central resource: a create-only "
                 "property changes, so a new one is made and the old one deleted with what it holds."),
    "REMOVED": ("A cluster, bucket or key is removed", "A stateful or central resource leaves the template and is deleted "
                "(or retained, as its removal policy says)."),
    "REPLACED WITH IT": ("Replaced because something it references is", "A resource whose create-only property references "
                         "a replaced resource is replaced too, in this stack or another."),
    "REFUSED": ("The update would be refused", "CloudFormation or the service refuses it: an export another deployed stack "
                "imports would change or disappear, a group's volume key would change, or the Kubernetes version would go down "
                "or skip a minor version."),
    "NODES REPLACED": ("Every node of an instance group is replaced", "The group's instance type, execution role, threads "
                       "per core or subnets change: HyperPod replaces every node, and the jobs on them stop."),
    "NODES ROLL": ("Every node of an instance group rolls", "What the group's nodes are made with changes (an AMI "
                   "release, the lifecycle script, deep health checks, volumes): HyperPod rolls them, and the gates wait "
                   "for the group again."),
    "PROTECTION OFF": ("An environment's protection is turned off", "protection.retain_data or "
                       "protection.termination_protection goes from true to false: data is deleted with its stacks, or "
                       "one delete removes the stacks."),
    "POD SECURITY LOWERED": ("A team's Pod Security Standard is lowered", "A team's namespace enforces a weaker Pod "
                             "Security Standard (restricted -> baseline): its pods may run as root on shared nodes."),
    "PIN REMOVED": ("An add-on's pinned version is unset", "EKS keeps the installed version and no update moves it; the "
                    "config no longer says which version runs."),
    "ENVIRONMENT MOVED": ("An environment moves to another account or region", "A first deploy in the new place, while "
                          "the old stacks, their data and their cost stay behind and nothing deploys them."),
    "NODES ADDED": ("A new instance group", "An instance group is added: new nodes start, with their deep health checks."),
    "NODES REMOVED": ("An instance group is removed", "An instance group leaves the cluster and its nodes are terminated."),
    "NODE COUNT": ("An instance group's node count changes", "Nodes are added to or taken from an instance group."),
    "MIGRATE FIRST": ("The task governance add-on needs a migration first", "The add-on's update crosses Kueue's CRD "
                      "storage migration, which a plain update does not do."),
    "STACK LEFT BEHIND": ("A stack leaves the app but stays deployed", "cdk deploy does not delete a stack that is no longer "
                          "in the app; it has to be destroyed by hand."),
    "NEW QUOTA": ("An instance type new to the cluster", "The change needs instances of a type the baseline did not use; "
                  "the account's quota for a new type is often 0."),
    "IAM ON ANY RESOURCE": ("New Write or Permissions management on '*'", "A role gains Write or Permissions management "
                            "access on Resource '*'."),
    "EXPOSURE": ("Exposure added or widened", "A public CIDR, an open security group rule or a public endpoint is added "
                 "or widened."),
    "JOB RESTARTS": ("The running job restarts", "The job's object or its group's nodes change, so the running job restarts."),
    "ENDPOINT REDEPLOYS": ("The served endpoint's definition changes", "The InferenceEndpointConfig render-endpoint prints "
                           "changes: applying it again rolls the endpoint's model servers."),
    "TEAM ADDED": ("A team is added", "A compute quota for a new team, with the namespace and queue task governance makes of "
                   "it, its Kubernetes objects and its people's access entries."),
    "TEAM REMOVED": ("A team is removed", "A team's compute quota leaves, with what goes with it: its objects and its "
                     "people's access entries; its jobs lose their guarantee."),
    "TEAM QUOTA": ("A team's quota or borrowing changes", "What a team is guaranteed, or may borrow, of a kind of an "
                   "instance type changes, or its sharing, fair-share weight or preemption."),
    "ACCESS GAINED": ("A principal gains access", "A principal's EKS access entry gives it a team's namespace or "
                      "cluster admin it did not have."),
    "ACCESS LOST": ("A principal loses access", "A principal's EKS access entry no longer gives it a team's namespace "
                    "or cluster admin."),
    "JOBS INADMISSIBLE": ("Jobs a team runs can never be admitted now", "The largest job a team can hold on a group, "
                          "borrowing all it may, shrinks: its jobs of the sizes in between wait in its queue forever."),
    "JOB BORROWS": ("The sample job runs only by borrowing now", "The sample job, guaranteed before, is admitted only "
                    "by borrowing: it waits while the lenders use their quota and is preempted when they reclaim it."),
    "MIG": ("Every GPU of a group is re-partitioned", "A group's MIG profile changes: the GPU operator's MIG manager "
            "re-partitions its GPUs, which needs no workload running on them."),
    "GPU OPERATOR": ("The chart swaps its device plugin for the GPU operator", "Every GPU node's device plugin goes; "
                     "until the GPU operator's registers, no GPU pod is scheduled."),
    "DEVICE PLUGIN": ("The chart swaps the GPU operator for its device plugin", "Every GPU node's device plugin is "
                      "replaced; MIG slices are no longer advertised."),
    "PROVISIONING MODE": ("The cluster's provisioning mode changes", "The HyperPod cluster switches to continuous "
                          "provisioning, which no later update sets back."),
    "CONTROL PLANE UPGRADE": ("The Kubernetes version goes up, for good", "EKS cannot downgrade a cluster: the new version "
                              "stays, with what it leaves behind (HyperPod's documented range, the nodes' AMI, add-on pins)."),
    "NODE RECOVERY OFF": ("Failed nodes are no longer recovered", "With NodeRecovery None a faulty node stays as it is and "
                          "the jobs on it are not resumed on a replacement."),
    "NODE RECOVERY ON": ("Failed nodes are recovered automatically", "HyperPod reboots or replaces a faulty node itself."),
    "INTERNET PATH LOST": ("The network loses its way to the internet", "No NAT gateway or internet gateway: nothing in "
                           "the VPC reaches a public registry or endpoint."),
    "INTERNET PATH GAINED": ("The network gains a way to the internet", "A NAT or internet gateway is added to a closed "
                             "network."),
    "SERVING": ("The inference operator is installed", "Every endpoint a team applies gets a load balancer of its own, billed "
                "hourly, and takes GPU nodes at the inference priority, preempting lower-priority training."),
    "SERVING OPERATOR UPDATED": ("The inference operator's version moves", "The controller that manages every endpoint is "
                                 "replaced while they serve; its release notes may ask for a step first."),
    "PODS EVICTED": ("A NoExecute taint reaches running nodes", "Pods that do not tolerate the new taint are evicted from "
                     "the group's running nodes."),
    "APPROVAL REMOVED": ("An environment loses its approval in the pipeline", "The pipeline deploys an environment with no "
                         "person's approval before its stage now (delivery.protected, or termination protection where it is "
                         "unset); the pipeline's self-mutation applies this before any approval."),
    "APPROVAL ADDED": ("An environment gains an approval in the pipeline", "The pipeline waits for a person's approval "
                       "before an environment's stage now."),
    "PIPELINE MOVED": ("The pipeline moves to another account, region or environment's config", "A new pipeline is made "
                       "where the delivery block now puts it; the old one stays deployed and runs on every push until destroyed."),
    "ENVIRONMENT LEFT BEHIND": ("An environment leaves cdk.json but stays deployed", "The change removes or renames an "
                                "environment: its stacks stay deployed, and nothing deploys them any more."),
    "GUARANTEE UNBACKED": ("A team's guarantee is no longer backed by nodes", "The teams' quotas of a type add up past "
                           "what the cluster holds (allowed by governance.allow_oversubscription)."),
}

# A change callout's kind (the words before its colon) -> the config fields that may be behind
# it, the first written in cdk.json wins; "{group}" is the instance group the callout names,
# "{type}" the instance type.
_CALLOUT_FIELDS = {
    "NODES REPLACED": ("hyperpod.instance_groups[{group}]",),
    "NODES ADDED": ("hyperpod.instance_groups[{group}]",),
    "NODES REMOVED": ("hyperpod.instance_groups[{group}]", "hyperpod.instance_groups"),  # gone: the list it left
    "NODES ROLL": ("hyperpod.instance_groups[{group}]",),
    "NODE COUNT": ("hyperpod.instance_groups[{group}].count",),
    "NEW QUOTA": ("hyperpod.instance_groups[instance_type={type}].instance_type",),
    "MIGRATE FIRST": ("addons.task_governance.version",),
    "EXPOSURE": ("eks.public_access_cidrs", "eks.endpoint_access"),  # where the callout is the API endpoint's
    "JOB RESTARTS": ("sample_job", "hyperpod.instance_groups[{group}]"),
    "ENDPOINT REDEPLOYS": ("inference.endpoint", "inference"),
    "REFUSED": ("hyperpod.instance_groups[{group}]",),  # a group's volume key; an export in use: the change's first field
    "AUTO PATCH": ("hyperpod.instance_groups[{group}].auto_patch", "hyperpod.instance_groups[{group}]"),
    "SUPPORT TIER": ("eks.upgrade_policy",),
    "DELETION PROTECTION": ("eks.deletion_protection", "protection.termination_protection"),
}
# An optional stack's switch: what turns it off when it is left behind.
_STACK_SWITCHES = {"sample-job": "sample_job.enabled"}
# Callouts that fail the review (it exits 1) are errors; those marked information are notes.
# An approval gone or the pipeline moved is an error in code scanning, whose check fails on one until
# a person dismisses the alert: the review itself passes, as the change is not refused.
_CALLOUT_LEVELS = {"REFUSED": "error", "NARROWED": "note", "APPROVAL REMOVED": "error", "PIPELINE MOVED": "error",
                   "PROTECTION OFF": "error", "ENVIRONMENT MOVED": "error"}


@dataclass(frozen=True)
class Place:
    """Where a result is shown: a tracked file, relative to the repository root, and a line."""

    uri: str
    line: int
    start_column: int
    end_column: int
    key: str  # what the fingerprint takes from the place: the field path or the stack file

    def sarif(self) -> dict:
        return {
            "physicalLocation": {
                "artifactLocation": {"uri": self.uri, "uriBaseId": "%SRCROOT%"},
                "region": {"startLine": self.line, "startColumn": self.start_column,
                           "endLine": self.line, "endColumn": self.end_column},
            }
        }


# -- where everything else is: the stack's own source ----------------------------------------

def stack_source(stack: str) -> str:
    """The file of the stack class that builds `stack` (`<prefix>-<env>-<suffix>`), relative to
    the project: stacks/<suffix>.py, as infra.naming's suffixes name them; app.py otherwise."""
    for suffix in sorted(naming.STACK_SUFFIXES, key=len, reverse=True):
        if stack.endswith(f"-{suffix}"):
            return f"stacks/{suffix.replace('-', '_')}.py"
    return "app.py"


class Places:
    """Relative, tracked places for results: cdk.json fields and stack classes."""

    def __init__(self, project: Path, env: str | None):
        self.project = project.resolve()
        self.root = next((p for p in (self.project, *self.project.parents) if (p / ".git").exists()), self.project)
        cdk_json = self.project / "cdk.json"
        self.cdk = CdkJson(cdk_json, env) if env and cdk_json.is_file() else None

    def _uri(self, relative: str) -> str:
        return Path(os.path.relpath(self.project / relative, self.root)).as_posix()

    def field(self, field: str) -> Place | None:
        """A field of this environment, or of another one written `<env>:<field>`."""
        other = re.match(r"([\w-]+):(?=[a-z_])", field)
        cdk = self.cdk
        if other and cdk is not None and other.group(1) != cdk.env:
            cdk, field = CdkJson(cdk.path, other.group(1)), field[other.end():]
        elif other:
            field = field[other.end():]
        found = cdk.where(field) if cdk else None
        if found is None:
            return None
        line, start, end = found
        return Place(self._uri("cdk.json"), line, start, end, f"{cdk.env}:{field}")

    def environments(self) -> Place | None:
        """cdk.json's `environments` key: where an environment that is no longer there was."""
        found = self.cdk.positions.get(("context", "environments")) if self.cdk else None
        if found is None:
            return None
        line, start, _ = self.cdk._region(found[0], found[0] + len('"environments"'))
        return Place(self._uri("cdk.json"), line, start, start + len('"environments"'), "environments")

    def nearest(self, field: str, depth: int = 2) -> Place | None:
        """The field, or the nearest field above it that cdk.json writes, down to `depth` parts
        (`governance.teams`, not `governance`): where something removed was written."""
        parts = re.findall(r"[^.\[\]]+|\[[^\]]*\]", field)
        for n in range(len(parts), min(depth, len(parts)) - 1, -1):
            candidate = "".join(p if p.startswith("[") or i == 0 else f".{p}" for i, p in enumerate(parts[:n]))
            if place := self.field(candidate):
                return place
        return None

    def cause(self, prefixes: list[str], changed: list[str]) -> Place | None:
        """Where the cause of a finding is written: the first field the change touches under
        one of `prefixes` (in their order), else the nearest written field of a prefix, else
        the first field the change touches at all."""

        def under(path: str, prefix: str) -> bool:
            return path == prefix or path.startswith(prefix + ".") or path.startswith(prefix + "[")

        for prefix in prefixes:
            for path in changed:
                if under(path, prefix) and (place := self.field(path)):
                    return place
        for prefix in prefixes:
            if place := self.nearest(prefix):
                return place
        for path in changed:
            if place := self.field(path):
                return place
        return None

    def stack(self, stack: str | None) -> Place:
        relative = stack_source(stack) if stack else "app.py"
        if not (self.project / relative).is_file():
            relative = "app.py"
        if (self.project / relative).is_file():
            lines = (self.project / relative).read_text().splitlines()
            # The stack class; in app.py, compose(), which builds every stack.
            number = next((i for i, l in enumerate(lines, 1) if re.match(r"class \w+\([\w.]*Stack\)|def compose\(", l)), None)
            if number is None:
                number = next((i for i, l in enumerate(lines, 1) if l.strip()), 1)
            return Place(self._uri(relative), number, 1, len(lines[number - 1]) + 1 if lines else 1, relative)
        env = self.cdk.env_entry() if self.cdk else None
        if env:
            return Place(self._uri("cdk.json"), *env, f"{self.cdk.env}:")
        return Place("cdk.json", 1, 1, 2, "cdk.json")


# -- findings ----------------------------------------------------------------------------------

def _finding(rule: str, level: str, message: str, place: Place, construct: str | None = None) -> dict:
    result = {"ruleId": rule, "level": level, "message": {"text": message}, "locations": [place.sarif()]}
    if construct:
        result["locations"][0]["logicalLocations"] = [{"fullyQualifiedName": construct, "kind": "resource"}]
    # Stable across runs and machines: no line (an edit above it must not open a new alert), no
    # time, no absolute path; "primaryLocationLineHash" is the one GitHub reads.
    identity = "\n".join((rule, place.key, construct or "", message))
    result["partialFingerprints"] = {"primaryLocationLineHash": hashlib.sha256(identity.encode()).hexdigest()[:32] + ":1"}
    return result


def _stack_of(construct: str) -> str:
    """The stack of a construct path (its first part)."""
    return construct.split("/")[0]


def _qualified(stack: str, resource: str) -> str:
    """A resource's construct path, which starts with its stack's name."""
    return resource if resource.startswith(f"{stack}/") else f"{stack}/{resource}"


def _field_in(text: str, places: Places) -> Place | None:
    """A config field path the text names (`eks.public_access_cidrs`), where cdk.json writes it."""
    for candidate in re.findall(r"\b[a-z_]+(?:\.[a-z_]+|\[[\w-]+\])+", text):
        place = places.field(candidate)
        if place:
            return place
    return None


def _prefixes(line: str, kind: str) -> list[str]:
    """The config fields a callout of this kind may come from, by what its text names."""
    group = re.search(r"instance group (\S+) in ", line)
    itype = re.search(r"\b(ml\.[a-z0-9-]+\.[a-z0-9]+)\b", line)
    out = []
    for field in _CALLOUT_FIELDS.get(kind, ()):
        if ("{group}" in field and not group) or ("{type}" in field and not itype):
            continue
        if kind == "EXPOSURE" and "Kubernetes API endpoint" not in line:
            continue
        out.append(field.format(group=group.group(1) if group else "", type=itype.group(1) if itype else ""))
    return out


def _callout(line: str, stacks: list[str], places: Places, anchors: dict, changed: list[str]) -> dict:
    """A change callout at its cause: the config field its producer names (anchors), or that
    its kind names, refined to the field the change touches (changed: cli.config_diff's paths)."""
    kind = re.match(r"([A-Z][A-Z ]+):", line)
    kind = kind.group(1).strip() if kind else "CALLOUT"
    named = [s for s in stacks if re.search(rf"\b{re.escape(s)}\b", line)]
    place = places.environments() if kind == "ENVIRONMENT LEFT BEHIND" else None
    place = place or places.cause(list(anchors.get(line) or _prefixes(line, kind)), changed)
    if place is None and kind == "STACK LEFT BEHIND" and named:
        switch = next((f for suffix, f in _STACK_SWITCHES.items() if named[0].endswith(f"-{suffix}")), None)
        place = places.field(switch) if switch else None
    place = place or _field_in(line, places) or places.stack(named[0] if named else None)
    rule = "change/" + kind.lower().replace(" ", "-")
    return _finding(rule, _CALLOUT_LEVELS.get(kind, "warning"), line, place)


def findings(report: dict, places: Places | None = None) -> list[dict]:
    places = places or Places(Path.cwd(), None)
    out = [
        _finding("cdk-synth/refused", "error", line, places.stack(_stack_of(line)), line.split(": ", 1)[0])
        for line in report.get("refused", [])
    ]
    out += [
        _finding(f"{e['pack']}/{e['rule']}", "error", f"{e['rule']} on {e['construct']} (unacknowledged)",
                 places.stack(_stack_of(e["construct"])), e["construct"])
        for e in report["nag"]["errors"]
    ]
    out += [
        _finding(f"cfn-lint/{f['rule']}", {"info": "note"}.get(f["level"], f["level"]), f["message"], places.stack(f["stack"]),
                 f"{f['stack']}/{f['path']}" if f["path"] else f["stack"])
        for f in report["cfn_lint"]
        if not f["accepted"]
    ]
    iam = report["iam"]
    out += [
        _finding("iam/unknown-action", "error", f"{u['action']} is not an action in the AWS Service Authorization Reference",
                 places.stack(_stack_of(u["role"])), u["role"])
        for u in iam["unknown_actions"]
    ]
    out += [
        _finding("iam/mutating-on-any-resource", "warning", f"{row['level']} access on Resource '*': {', '.join(row['actions'])}",
                 places.stack(_stack_of(row["role"])), row["role"])
        for row in iam["on_any_resource"]
    ]
    risk = report["risk"]
    out += [
        _finding("exposure/public-endpoint", "warning" if any(c.endswith("/0") for c in e["cidrs"]) else "note",
                 f"public Kubernetes API endpoint admits {', '.join(e['cidrs'])}",
                 places.field("eks.public_access_cidrs") or places.stack(e["stack"]), _qualified(e["stack"], e["resource"]))
        for e in risk["public_endpoints"]
    ]
    out += [
        _finding("exposure/open-ingress", "warning", f"admits {r['cidr']} (outside the VPC) on {r['ports']}",
                 places.stack(r["stack"]), _qualified(r["stack"], r["resource"]))
        for r in risk["open_ingress"]
    ]
    changes = report.get("changes") or {}
    stacks = sorted({s["name"] for s in report["stacks"]} | set(changes.get("stacks_removed", [])), key=len, reverse=True)
    anchors, changed = changes.get("anchors") or {}, changes.get("config_changes") or []
    out += [_callout(line, stacks, places, anchors, changed) for line in changes.get("callouts", [])]
    return out


def _rule(rule_id: str, nag: dict[str, str], lint: dict[str, tuple[str, str]]) -> dict:
    family, _, name = rule_id.partition("/")
    if rule_id in RULES:
        short, full, help_ = RULES[rule_id]
    elif family == "cfn-lint":
        short, full = lint.get(name, (f"cfn-lint rule {name}", f"cfn-lint rule {name} on a synthesized template."))
        help_ = f"Fix the template's construct, or accept the rule in cli/review/report.py with the reason. cfn-lint's rule list: {name}."
    elif family == "change":
        words = name.replace("-", " ")
        short, full = CHANGE_KINDS.get(words.upper(), (f"A change the review calls out: {words}", ""))
        full = (full + " " if full else "") + ("Against its baseline, the change does something a template diff does not "
                                                "make plain; the callout says what and where.")
        help_ = "Read the callout in review-<env>.md under 'What this change does', and act on it before cdk deploy."
    else:  # a cdk-nag pack's rule, described by the synthesized assembly's validation report
        short = nag.get(name, f"{family} rule {name}")
        full = f"cdk-nag's {family} pack: {short} (unacknowledged, so an error)."
        help_ = "Fix the construct, or acknowledge the finding with its reason where the construct is built."
    return {
        "id": rule_id,
        "name": re.sub(r"[^A-Za-z0-9]+", "-", rule_id).strip("-")[:255],  # GitHub shows at most 255
        "shortDescription": {"text": short[:1024]},
        "fullDescription": {"text": full[:1024]},
        "help": {"text": help_},
        "defaultConfiguration": {"level": "warning"},
    }


def _nag_descriptions(report: dict) -> dict[str, str]:
    if not report["nag"]["errors"] or not (path := Path(report.get("assembly") or "") / "validation-report.json").is_file():
        return {}
    doc = json.loads(path.read_text())
    return {v["ruleName"]: v.get("description", "") for p in doc.get("pluginReports", []) for v in p.get("violations", [])}


def _lint_descriptions(report: dict) -> dict[str, tuple[str, str]]:
    if not any(not f["accepted"] for f in report["cfn_lint"]):
        return {}
    import cfnlint.rules  # the rules' own descriptions, as installed (slow: only when there is a finding)

    rules = cfnlint.rules.Rules.create_from_directory(os.path.dirname(cfnlint.rules.__file__))
    return {rule_id: (rule.shortdesc, rule.description) for rule_id, rule in rules.items()}


def environment_of(report: dict, cdk_json: Path) -> str | None:
    """The environment whose stacks the report is of: the one whose `-<env>-<suffix>` ends a
    stack's name (stack names are `<prefix>-<env>-<suffix>`)."""
    if report.get("env"):
        return report["env"]
    if not cdk_json.is_file():
        return None
    envs = json.loads(cdk_json.read_text()).get("context", {}).get("environments", {})
    for stack in (s["name"] for s in report["stacks"]):
        for env in sorted(envs, key=len, reverse=True):
            if any(stack.endswith(f"-{env}-{suffix}") for suffix in naming.STACK_SUFFIXES):
                return env
    return None


def changed_lines(project: Path, revision: str | None) -> set[int] | None:
    """The lines of cdk.json this change writes (added or rewritten) against the base `revision`'s,
    None where that cannot be read (no revision, no git, no cdk.json there): GitHub shows a code
    scanning alert in a pull request only on a line it changed."""
    import difflib
    import subprocess

    cdk_json = project / "cdk.json"
    if not revision or not cdk_json.is_file():
        return None
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=project, capture_output=True, text=True)
    if top.returncode != 0:
        return None
    relative = cdk_json.resolve().relative_to(Path(top.stdout.strip()).resolve()).as_posix()
    base = subprocess.run(["git", "show", f"{revision}:{relative}"], cwd=project, capture_output=True, text=True)
    if base.returncode != 0:
        return None
    matcher = difflib.SequenceMatcher(None, base.stdout.splitlines(), cdk_json.read_text().splitlines(), autojunk=False)
    return {line + 1 for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("replace", "insert") for line in range(j1, j2)}


def _inline(result: dict, changed: set[int], text: list[str]) -> bool:
    """Move a change callout's result in cdk.json to the nearest line the change wrote, where its own
    line is not one (a removed team or group, whose lines are gone: the list it left, or the line the
    removal rewrote); False where the change wrote no line of cdk.json at all."""
    location = result["locations"][0]["physicalLocation"]
    if location["artifactLocation"]["uri"].rsplit("/", 1)[-1] != "cdk.json":
        return False
    region = location["region"]
    if region["startLine"] in changed:
        return True
    if not changed:
        return False
    line = min(changed, key=lambda n: (abs(n - region["startLine"]), n))
    body = text[line - 1] if line <= len(text) else ""
    indent = len(body) - len(body.lstrip())
    result["message"]["text"] += f" (shown at the nearest line this change writes; the field is at line {region['startLine']})"
    region.update(startLine=line, endLine=line, startColumn=indent + 1, endColumn=max(len(body), indent + 1) + 1)
    return True


def log(report: dict, project: Path | None = None, env: str | None = None) -> dict:
    """The SARIF log of `report`. `project` is the folder of cdk.json (default: the nearest
    above the current folder, as the CLI finds it); `env` the environment (default: the
    one the stacks are named for)."""
    if project is None:
        here = Path.cwd().resolve()
        project = next((p for p in (here, *here.parents) if (p / "cdk.json").is_file()), here)
    env = env or environment_of(report, project / "cdk.json")
    results = findings(report, Places(project, env))
    changes = report.get("changes") or {}
    changed = changed_lines(project, changes.get("revision"))
    if changed is not None:  # a pull request's review: each callout on a line it changed, or said where it is not
        text = (project / "cdk.json").read_text().splitlines()
        for result in results:
            if result["ruleId"].startswith("change/"):
                result.setdefault("properties", {})["inline"] = _inline(result, changed, text)
    nag, lint = _nag_descriptions(report), _lint_descriptions(report)
    rules = [_rule(rule_id, nag, lint) for rule_id in sorted({r["ruleId"] for r in results})]
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    for result in results:
        result["ruleIndex"] = index[result["ruleId"]]
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": TOOL, "rules": rules}},
                # One category per environment: `review --all` writes one file each, and GitHub
                # keeps the alerts of each apart only with distinct categories.
                "automationDetails": {"id": f"hyperpod-cdk-review/{env or 'unknown'}/"},
                "originalUriBaseIds": {"%SRCROOT%": {"description": {"text": "the repository root"}}},
                "results": results,
            }
        ],
    }
