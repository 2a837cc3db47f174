"""Serving's rules that span fields: the endpoint's team, priority and group, and whether its
replicas fit their team's quota (infra/admission.py, the jobs' model); what the operator needs of
the network and the cluster is in infra/prerequisites.py."""

from __future__ import annotations

from infra import admission, catalogue
from infra.config.base import Problems
from infra.config.inference import INFERENCE_ADDON_NAME
from infra.config.settings import Settings


def check_inference(s: Settings, p: Problems) -> None:
    inf = s.inference
    if not inf.enabled:
        return
    if not inf.existing:
        p.warn(eks_version_warning(s))
    ep, gov = inf.endpoint, s.governance
    classes = {c.name: c.weight for c in gov.priority_classes}
    if gov.teams and ep.priority not in classes:
        p.error("inference.endpoint.priority", ep.priority, f"is not a governance.priority_classes name; valid: {', '.join(classes)}")
    elif ep.priority in classes and s.sample_job.enabled and s.sample_job.priority in classes \
            and classes[ep.priority] <= classes[s.sample_job.priority]:
        p.warn(f"inference.endpoint.priority: {ep.priority!r} (weight {classes[ep.priority]}) is not above the sample job's "
               f"{s.sample_job.priority!r} ({classes[s.sample_job.priority]}): serving waits behind training instead of preempting it "
               "(the HyperPod page \"Task governance for model deployment\": a dedicated class with a high weight)")
    team = ep.team or s.sample_job.team
    if ep.team is not None and ep.team not in {t.name for t in gov.teams}:
        p.error("inference.endpoint.team", ep.team, f"is not a governance.teams name; valid: {', '.join(t.name for t in gov.teams) or 'none'}")
    name = ep.instance_group or s.sample_job.instance_group
    group = s.instance_group(name)
    field = "inference.endpoint.instance_group"
    if group is None:
        p.error(field, name, f"is not an instance group; valid: {', '.join(g.name for g in s.hyperpod.instance_groups)}")
        return
    spec = catalogue.figures(group.instance_type)
    if spec is not None and not spec.accelerators:
        p.error(field, name, f"is a group of {group.instance_type}, which has no GPU to serve the model on")
        return
    if spec is not None and ep.gpus_per_replica > spec.accelerators:
        p.error("inference.endpoint.gpus_per_replica", ep.gpus_per_replica, f"is more than a node of {group.instance_type} has ({spec.accelerators})")
        return
    if team is not None and any(p.named(a) for a in ("inference.endpoint", "governance")):
        return
    verdict = admission.endpoint(s)
    if verdict is not None:
        verdict.report(p, warn=("borrowing", "disabled", "unmanaged"))


def eks_version_warning(s: Settings) -> str:
    """No offline source publishes the add-on's Kubernetes range: a deploy on a version it has no
    build for fails CreateAddon, so preflight asks the account."""
    return (f"inference.enabled: no source here states which Kubernetes versions {INFERENCE_ADDON_NAME} is published for; "
            f"`hyperpod-cdk preflight` asks the account (DescribeAddonVersions) whether it has a version for eks.version {s.eks.version}")
