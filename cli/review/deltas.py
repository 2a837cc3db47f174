"""Every section of the review as a delta against the baseline: what the change adds to the
bill, to the quotas a deploy needs, to IAM access, to what the internet can reach, to the
running job and to what holds data.

Each section yields plain lines (information, shown beside the totals) and callouts (what a
reviewer must stop at), in the `KIND: detail` form of cli/review/changes.py:
- NEW QUOTA: an instance type the environment did not use (a new type's quota is often 0);
- IAM ON ANY RESOURCE: a role gains a Write or Permissions management action on `*`;
- EXPOSURE: a public endpoint, a public endpoint CIDR or an open security-group rule is added
  or widened (narrowed is information);
- JOB RESTARTS: the job's object changes, or its instance group's nodes are replaced;
- ENDPOINT REDEPLOYS: the endpoint `render-endpoint` prints changes (applying it rolls its servers);
- the teams' and people's callouts, and the jobs a change makes inadmissible (cli/review/people.py), and
  the cluster-wide ones (cli/review/cluster_wide.py).
Callouts that know the config field behind them say so (`anchors`: callout -> field paths),
for the SARIF result's place.
"""

from __future__ import annotations

import ipaddress
import json
import math
from dataclasses import dataclass

from cli.review import cluster_wide, config_diff, cost, exposure, iam_audit, people
from cli.review.assembly import StackSummary, group_instance_type, manifest_text, of_type
from infra import catalogue

LAMBDA_LOG_GROUP = "/LogGroup/Resource"  # aws-cdk-lib's own Lambdas' log groups: counted, not named


def baseline_stacks(templates: dict[str, dict], whole_app: bool, new_stacks: list[StackSummary]) -> list[StackSummary]:
    """The baseline as the sections read it. A partial baseline (deployed templates of some
    stacks) stands in for those stacks only; the others are taken as they are now."""
    if whole_app:
        return [StackSummary(name, template, []) for name, template in templates.items()]
    return [StackSummary(s.name, templates.get(s.name, s.template), s.depends_on) for s in new_stacks]


def compare(before: list[StackSummary], after: list[StackSummary], region: str, replaced_groups: dict[str, set[str]],
            settings: tuple | None = None) -> dict:
    """{"lines": {section: [line]}, "callouts": [callout], "cost": {...}, "iam_levels": {...},
    "new_quotas": [quota]}. replaced_groups: stack -> instance groups whose nodes are replaced;
    settings: (baseline's, this change's) Settings where both configs are known and load, for
    what the admission model says of the jobs (cli/review/people.py)."""
    cost_change = cost.delta(cost.estimate(before, region), cost.estimate(after, region))
    quota_lines, new_quotas = _quotas(before, after)
    iam_lines, iam_callouts, levels = _iam(before, after)
    exposure_lines, exposure_callouts = _exposure(before, after)
    job_lines, job_callouts = _job(before, after, replaced_groups)
    endpoint_lines, endpoint_callouts = _endpoint(settings)
    cluster_lines, cluster_callouts = cluster_wide.compare(before, after, settings[1].env_name if settings else None)
    admitted_lines, admitted_callouts = people.jobs(*settings) if settings else ([], [])
    anchored = people.compare(before, after) + cluster_callouts + job_callouts + endpoint_callouts + admitted_callouts
    lines = {
        "cost": [cost_change["line"]],
        "quotas": quota_lines,
        "iam": iam_lines,
        "exposure": exposure_lines + _alerts(before, after),
        "job": job_lines + endpoint_lines + admitted_lines,
        "cluster": cluster_lines,
        "stateful": _stateful(before, after),
    }
    new_quota_callouts = [f"NEW QUOTA: {line} (new: check your quota; a type new to the account's use is often 0)" for _, line in new_quotas]
    return {
        "lines": lines,
        "callouts": new_quota_callouts + iam_callouts + exposure_callouts + [text for text, _ in anchored],
        "anchors": {text: where for text, where in anchored if where},
        "cost": cost_change,
        "iam_levels": levels,
        "new_quotas": [quota for quota, _ in new_quotas],
    }


