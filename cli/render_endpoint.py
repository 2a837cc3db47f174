"""`hyperpod-cdk render-endpoint`: the InferenceEndpointConfig serving the sample job's model,
from config with the flags' overrides, held to the same rules as `cdk synth` (validation.override:
the endpoint's team, priority, group, and whether its replicas fit their team's quota)."""

from __future__ import annotations

import sys

from infra import config, validation
from manifests import endpoint as endpoint_manifest
from manifests import job as job_manifest

EXAMPLES = [
    "-c env=prod --image 763104351884.dkr.ecr.us-east-1.amazonaws.com/vllm:URI | kubectl apply -f -",
    "-c env=prod --replicas 2 --team ml-production --image URI",
]
# render-endpoint's flags -> the config field each one sets.
FLAGS = {"inference.endpoint.replicas": "--replicas", "inference.endpoint.team": "--team", "inference.endpoint.image_uri": "--image"}


def arguments(parser) -> None:
    """The command's own flags (cli/main.py adds the environment's)."""
    parser.add_argument("--replicas", type=int, help="replicas; their team must be able to hold them all")
    parser.add_argument("--team", help="serving team whose queue and quota the replicas take")
    parser.add_argument("--image", help="model server image URI (default: inference.endpoint.image_uri)")


def render(deployed: config.Settings, args) -> str:
    """The endpoint's YAML for `deployed` with the flags' overrides; a refusal names the flag that gave the field."""
    given = {"replicas": args.replicas, "team": args.team, "image_uri": args.image}
    patch = {"inference": {"endpoint": {k: v for k, v in given.items() if v is not None}}}
    if not deployed.inference.enabled:
        raise config.ConfigError([f"{deployed.env_name}: inference.enabled: false: no operator serves an endpoint in this environment; "
                                  "turn inference on and deploy (docs/serving.md)"])
    try:
        settings, warnings = validation.override(deployed, patch)
    except config.ConfigError as err:
        flags = {f: flag for f, flag in FLAGS.items() if given[f.rsplit(".", 1)[1]] is not None}
        lines = [line.replace(f"{f}:", f"{flag}:") for line in err.problems for f, flag in flags.items() if f"{f}:" in line] \
            or err.problems
        raise config.ConfigError(lines, err.warnings) from None
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    image = settings.inference.endpoint.image_uri
    if not image:
        raise config.ConfigError(["--image is required: inference.endpoint.image_uri is unset (a model server such as vLLM)"])
    if settings.sample_job.checkpoint_to == "fsx" and settings.fsx.existing is None:
        raise config.ConfigError(["fsx.existing: the model is on the file system the storage stack created, whose ID config does not "
                                  "hold: give fsx.existing.file_system_id, or checkpoint to s3"])
    print(f"note: the endpoint loads {endpoint_manifest.model_uri(settings)}; write it from the job's newest checkpoint "
          f"({job_manifest.checkpoint_uri(settings)}) with `python -m training.export_hf` (docs/serving.md)", file=sys.stderr)
    return job_manifest.to_yaml(endpoint_manifest.objects(settings, image=image))


def command(deployed: config.Settings, args) -> int:
    sys.stdout.write(render(deployed, args))
    return 0
