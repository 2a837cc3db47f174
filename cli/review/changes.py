"""What a change does, against what is deployed or an earlier synth.

The property-level diff is `cdk diff`'s own (the pinned CLI, offline: `--app <assembly>
--template <file>` per stack). Above it stand the callouts no generic diff makes:
- a replaced or removed EKS cluster, HyperPod cluster, bucket or KMS key;
- an instance group change after which HyperPod replaces every node of the group
  (its name, type, execution role, threads per core or subnet override), or rolls them or
  gives them something only a node made after it gets (an AMI, the lifecycle script, deep
  health checks, volumes: the properties the readiness gates carry), after which the gates
  wait for the group again;
- an export a stack still imports that would change or disappear, which CloudFormation
  refuses ("Cannot update export ... as it is in use by ...");
- resources replaced because something their create-only properties reference is replaced;
- an add-on update that needs a step of its own before the deploy (task governance across
  its Kueue CRD migration).
Replacement is judged from the create-only properties in cfn-lint's resource schemas.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cli import revision
from cli.review import config_diff, replacement
from cli.review.assembly import StackSummary, import_names, load_stacks
from infra import versions

# Losing one of these loses a GPU cluster, or data.
CRITICAL_TYPES = ("AWS::EKS::Cluster", "AWS::SageMaker::Cluster", "AWS::S3::Bucket", "AWS::KMS::Key", "AWS::FSx::FileSystem")
# Instance-group fields whose change makes HyperPod replace every node of the group (the table of
# what each property does to running nodes, with its sources: cli/review/replacement.py).
NODE_REPLACING_FIELDS = tuple(k for k, (effect, _) in replacement.GROUP_PROPERTY_EFFECTS.items() if effect == replacement.REPLACE)
# Not deployed infrastructure: CDK's version-reporting resource.
IGNORED_TYPES = ("AWS::CDK::Metadata",)


class BaselineError(ValueError):
    """--against names something that cannot be read as templates."""


class FirstDeploy(BaselineError):
    """The baseline deploys nothing of this environment where this config deploys it. `revision`:
    the baseline is a git revision, the base of a change, of which this is then a first deploy
    there; a folder or template named to compare with is refused instead."""

    revision: bool = False
    where: str = ""


class BaselineNew(FirstDeploy):
    """The baseline revision's cdk.json has no such environment: the change adds it."""

    def __init__(self, description: str, env: str):
        self.revision = True
        self.where = f"{description} has no environment {env} in its cdk.json: this change adds it"
        super().__init__(f"--against {self.where}")


class BaselineElsewhere(FirstDeploy):
    """The baseline's stacks deploy to another account or region: nothing of it is where this deploys."""

    def __init__(self, description: str, elsewhere: list[str], env: str, target: str, revision: bool = False,
                 context: dict | None = None, commit: str | None = None):
        self.revision, self.elsewhere, self.target = revision, elsewhere, target
        self.context = context  # the revision's cdk.json context, where it was read: what stays behind (ENVIRONMENT MOVED)
        self.commit = commit  # the revision's commit: the lines of cdk.json the change wrote (cli/review/sarif.py)
        self.where = f"{description} deploys {env} to {', '.join(elsewhere)}, this config to {target}"
        super().__init__(f"--against {self.where}; a baseline of another account or region compares nothing")


@dataclass
class Baseline:
    description: str
    templates: dict[str, dict]  # stack name -> template
    whole_app: bool  # an assembly: a stack missing from it is new, and one missing from the change is removed
    environments: dict[str, str] = field(default_factory=dict)  # stack -> aws://account/region, where the baseline says
    revision: str | None = None  # the commit, where the baseline is a git revision's app
    this_checkout: bool = False  # a revision that is this checkout: compared with what it synthesizes itself
    context: dict | None = None  # the cdk.json context it was made of, where known (cli.config_diff)


@dataclass
class Change:
    stack: str
    resource: str
    type: str
    action: str  # added | removed | modified | replaced
    because: list[str] = field(default_factory=list)

    @property
    def critical(self) -> bool:
        return self.type in CRITICAL_TYPES and self.action in ("replaced", "removed")