# --- quotas -------------------------------------------------------------------------------


def _needs(stacks: list[StackSummary]) -> tuple[dict[str, int], dict[str, int | None]]:
    """(quota name -> nodes at deploy, quota name Karpenter scales from 0 -> the most it asks for)."""
    needs: dict[str, int] = {}
    autoscaled: dict[str, int | None] = {}
    for q in exposure.quotas(stacks):
        if q["needed"] is None:
            autoscaled[q["quota"]] = q.get("most")
            needs.setdefault(q["quota"], 0)
        else:
            needs[q["quota"]] = needs.get(q["quota"], 0) + q["needed"]
    return needs, autoscaled


def _quotas(before: list[StackSummary], after: list[StackSummary]) -> tuple[list[str], list[tuple[str, str]]]:
    """(lines, [(quota, line)] of the quotas the baseline did not need)."""
    (old, old_auto), (new, new_auto) = _needs(before), _needs(after)
    lines, fresh = [], []
    for quota in sorted(set(old) | set(new)):
        most = new_auto.get(quota)
        auto = ("" if quota not in new_auto else f" (autoscaled from 0 by Karpenter: the quota must cover {most} node(s), "
                "the most its NodePool admits)" if most is not None else " (autoscaled from 0 by Karpenter: cover the group's max_count)")
        if quota not in old:
            fresh.append((quota, f"{new[quota]} x {quota}{auto}"))
        elif quota not in new:
            lines.append(f"Quota: {quota} no longer needed (was {old[quota]})")
        elif old[quota] != new[quota] or old_auto.get(quota, -1) != new_auto.get(quota, -1):
            lines.append(f"Quota: {quota}: {old[quota]} -> {new[quota]} node(s) at deploy{auto}")
    lines += _team_coverage(before, after)
    return lines, fresh


def _uncovered(stacks: list[StackSummary]) -> dict[str, tuple[int, int]]:
    """accelerated type -> (nodes no team's compute quota covers, nodes), where teams have quotas."""
    quotas = list(of_type(stacks, "AWS::SageMaker::ComputeQuota"))
    if not quotas:
        return {}
    nodes: dict[str, int] = {}
    for _, _, res in of_type(stacks, "AWS::SageMaker::Cluster"):
        for group in res["Properties"].get("InstanceGroups", []):
            count = group.get("InstanceCount", 0)
            nodes[group_instance_type(group)] = nodes.get(group_instance_type(group), 0) + (count if isinstance(count, int) else 0)
    covered: dict[str, float] = {}
    for _, _, res in quotas:
        for entry in res["Properties"].get("ComputeQuotaConfig", {}).get("ComputeQuotaResources", []):
            kind = catalogue.figures(entry.get("InstanceType", ""))
            if kind is None:  # unknown, or its figures are: no share can be computed
                continue
            share = entry.get("Count")
            if share is None and entry.get("Accelerators") and kind.accelerators:
                share = entry["Accelerators"] / kind.accelerators
            partition = entry.get("AcceleratorPartition") or {}
            per_gpu = kind.mig_profiles.get(str(partition.get("Type", "")).removeprefix("mig-"))
            if share is None and per_gpu and partition.get("Count"):
                share = partition["Count"] / (per_gpu * kind.accelerators)  # as if every GPU were cut this way
            if share is None and entry.get("VCpu"):
                share = entry["VCpu"] / kind.vcpus
            covered[kind.name] = covered.get(kind.name, 0) + (share or 0)
    out = {}
    for itype, count in nodes.items():
        kind = catalogue.lookup(itype)
        if kind and kind.is_accelerated:
            out[itype] = (count - min(count, math.ceil(covered.get(itype, 0) - 1e-9)), count)
    return out


def _team_coverage(before: list[StackSummary], after: list[StackSummary]) -> list[str]:
    old, new = _uncovered(before), _uncovered(after)
    lines = []
    for itype in sorted(set(old) | set(new)):
        if old.get(itype) != new.get(itype) and (new.get(itype, (0, 0))[0] or old.get(itype, (0, 0))[0]):
            now = new.get(itype, (0, 0))
            was = old.get(itype)
            lines.append(
                f"Team quotas: {now[0]} of {now[1]} {itype} node(s) in no team's quota"
                + (f" (was {was[0]} of {was[1]})" if was else "")
            )
    return lines


