"""`hyperpod-cdk render-job`: the sample HyperPodPyTorchJob from config with the flags' overrides,
validated by the same rules as `cdk synth` (validation.override), its errors said as the flags typed."""

from __future__ import annotations

import re
import sys

from infra import config, validation
from infra.checks.sample_job import memory_note
from manifests import job as job_manifest


def render(deployed: config.Settings, args) -> str:
    """The job's YAML for `deployed` with the flags' overrides, held to the same rules as cdk synth;
    a refusal names the flag that gave the field."""
    overrides = {
        k: v
        for k, v in {"nodes": args.nodes, "team": args.team, "priority": args.priority, "max_steps": args.max_steps,
                     "image_uri": args.image}.items()
        if v is not None
    }
    patch: dict = {"sample_job": {**overrides, "enabled": True}}
    if args.preferred_topology or args.required_topology:
        mode = "preferred" if args.preferred_topology else "required"
        patch["topology"] = {"mode": mode, "level": args.preferred_topology or args.required_topology}
    try:
        settings, warnings = validation.override(deployed, patch)  # the same rules as cdk synth
    except config.ConfigError as err:  # said as what was typed: the flag, where a flag gave the field
        given = {field: flag for field, flag in RENDER_FLAGS.items() if _given(patch, field)}
        if "topology.level" in given:
            given["topology.level"] = "--preferred-topology" if args.preferred_topology else "--required-topology"
        raise config.ConfigError([_as_flags(line, given) for line in err.problems], err.warnings) from None
    for line in [*warnings, *filter(None, [job_manifest.credentials_caution(deployed, settings.sample_job.team)])]:
        print(f"warning: {line}", file=sys.stderr)
    sys.stderr.write("".join(f"note: {note}\n" for note in [memory_note(settings)] if note))  # the memory margin
    image = settings.sample_job.image_uri  # --image, held to the image reference grammar as config is
    if not image:
        raise config.ConfigError(["--image is required: sample_job.image_uri is unset (cdk deploy builds training/ into ECR; "
                                  "pass that URI)"])
    return job_manifest.to_yaml(job_manifest.objects(settings, image=image))


# render-job's flags -> the config field each one sets.
RENDER_FLAGS = {
    "sample_job.image_uri": "--image", "sample_job.max_steps": "--max-steps", "sample_job.priority": "--priority",
    "sample_job.nodes": "--nodes", "sample_job.team": "--team", "topology.level": "--preferred-topology/--required-topology",
}


def _given(patch: dict, field: str) -> bool:
    area, _, key = field.partition(".")
    return key in (patch.get(area) or {}) and (area != "topology" or "mode" in patch.get(area, {}))


def _as_flags(line: str, given: dict[str, str]) -> str:
    for field, flag in given.items():
        line = re.sub(rf"(?<![\w.]){re.escape(field)}(?![\w])", flag, line)
    return line