def _template_of(doc: dict) -> dict:
    """A template, or `aws cloudformation get-template` output (TemplateBody as an object or a string)."""
    body = doc.get("TemplateBody", doc)
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            from cfnlint.decode.cfn_yaml import loads  # CloudFormation YAML, with its short-form tags

            body = loads(body)
    return body


def snapshot(outdir: Path, dest: Path) -> None:
    """Keep an assembly's manifest, templates and config (no assets) as a later review's baseline.
    Written beside `dest` and moved into place, so a reader never finds half of one."""
    import shutil

    part = dest.with_name(dest.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    for path in [outdir / "manifest.json", outdir / config_diff.CONFIG_FILE, *outdir.glob("*.template.json")]:
        if path.is_file():
            shutil.copy2(path, part / path.name)
    shutil.rmtree(dest, ignore_errors=True)
    part.rename(dest)


def _environments(folder: Path) -> dict[str, str]:
    manifest = json.loads((folder / "manifest.json").read_text())
    return {name: a["environment"] for name, a in manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack"}


def _assembly(folder: Path, description: str) -> Baseline:
    if not (folder / "manifest.json").exists():
        raise BaselineError(f"--against {folder}: no manifest.json; pass a cloud assembly folder or template files")
    made_of = config_diff.recorded(folder)
    return Baseline(description, {s.name: s.template for s in load_stacks(folder)}, whole_app=True,
                    environments=_environments(folder), context=made_of[0] if made_of else None)


def load_baseline(specs: list[str], stack_names: list[str], *, repo: Path | None = None, env: str = "",
                  cache: Path | None = None, progress=lambda line: None, target: str | None = None) -> Baseline:
    """specs: one git revision (with `repo`: synthesized as of then, for `env`, or taken from
    `cache` where it holds that revision's tree), one assembly folder, or template files
    (`STACK=FILE`, or FILE named after its stack). A revision whose cdk.json has no `env`, or
    puts it in another account or region than `target` (aws://account/region), raises
    FirstDeploy before anything is synthesized."""
    if len(specs) == 1 and repo is not None and (commit := git_revision(specs[0], repo)) is not None:
        return _revision(repo, specs[0], commit, env, cache, progress, target)
    if len(specs) == 1 and Path(specs[0]).is_dir():
        return _assembly(Path(specs[0]), specs[0])
    templates = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            if not Path(spec).exists():
                where = "a git revision" if repo is not None else "a git revision (this is no git checkout)"
                raise BaselineError(f"--against {spec}: neither {where}, an assembly folder nor a template file")
            path = spec
            name = Path(spec).name.removesuffix(".json").removesuffix(".template")
        if name not in stack_names:
            raise BaselineError(f"--against {spec}: no stack named {name!r} in this app; use STACK=FILE with one of {', '.join(stack_names)}")
        try:
            templates[name] = _template_of(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as err:
            raise BaselineError(f"--against {spec}: {err}") from None
    return Baseline(", ".join(specs), templates, whole_app=False)


def git_revision(spec: str, repo: Path | None) -> str | None:
    """The commit `spec` names where --against reads it as a git revision (not a path, not STACK=FILE)."""
    if repo is None or Path(spec).exists() or "=" in spec:
        return None
    return revision.resolve(repo, spec)


def _revision(repo: Path, spec: str, commit: str, env: str, cache: Path | None, progress, target: str | None = None) -> Baseline:
    """That revision's app for `env`: from `cache` where an earlier review synthesized the same
    tree, else synthesized in a worktree (and kept in `cache`); none when it is this checkout."""
    if revision.is_this_checkout(repo, commit):
        return Baseline(f"{spec} ({commit[:12]}: the same revision as this checkout, whose tree is clean)", {}, True, this_checkout=True)
    description = f"{spec} ({commit[:12]})"
    committed = revision.committed_context(repo, commit)
    if committed is not None:
        # What the revision's own cdk.json says settles a first deploy without synthesizing it.
        if env not in (committed.get("environments") or {}):
            raise BaselineNew(description, env)
        block = config_diff.merged(committed, env)
        where = f"aws://{block.get('account')}/{block.get('region')}"
        if target is not None and isinstance(block.get("account"), str) and isinstance(block.get("region"), str) and where != target:
            raise BaselineElsewhere(description, [where], env, target, revision=True, context=committed, commit=commit)
    kept = cache / revision.baseline_key(repo, commit, env) if cache is not None else None
    if kept is not None and (kept / "manifest.json").is_file():
        kept.touch()  # the most recently used are kept longest
        progress(f"baseline: {env} as of {spec}, synthesized earlier from the same tree ({kept})")
        return _with_revision(_assembly(kept, description), repo, commit)
    progress(f"synthesizing {env} as of {spec} in a temporary worktree, offline ...")
    with tempfile.TemporaryDirectory(prefix="hyperpod-baseline-") as tmp:
        try:
            revision.synthesize(repo, spec, commit, env, Path(tmp) / "assembly")
        except revision.RevisionError as err:
            raise BaselineError(str(err)) from None
        if kept is not None:
            snapshot(Path(tmp) / "assembly", kept)
            revision.prune(cache)
        return _with_revision(_assembly(Path(tmp) / "assembly", description), repo, commit)


def _with_revision(baseline: Baseline, repo: Path, commit: str) -> Baseline:
    """The revision's commit, and where it was synthesized by code that does not record its
    config, its cdk.json as committed."""
    baseline.revision = commit
    if baseline.context is None:
        baseline.context = revision.committed_context(repo, commit)
    return baseline


def check_environment(baseline: Baseline, env: str, target: str, names_by_env: dict[str, list[str]]) -> None:
    """Refuse a baseline of another environment, or of another account or region (target:
    aws://account/region of `env`): every stack would read as removed and added. Only the
    environment's own stacks are held to its account and region: the pipeline's (the delivery
    stack, in the delivery block's account and region, and CodePipeline's support stack in each
    other region a wave reaches) are compared as they are, whatever regions they stand in."""
    ours = set(names_by_env.get(env, []))
    theirs = [other for other, names in names_by_env.items() if other != env and baseline.templates and set(baseline.templates) <= set(names)]
    if theirs and not set(baseline.templates) & ours:
        raise BaselineError(f"--against {baseline.description}: a baseline of environment {theirs[0]}, not {env}; compare {env} with a baseline of {env}")
    held = {where for stack, where in baseline.environments.items() if not ours or stack in ours}
    elsewhere = sorted(held - {target})
    if elsewhere:
        raise BaselineElsewhere(baseline.description, elsewhere, env, target, revision=baseline.revision is not None)


def without_asset_metadata(template: dict) -> dict:
    """The template without the `aws:asset:*` metadata `cdk synth` adds for asset bundling: it says
    where a local asset came from, deploys nothing, and differs between every two synths."""
    resources = {}
    for lid, res in template.get("Resources", {}).items():
        meta = {k: v for k, v in (res.get("Metadata") or {}).items() if not k.startswith("aws:asset:")}
        res = {k: v for k, v in res.items() if k != "Metadata"}
        resources[lid] = {**res, "Metadata": meta} if meta else res
    return {**template, "Resources": resources} if "Resources" in template else template


def _resources(template: dict) -> dict:
    return {lid: r for lid, r in template.get("Resources", {}).items() if r.get("Type") not in IGNORED_TYPES}


def _deployed(resource: dict) -> dict:
    # Construct metadata (paths, nag acknowledgments) changes nothing that is deployed.
    return {k: v for k, v in resource.items() if k != "Metadata"}


def differs(before: dict, after: dict) -> bool:
    """Whether two templates differ in anything deployed: any section (outputs, rules,
    parameters, conditions) but construct metadata and CDK's version-reporting resource."""

    def deployed(template: dict) -> dict:
        resources = {lid: _deployed(r) for lid, r in _resources(template).items()}
        return {**template, "Resources": resources}

    return deployed(before) != deployed(after)


def _mentions(value, names: set[str]) -> list[str]:
    """The logical ids among `names` that a value references (Ref, GetAtt, Sub)."""
    text = json.dumps(value)
    return sorted(n for n in names if f'"Ref": "{n}"' in text or f'"Fn::GetAtt": ["{n}"' in text or "${" + n in text)


def _export_sources(template: dict) -> dict[str, list[str]]:
    """export name -> the logical ids its value is built from."""
    resources = set(_resources(template))
    return {
        o["Export"]["Name"]: _mentions(o["Value"], resources)
        for o in template.get("Outputs", {}).values()
        if isinstance(o.get("Export", {}).get("Name"), str)
    }


def compare(old: Baseline, new_stacks: list[StackSummary], region: str) -> dict:
    """Every resource change, and the callouts, as plain data."""
    new = {s.name: s.template for s in new_stacks}
    names = [s.name for s in new_stacks] + [n for n in old.templates if n not in new]
    compared = [n for n in names if n in old.templates or old.whole_app]
    changes: list[Change] = []
    replaced: dict[str, set[str]] = {n: set() for n in names}
    for name in compared:
        before = _resources(old.templates.get(name, {}))
        after = _resources(new.get(name, {}))
        for lid in sorted(set(before) | set(after)):
            if lid not in before:
                changes.append(Change(name, lid, after[lid]["Type"], "added"))
            elif lid not in after:
                changes.append(Change(name, lid, before[lid]["Type"], "removed"))
            elif _deployed(before[lid]) != _deployed(after[lid]):
                because = replacement.replaced_by(before[lid], after[lid], region)
                changes.append(Change(name, lid, after[lid]["Type"], "replaced" if because else "modified", because))
                if because:
                    replaced[name].add(lid)
    callouts = _cascade(old, new, changes, replaced, region)
    callouts += _exports_in_use(old, new, replaced)
    groups_replaced: dict[str, list[str]] = {}
    callouts += _instance_groups(old, new, replaced, groups_replaced)
    callouts += _addon_migrations(old, new)
    callouts += _cluster_policies(old, new)
    callouts += _auto_patch(old, new)
    callouts = [f"{c.action.upper()}: {c.type} `{c.resource}` in {c.stack} ({', '.join(c.because) or 'removed'})" for c in changes if c.critical] + callouts
    stacks_added = [n for n in new if old.whole_app and n not in old.templates]
    stacks_removed = [n for n in old.templates if n not in new]
    for name in stacks_removed:
        callouts.append(
            f"STACK LEFT BEHIND: {name} is no longer in the app; cdk deploy does not delete it "
            f"(run `cdk destroy {name}` once nothing imports from it)"
        )
    return {
        "against": old.description,
        "stacks_compared": compared,
        "stacks_added": stacks_added,
        "stacks_removed": stacks_removed,
        "groups_replaced": groups_replaced,
        "callouts": callouts,
        "changes": [
            {"stack": c.stack, "resource": c.resource, "type": c.type, "action": c.action, "because": c.because, "critical": c.critical}
            for c in sorted(changes, key=lambda c: (not c.critical, c.stack, c.resource))
        ],
    }


def _cascade(old: Baseline, new: dict, changes: list[Change], replaced: dict[str, set[str]], region: str) -> list[str]:
    """Resources whose create-only properties reference a replaced resource (in their stack,
    or through an import of an export built from one) are replaced too. Repeats until stable."""
    by_key = {(c.stack, c.resource): c for c in changes}
    callouts = []
    grew = True
    while grew:
        grew = False
        changed_exports = {
            export: (stack, lids)
            for stack, template in new.items()
            for export, sources in _export_sources(template).items()
            if (lids := set(sources) & replaced.get(stack, set()))
        }
        for stack, template in new.items():
            for lid, res in _resources(template).items():
                if lid in replaced[stack] or lid not in _resources(old.templates.get(stack, {})):
                    continue
                for pointer, value in replacement.create_only_values(res, region).items():
                    via = _mentions(value, replaced[stack])
                    via += [f"{changed_exports[n][0]}/{'/'.join(sorted(changed_exports[n][1]))}" for n in import_names(value) if n in changed_exports]
                    if via:
                        replaced[stack].add(lid)
                        change = by_key.get((stack, lid)) or Change(stack, lid, res["Type"], "replaced")
                        change.action, change.because = "replaced", sorted(set(change.because) | {pointer})
                        if (stack, lid) not in by_key:
                            changes.append(change)
                            by_key[(stack, lid)] = change
                        callouts.append(f"REPLACED WITH IT: {res['Type']} `{lid}` in {stack}: {pointer} references {', '.join(via)}, which is replaced")
                        grew = True
                        break
    return callouts


def _exports_in_use(old: Baseline, new: dict, replaced: dict[str, set[str]]) -> list[str]:
    """An export that a deployed stack imports may neither disappear nor change value."""
    importers: dict[str, list[str]] = {}
    for stack, template in old.templates.items():
        for name in set(import_names(template)):
            importers.setdefault(name, []).append(stack)
    callouts = []
    for stack, template in old.templates.items():
        before = _export_sources(template)
        after = _export_sources(new[stack]) if stack in new else {}
        for export, sources in before.items():
            users = [u for u in importers.get(export, []) if u != stack]
            if not users:
                continue
            if export not in after:
                callouts.append(f"REFUSED: {stack} would stop exporting {export}, which {', '.join(users)} still imports")
            elif set(after[export]) & replaced.get(stack, set()):
                callouts.append(
                    f"REFUSED: export {export} of {stack} changes value ({', '.join(sorted(set(after[export]) & replaced[stack]))} "
                    f"is replaced) while {', '.join(users)} imports it; deploy the importers without it first"
                )
    return callouts


def _groups(template: dict) -> dict[str, dict]:
    return {
        g["InstanceGroupName"]: g
        for r in _resources(template).values()
        if r["Type"] == "AWS::SageMaker::Cluster"
        for g in r.get("Properties", {}).get("InstanceGroups", [])
    }


def node_specs(template: dict) -> dict[str, dict]:
    """Instance group -> the properties the node gate carries for it (stacks/hyperpod.py
    ROLLS_NODES: what rolls or replaces the group's nodes)."""
    return {
        group: spec
        for r in _resources(template).values()
        if r["Type"] == "Custom::HyperPodNodesReady" and str(r.get("Properties", {}).get("Link", "1/1")).startswith("1/")
        for group, spec in r.get("Properties", {}).get("NodeSpecs", {}).items()
    }


def _instance_groups(old: Baseline, new: dict, replaced: dict[str, set[str]], groups_replaced: dict[str, list[str]]) -> list[str]:
    """The node callouts; groups_replaced gets, per stack, the groups whose nodes all go."""
    callouts = []
    for stack in new:
        if stack not in old.templates:
            continue
        before, after = _groups(old.templates[stack]), _groups(new[stack])
        for name in sorted(set(before) | set(after)):
            if name not in after:
                callouts.append(f"NODES REMOVED: instance group {name} in {stack} is removed; its {before[name].get('InstanceCount')} node(s) are terminated")
            elif name not in before:
                callouts.append(f"NODES ADDED: instance group {name} in {stack} is new ({after[name].get('InstanceCount')} x {after[name].get('InstanceType', 'flexible types')})")
            else:
                refused = False
                keys_before, keys_after = _volume_keys(before[name]), _volume_keys(after[name])
                if keys_before != keys_after or _mentions(list(keys_after.values()), replaced.get(stack, set())):
                    # HyperPod's smcluster-cmk page: "KMS key transition isn't currently supported ... create a new
                    # instance group with the desired key and delete your old instance group."
                    moved = ", ".join(
                        f"{volume} {_key(keys_before.get(volume))} -> {_key(keys_after.get(volume))}"
                        for volume in sorted(set(keys_before) | set(keys_after))
                        if keys_before.get(volume) != keys_after.get(volume) or _mentions(keys_after.get(volume), replaced.get(stack, set()))
                    )
                    refused = True
                    callouts.append(
                        f"REFUSED: HyperPod cannot change the volume key of instance group {name} in {stack} ({moved}); "
                        "add a new group with the key and remove this one instead"
                    )
                effects = replacement.group_effects(before[name], after[name])
                fields = [f for f in NODE_REPLACING_FIELDS
                          if f in effects.get(replacement.REPLACE, []) or _mentions(after[name].get(f), replaced.get(stack, set()))]

                def detail(props: list[str]) -> str:
                    return ", ".join(f"{f} {_short(before[name].get(f))} -> {_short(after[name].get(f))}" for f in props)

                if refused:  # HyperPod refuses the update: nothing rolls
                    continue
                if fields:
                    callouts.append(f"NODES REPLACED: HyperPod replaces every node of instance group {name} in {stack} ({detail(fields)})")
                    groups_replaced.setdefault(stack, []).append(name)
                rolled = [f for f in effects.get(replacement.ROLL, []) if f not in fields]
                if rolled:
                    callouts.append(
                        f"NODES ROLL: instance group {name} in {stack} changes what its nodes are made with ({detail(rolled)}): "
                        "HyperPod rolls them, each NotReady or Unschedulable in turn; the node and accelerator gates wait "
                        "for the group again before the add-ons and the job"
                    )
                later = effects.get(replacement.NEW_NODES, []) if not fields and not rolled else []
                if later:
                    callouts.append(
                        f"NEW NODES ONLY: instance group {name} in {stack} changes what its new nodes are made with ({detail(later)}): "
                        "its running nodes keep what they were made with, so the group runs mixed until each is replaced "
                        "(a repair, a scale-up, or `aws sagemaker batch-replace-cluster-nodes`)"
                    )
                count_before, count_after = before[name].get("InstanceCount"), after[name].get("InstanceCount")
                if count_before != count_after:
                    callouts.append(f"NODE COUNT: instance group {name} in {stack} goes from {count_before} to {count_after} node(s)")
    return callouts


def _volume_keys(group: dict) -> dict[str, object]:
    """volume (root or secondary) -> the KMS key its ClusterEbsVolumeConfig names (None: an AWS owned key)."""
    keys = {}
    for config in group.get("InstanceStorageConfigs", []):
        ebs = config.get("EbsVolumeConfig", {})
        keys["root volume" if ebs.get("RootVolume") else "secondary volume"] = ebs.get("VolumeKmsKeyId")
    return {volume: key for volume, key in keys.items() if key is not None}


def _key(key) -> str:
    return _short(key) if key is not None else "an AWS owned key"


def _addon_versions(template: dict) -> dict[str, dict]:
    """add-on name -> its properties (AddonVersion absent: EKS picks the version at create time)."""
    return {
        r["Properties"]["AddonName"]: r["Properties"]
        for r in _resources(template).values()
        if r["Type"] == "AWS::EKS::Addon" and isinstance(r.get("Properties", {}).get("AddonName"), str)
    }


def _addon_migrations(old: Baseline, new: dict) -> list[str]:
    """An update of the task governance add-on from below v1.5 to v1.5 or later fails unless
    Kueue's CRD storage versions are migrated first (HyperPod's task governance upgrade page);
    CloudFormation's UpdateAddon does not do it."""
    from addons.task_governance import TaskGovernanceAddon

    name = TaskGovernanceAddon.eks_name
    callouts = []
    for stack in new:
        if stack not in old.templates:
            continue
        before, after = _addon_versions(old.templates[stack]).get(name), _addon_versions(new[stack]).get(name)
        if before is None or after is None:
            continue  # a new add-on installs the current CRDs; a removed one migrates nothing
        version_before, version_after = (_pinned(p) for p in (before, after))
        crosses = versions.crosses_task_governance_migration(version_before, version_after)
        if crosses is False:
            continue
        if crosses:
            what = f"goes from {version_before} to {version_after}, across the Kueue CRD migration of {_line(versions.TASK_GOVERNANCE_CRD_MIGRATION)}"
        else:
            cluster = after.get("ClusterName") if isinstance(after.get("ClusterName"), str) else "<eks cluster>"
            what = (
                f"is pinned to {version_after} where the baseline left the version to EKS; if "
                f"`aws eks describe-addon --cluster-name {cluster} --addon-name {name} --query addon.addonVersion` "
                f"prints a version below {_line(versions.TASK_GOVERNANCE_CRD_MIGRATION)}, it crosses the Kueue CRD migration"
            )
        steps = "; ".join(f"({i}) {step}" for i, step in enumerate(versions.TASK_GOVERNANCE_MIGRATION_STEPS, 1))
        callouts.append(
            f"MIGRATE FIRST: task governance add-on {name} in {stack} {what}. A plain update across it fails "
            f"({versions.TASK_GOVERNANCE_MIGRATION_ERROR}). Before cdk deploy, upgrade it with the migration: the "
            f"HyperPod console's upgrade option, or by hand: {steps} ({versions.TASK_GOVERNANCE_UPGRADE_PAGE})"
        )
    return callouts


# What an AWS::EKS::Cluster without each property gets (botocore's eks model, UpgradePolicyRequest:
# "The default value is EXTENDED"; deletion protection is off unless asked).
CLUSTER_POLICY_DEFAULTS = {"UpgradePolicy": {"SupportType": "EXTENDED"}, "DeletionProtection": False}


def _cluster_policies(old: Baseline, new: dict) -> list[str]:
    """A change of an EKS cluster's support tier or deletion protection: who pays for extended
    support and who may delete the control plane, each a decision of its own in review."""
    callouts = []
    for stack, template in new.items():
        before_resources = _resources(old.templates.get(stack, {}))
        for lid, res in _resources(template).items():
            if res.get("Type") != "AWS::EKS::Cluster" or before_resources.get(lid, {}).get("Type") != "AWS::EKS::Cluster":
                continue
            was, now = before_resources[lid].get("Properties", {}), res.get("Properties", {})
            tier = [p.get("UpgradePolicy", CLUSTER_POLICY_DEFAULTS["UpgradePolicy"]).get("SupportType", "EXTENDED") for p in (was, now)]
            if tier[0] != tier[1]:
                why = ("EKS upgrades the control plane itself when standard support ends, and refuses extended billing"
                       if tier[1] == "STANDARD" else "EKS keeps a version past standard support, billed at the extended rate")
                callouts.append(f"SUPPORT TIER: EKS cluster `{lid}` in {stack} goes from {tier[0]} to {tier[1]} support: {why} "
                                f"(eks.upgrade_policy; {versions.SUPPORT_POLICY_SOURCE})")
            guard = [p.get("DeletionProtection", CLUSTER_POLICY_DEFAULTS["DeletionProtection"]) for p in (was, now)]
            if guard[0] != guard[1]:
                what = ("on: DeleteCluster, and so cdk destroy, is refused until it is deployed off" if guard[1] is True
                        else "off: deleting the stack, or the cluster by hand, deletes the control plane")
                callouts.append(f"DELETION PROTECTION: EKS cluster `{lid}` in {stack} turns deletion protection {what} "
                                "(eks.deletion_protection)")
    return callouts


def _auto_patch(old: Baseline, new: dict) -> list[str]:
    """Auto-patching turned on or changed on a group: what the next patch does to it (the rule validate
    states, infra/config/hyperpod.py auto_patch_effect)."""
    from infra import catalogue
    from infra.config.hyperpod import auto_patch_effect

    callouts = []
    for stack, template in new.items():
        before = _groups(old.templates.get(stack, {}))
        for name, group in _groups(template).items():
            patch = group.get("AutoPatchConfig")
            if not isinstance(patch, dict) or patch == before.get(name, {}).get("AutoPatchConfig"):
                continue
            spec = catalogue.lookup(str(group.get("InstanceType", "")))
            count = group.get("InstanceCount")
            effect = auto_patch_effect(str(patch.get("PatchingStrategy")), count if isinstance(count, int) else 0,
                                       spec.accelerators if spec else None)
            callouts.append(f"AUTO PATCH: instance group {name} in {stack}: {effect}")
    return callouts


def _pinned(addon: dict) -> str | None:
    """The add-on version a template pins, or None (unset, or not a literal version)."""
    version = addon.get("AddonVersion")
    return version if isinstance(version, str) and re.fullmatch(r"v\d+\.\d+\.\d+(-eksbuild\.\d+)?", version) else None


def _line(version: str) -> str:
    """v1.5.0-eksbuild.1 -> v1.5"""
    return ".".join(version.split("-")[0].split(".")[:2])


def _short(value) -> str:
    from cli.review.iam_audit import readable

    return str(value) if isinstance(value, (str, int)) or value is None else readable(value)