# --- IAM ----------------------------------------------------------------------------------


# A resource is the one CloudFormation updates where its stack and logical ID are the same: its construct
# path is not (a pipeline's Stage puts its name in every path of a stack taken over from a hand deploy).


def _grants(roles: list[iam_audit.Role]) -> dict[tuple[str, str], tuple[str, set[str]]]:
    return {(r.stack, r.logical_id): (r.path, {a for st in r.statements for a in st.actions}) for r in roles}


def _listed(actions: set[str]) -> str:
    return ", ".join(f"{a} ({iam_audit.access_level(a) or 'unknown'})" for a in sorted(actions))


def _iam(before: list[StackSummary], after: list[StackSummary]) -> tuple[list[str], list[str], dict]:
    old_roles = iam_audit.audit({s.name: s.template for s in before})
    new_roles = iam_audit.audit({s.name: s.template for s in after})
    old_levels, new_levels = iam_audit.by_level(old_roles), iam_audit.by_level(new_roles)
    levels = {level: new_levels.get(level, 0) - old_levels.get(level, 0) for level in new_levels.keys() | old_levels.keys()}
    lines = []
    moved = [f"{level} {old_levels.get(level, 0)} -> {new_levels.get(level, 0)}" for level in new_levels if levels.get(level)]
    moved += [f"{level} {old_levels[level]} -> 0" for level in old_levels if level not in new_levels and old_levels[level]]
    if moved:
        lines.append(f"IAM access levels (distinct actions): {', '.join(moved)}")
    old, new = _grants(old_roles), _grants(new_roles)
    for key in sorted(set(old) | set(new), key=lambda k: (new.get(k) or old[k])[0]):
        role = (new.get(key) or old[key])[0]
        if key not in old:
            lines.append(f"IAM new role `{role}`: {_listed(new[key][1]) or 'no inline actions'}")
        elif key not in new:
            lines.append(f"IAM role removed `{role}`")
        elif old[key][1] != new[key][1]:
            gained, lost = new[key][1] - old[key][1], old[key][1] - new[key][1]
            change = ([f"+ {_listed(gained)}"] if gained else []) + ([f"- {_listed(lost)}"] if lost else [])
            lines.append(f"IAM `{role}`: {'; '.join(change)}")
    was = {(r["stack"], r["id"], r["level"], a) for r in iam_audit.on_any_resource(old_roles) for a in r["actions"]}
    callouts = []
    for row in iam_audit.on_any_resource(new_roles):
        gained = [a for a in row["actions"] if (row["stack"], row["id"], row["level"], a) not in was]
        if gained:
            callouts.append(f"IAM ON ANY RESOURCE: `{row['role']}` gains {row['level']} on `*`: {', '.join(gained)}")
    return lines, callouts, levels


# --- exposure -----------------------------------------------------------------------------


def _net(cidr: str):
    return ipaddress.ip_network(cidr, strict=False)


def _outside(cidrs: list[str], others: list[str]) -> list[str]:
    """The CIDRs that no CIDR in `others` contains."""
    return [c for c in cidrs if not any(_net(c).version == _net(o).version and _net(c).subnet_of(_net(o)) for o in others)]


def _exposure(before: list[StackSummary], after: list[StackSummary]) -> tuple[list[str], list[str]]:
    lines, callouts = [], []
    old = {(e["stack"], e["id"]): e for e in exposure.public_endpoints(before)}
    new = {(e["stack"], e["id"]): e for e in exposure.public_endpoints(after)}
    for key in sorted(set(old) | set(new)):
        resource = (new.get(key) or old[key])["resource"]
        if key not in old:
            callouts.append(f"EXPOSURE: the Kubernetes API endpoint `{resource}` becomes public, admitting {', '.join(new[key]['cidrs'])}")
        elif key not in new:
            lines.append(f"Exposure narrowed: the Kubernetes API endpoint `{resource}` is no longer public (admitted {', '.join(old[key]['cidrs'])}): "
                         f"{_who_loses_kubectl(after)} from outside the VPC loses the API")
        else:
            now, then = new[key]["cidrs"], old[key]["cidrs"]
            wider, narrower = _outside(now, then), _outside(then, now)
            was = f"(was {', '.join(then)})"
            if wider:
                callouts.append(f"EXPOSURE: the public Kubernetes API endpoint `{resource}` now admits {', '.join(now)} {was}")
            elif narrower:
                lines.append(f"Exposure narrowed: the public Kubernetes API endpoint `{resource}` admits {', '.join(now)} {was}: "
                             f"{_who_loses_kubectl(after)} from outside {', '.join(now)} loses the API")
    rules_before = exposure.open_ingress(before)
    rules_after = exposure.open_ingress(after)
    for rule in rules_after:
        same = [r["cidr"] for r in rules_before if (r["stack"], r["id"]) == (rule["stack"], rule["id"]) and r["ports"] == rule["ports"]]
        if _outside([rule["cidr"]], same):
            was = f" (was {', '.join(same)})" if same else ""
            callouts.append(f"EXPOSURE: security group rule `{rule['resource']}` admits {rule['cidr']} (outside the VPC) on {rule['ports']}{was}")
    for rule in rules_before:
        same = [r["cidr"] for r in rules_after if (r["stack"], r["id"]) == (rule["stack"], rule["id"]) and r["ports"] == rule["ports"]]
        if _outside([rule["cidr"]], same):
            lines.append(f"Exposure narrowed: security group rule `{rule['resource']}` no longer admits {rule['cidr']} on {rule['ports']}")
    return lines, callouts


def _who_loses_kubectl(stacks: list[StackSummary]) -> str:
    """The principals with an access entry (cli/review/people.py): who runs kubectl, wherever they are."""
    principals = sorted(people.access(stacks))
    return f"kubectl of {', '.join(principals)}" if principals else "kubectl"


def alert_emails(stacks: list[StackSummary]) -> set[str]:
    """The e-mail addresses the alerts go to (SNS e-mail subscriptions)."""
    return {str(res["Properties"].get("Endpoint")) for _, _, res in of_type(stacks, "AWS::SNS::Subscription")
            if res.get("Properties", {}).get("Protocol") == "email"}


def _alerts(before: list[StackSummary], after: list[StackSummary]) -> list[str]:
    old, new = alert_emails(before), alert_emails(after)
    lines = [f"Alerts: e-mailed to {address} from now on (a new subscriber: SNS sends it a confirmation first, and "
             "nothing reaches it until it confirms)" for address in sorted(new - old)]
    return lines + [f"Alerts: no longer e-mailed to {address}" for address in sorted(old - new)]


# --- the job ------------------------------------------------------------------------------


@dataclass
class Job:
    stack: str
    name: str
    manifest: str  # the manifest property as deployed (tokens included): what a change re-applies
    nodes: int
    gpus_per_node: int  # whole accelerators (GPUs, Neuron devices)
    slices_per_node: dict[str, int]  # MIG profile -> slices: parts of GPUs, never counted as GPUs
    processes_per_node: str
    memory: str
    group: str
    obj: dict

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def slices(self) -> str:
        """The MIG slices the job asks for in all, e.g. `4 x 1g.10gb`, or `0`."""
        return ", ".join(f"{self.nodes * n} x {profile}" for profile, n in sorted(self.slices_per_node.items())) or "0"


MIG_RESOURCE = "nvidia.com/mig-"


def jobs(stacks: list[StackSummary]) -> dict[str, Job]:
    """namespace/name -> the HyperPodPyTorchJob a stack applies."""
    out = {}
    for stack, _, res in of_type(stacks, "Custom::AWSCDK-EKS-KubernetesResource"):
        raw = res.get("Properties", {}).get("Manifest")
        try:
            objects = json.loads(manifest_text(raw))
        except (TypeError, KeyError, ValueError):
            continue
        for obj in objects:
            if obj.get("kind") != "HyperPodPyTorchJob":
                continue
            replica = obj["spec"]["replicaSpecs"][0]
            pod = replica["template"]["spec"]
            limits = pod["containers"][0].get("resources", {}).get("limits", {})
            terms = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
            groups = [
                v
                for term in terms.get("nodeSelectorTerms", [])
                for e in term.get("matchExpressions", [])
                if e.get("key") == "sagemaker.amazonaws.com/instance-group-name"
                for v in e.get("values", [])
            ]
            gpus = sum(int(v) for k, v in limits.items() if k in ("nvidia.com/gpu", "aws.amazon.com/neuron"))
            slices = {k.removeprefix(MIG_RESOURCE): int(v) for k, v in limits.items() if k.startswith(MIG_RESOURCE)}
            meta = obj["metadata"]
            out[f"{meta.get('namespace', 'default')}/{meta['name']}"] = Job(
                stack.name, meta["name"], json.dumps(raw, sort_keys=True), int(replica.get("replicas", 1)), gpus, slices,
                str(obj["spec"].get("nprocPerNode", "?")), str(limits.get("memory", "?")), groups[0] if groups else "", obj,
            )
    return out


def _parts(obj: dict) -> dict[str, object]:
    """The job's fields a reviewer reads, by a short dotted name: the object's metadata, its spec,
    the replica spec, the pod spec and its container."""
    spec = obj.get("spec", {})
    replica = (spec.get("replicaSpecs") or [{}])[0]
    pod = replica.get("template", {}).get("spec", {})
    container = (pod.get("containers") or [{}])[0]
    parts = {f"metadata.{k}": v for k, v in obj.get("metadata", {}).items()}
    parts |= {f"spec.{k}": v for k, v in spec.items() if k != "replicaSpecs"}
    parts |= {f"replicas.{k}": v for k, v in replica.items() if k != "template"}
    parts |= {f"pod.{k}": v for k, v in pod.items() if k != "containers"}
    parts |= {f"container.{k}": v for k, v in container.items()}
    return parts


# The label aws-cdk-lib puts on every object a stack applies, named from the construct's path, for
# `kubectl apply --prune`: a pipeline's Stage renames it on every object of a stack taken over from a
# hand deploy. A change to an object's metadata alone is no new desired state: a custom resource's
# metadata.generation "is incremented for all changes, except for changes to .metadata or .status"
# (Kubernetes, CustomResourceDefinition status subresource), so the operator has nothing to restart.
CDK_PRUNE_LABEL = "aws.cdk.eks/prune-"


def _without_prune_label(obj: dict) -> dict:
    labels = {k: v for k, v in (obj.get("metadata", {}).get("labels") or {}).items() if not k.startswith(CDK_PRUNE_LABEL)}
    return {**obj, "metadata": {**obj.get("metadata", {}), "labels": labels}}


def _prune_label_alike(manifest) -> str:
    """The manifest as deployed (its references included) with every prune label's name alike."""
    import re

    return re.sub(re.escape(CDK_PRUNE_LABEL) + r"[0-9a-f]+", CDK_PRUNE_LABEL, json.dumps(manifest, sort_keys=True))


def changed_fields(old: dict, new: dict) -> list[str]:
    a, b = _parts(_without_prune_label(old)), _parts(_without_prune_label(new))
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def _arrow(label: str, old, new) -> str:
    return f"{label} {old} -> {new}" if old != new else f"{label} {new}"


def _job(before: list[StackSummary], after: list[StackSummary], replaced_groups: dict[str, set[str]]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(lines, [(callout, the config fields it may come from)])."""
    old, new = jobs(before), jobs(after)
    replaced = {g for groups in replaced_groups.values() for g in groups}
    lines, callouts = [], []
    for key in sorted(set(old) | set(new)):
        if key not in old:
            j = new[key]
            lines.append(f"Job {j.name}: new, {j.gpus} GPU(s) on {j.nodes} node(s) of group {j.group}")
            continue
        if key not in new:
            lines.append(f"Job {old[key].name}: removed; the running job stops")
            continue
        a, b = old[key], new[key]
        why = []
        if a.manifest != b.manifest and _prune_label_alike(a.manifest) == _prune_label_alike(b.manifest):
            lines.append(f"Job {b.name}: only aws-cdk-lib's prune label changes (metadata alone: no new generation, it runs on)")
        elif a.manifest != b.manifest:
            fields = changed_fields(a.obj, b.obj)
            why.append(f"its object changes ({', '.join(fields) if fields else 'a referenced value: its image or a name'})")
        if b.group in replaced:
            why.append(f"instance group {b.group}'s nodes are replaced")
        if not why:
            continue
        shape = ", ".join(
            [
                _arrow("GPUs", a.gpus, b.gpus),
                *([_arrow("MIG slices", a.slices, b.slices)] if a.slices_per_node or b.slices_per_node else []),
                _arrow("nodes", a.nodes, b.nodes),
                _arrow("processes per node", a.processes_per_node, b.processes_per_node),
                _arrow("memory per node", a.memory, b.memory),
            ]
        )
        lines.append(f"Job {b.name}: {shape}")
        # The job's own fields first; else what replaced its group's nodes.
        where = ["sample_job", f"hyperpod.instance_groups[{b.group}]"]
        callouts.append((f"JOB RESTARTS: the running job {b.name} restarts: {' and '.join(why)} ({shape})", where))
    return lines, callouts


def _endpoint(settings: tuple | None) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """ENDPOINT REDEPLOYS: the InferenceEndpointConfig `render-endpoint` prints for the config changes
    (compared with one image on both sides). The stacks deploy no endpoint, a team applies it: the
    deploy leaves the running one as it is, and applying it again rolls its model servers. Where its
    port moves, the deploy moves the serving namespace's opening with it, ahead of the endpoint."""
    if not settings or not (settings[0].inference.enabled and settings[1].inference.enabled):
        return [], []
    from manifests import endpoint as endpoint_manifest

    (a,), (b,) = (endpoint_manifest.objects(s, image="<image>") for s in settings)
    if a == b:
        return [], []
    old, new = config_diff.flatten(a), config_diff.flatten(b)
    fields = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    name, ports = b["metadata"]["name"], [s.inference.endpoint.port for s in settings]
    text = (f"ENDPOINT REDEPLOYS: the endpoint {name} that `render-endpoint` prints changes ({', '.join(fields)}): the deploy "
            "leaves the running endpoint as it is; applying it again rolls its model servers")
    if ports[0] != ports[1] and all(endpoint_manifest.opening(s) is not None for s in settings):
        text += (f", and the deploy moves its namespace's opening from port {ports[0]} to {ports[1]}: the running endpoint is "
                 "unreachable from then until it is applied again")
    return [f"Endpoint {name}: {len(fields)} field(s) of its InferenceEndpointConfig change"], [(text, ["inference.endpoint", "inference"])]


# --- what holds data ----------------------------------------------------------------------


def _stateful(before: list[StackSummary], after: list[StackSummary]) -> list[str]:
    old = {(r["stack"], r["id"], r["type"]): r for r in exposure.stateful(before)}
    new = {(r["stack"], r["id"], r["type"]): r for r in exposure.stateful(after)}
    lines = []
    lambda_logs: dict[tuple[str, str], int] = {}
    for key in sorted(set(old) ^ set(new), key=lambda k: (k[0], (new.get(k) or old[k])["resource"], k[2])):
        added = key in new
        stack, _, type_ = key
        resource = (new if added else old)[key]["resource"]
        if resource.endswith(LAMBDA_LOG_GROUP):
            lambda_logs[(stack, "added" if added else "removed")] = lambda_logs.get((stack, "added" if added else "removed"), 0) + 1
            continue
        row = (new if added else old)[key]
        policy = f"on delete: {row['deletion_policy'].lower()}"
        lines.append(f"Stateful {'added' if added else 'removed'}: {type_.split('::', 1)[1]} `{resource}` ({policy})")
    for (stack, what), n in sorted(lambda_logs.items()):
        lines.append(f"Stateful {what}: {n} log group(s) of CDK-built Lambdas in {stack}")
    return lines

