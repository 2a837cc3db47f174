"""The sample job's rules that span fields: its group, image, data and model against the
cluster; whether its team can ever admit it (infra/admission.py); whether the model fits the
GPUs' memory."""

from __future__ import annotations

import re

from infra import catalogue, cfn_schema, naming
from infra.config.base import Problems
from infra.config.sample_job import MIB, TRAINING_IMAGE_PLATFORM, MemoryFit, SampleJobSettings, _gib
from infra.config.settings import Settings
from training.model_shape import FIT_SHARE, projected_per_gpu


_PLATFORM_ARCHITECTURE = {"linux/amd64": "x86_64", "linux/arm64": "arm64"}


def check_sample_job(s: Settings, p: Problems):
    job = s.sample_job
    if not job.enabled:
        return
    group = s.instance_group(job.instance_group)
    if group is None:
        p.error(
            "sample_job.instance_group",
            job.instance_group,
            f"is not an instance group; groups: {', '.join(g.name for g in s.hyperpod.instance_groups)}",
        )
    elif group.ceiling < 1:
        pass  # the group's count is refused on its own line; measured against it, the job would say it again
    elif job.nodes > group.ceiling:
        p.error("sample_job.nodes", job.nodes, f"is more than instance group {group.name!r} can have ({group.ceiling})")
    elif catalogue.lookup(group.instance_type) and group.spec.unknown:
        p.error(
            "sample_job.instance_group", job.instance_group,
            f"is {group.instance_type}, whose {', '.join(group.spec.unknown)} no source here states; the job's ranks, CPU and memory are sized from them",
        )
    elif catalogue.lookup(group.instance_type) and not group.spec.is_accelerated:
        p.error("sample_job.instance_group", job.instance_group, f"is {group.instance_type}, which has no GPUs")
    elif catalogue.lookup(group.instance_type):
        spec = group.spec
        if job.gpus_per_node is not None and job.gpus_per_node != spec.accelerators:
            p.error("sample_job.gpus_per_node", job.gpus_per_node, f"does not match {spec.name}, which has {spec.accelerators}")
        if job.efa_per_node is not None and job.efa_per_node != spec.efa_interfaces:
            p.error("sample_job.efa_per_node", job.efa_per_node, f"does not match {spec.name}, which has {spec.efa_interfaces} EFA interfaces")
        if job.image_uri is None and spec.architecture not in (None, _PLATFORM_ARCHITECTURE[TRAINING_IMAGE_PLATFORM]):
            p.error("sample_job.instance_group", job.instance_group,
                    f"is {spec.name}, whose hosts are {spec.architecture} (infra/catalogue.py); the training image is built for "
                    f"{TRAINING_IMAGE_PLATFORM} and every rank would fail with an exec format error: use a group of "
                    f"{_PLATFORM_ARCHITECTURE[TRAINING_IMAGE_PLATFORM]} hosts, or set sample_job.image_uri to an image built for {spec.architecture}")
    if job.gpu_partition is not None and group is not None and catalogue.figures(group.instance_type):
        _check_partition(job, group, p)
    if job.max_nodes is not None:
        _check_elastic(s, group, p)
    problem = memory_problem(s, job_model(s))
    if problem:
        p.error("sample_job.model", job_model(s), problem)
    caution = memory_caution(s, job_model(s))
    if caution:
        p.warn(caution)
    team_names = [t.name for t in s.governance.teams]
    if job.team is not None and job.team not in team_names:
        p.error("sample_job.team", job.team, f"is not a team; teams: {', '.join(team_names) or '(none)'}")
    priorities = [pc.name for pc in s.governance.priority_classes]
    if job.priority is not None and job.priority not in priorities:
        p.error("sample_job.priority", job.priority, f"is not a priority class; classes: {', '.join(priorities) or '(none)'}")
    if not naming.K8S_LABEL.match(job.name) or len(job.name) > naming.K8S_LABEL_MAX:
        p.error("sample_job.name", job.name, "must be a Kubernetes name: lowercase letters, digits and hyphens, at most 63 characters")
    if job.checkpoint_interval_steps > job.max_steps:
        # Fine for a short smoke run; a long one would be restarted by CheckpointCadence.
        p.warn(
            f"sample_job.checkpoint_interval_steps: {job.checkpoint_interval_steps} is more than max_steps "
            f"({job.max_steps}): the only checkpoint is the last, so a run longer than "
            "30 minutes is restarted by the CheckpointCadence rule"
        )
    if group is not None and catalogue.figures(group.instance_type) and group.spec.accelerator_resource != "nvidia.com/gpu" and group.spec.is_accelerated:
        p.error(
            "sample_job.instance_group",
            job.instance_group,
            f"is {group.instance_type} ({group.spec.accelerator}); the sample job's image is CUDA PyTorch, which needs NVIDIA GPUs",
        )
    if job.checkpoint_to == "local":
        p.error(
            "sample_job.checkpoint_to",
            "local",
            "must be s3 or fsx: the job's local scratch is its pod's own emptyDir, deleted with the pod, so a restarted pod "
            "could not resume; a node folder that outlives the pod is a hostPath shared between jobs, which team namespaces refuse",
        )
    for i, path in enumerate(job.dataset.files):
        if not s.fsx.enabled or not path.startswith(naming.FSX_MOUNT + "/"):
            p.error(f"sample_job.dataset.files[{i}]", path, f"must be a path under {naming.FSX_MOUNT}/ with fsx.enabled (the claim the job mounts)")
    if job.tokenizer.startswith("meta-llama/") and not job.hf_token_secret:
        p.error(
            "sample_job.hf_token_secret",
            None,
            f"is required: {job.tokenizer} is gated on Hugging Face; store your token with `aws secretsmanager "
            f"create-secret --name {s.prefix}/{s.env_name}/hf-token --secret-string <token>` and name that secret here",
        )
    if job.hf_token_secret is not None:
        # AWS::SecretsManager::Secret Name: its schema's length, and the characters its description allows.
        rule = cfn_schema.resource("AWS::SecretsManager::Secret")["properties"]["Name"]
        if not (1 <= len(job.hf_token_secret) <= rule["maxLength"] and re.fullmatch(r"[A-Za-z0-9/_+=.@-]+", job.hf_token_secret)):
            p.error("sample_job.hf_token_secret", job.hf_token_secret, f"is not a Secrets Manager secret name: 1-{rule['maxLength']} ASCII letters, digits and /_+=.@-")
        elif re.search(r"-[A-Za-z0-9]{6}$", job.hf_token_secret):
            p.error("sample_job.hf_token_secret", job.hf_token_secret, "ends in a hyphen and six characters, which Secrets Manager reads as an ARN suffix; give the name without it")
    if job_model(s) == "llama3.1-8b" and not job.tokenizer.startswith("meta-llama/Llama-3"):
        p.warn(
            f"sample_job.tokenizer: {job.tokenizer} is not the LLaMA 3 tokenizer, so the 8B model's 128,256-row "
            "embedding shrinks to its vocabulary; for the real model name meta-llama/Llama-3.1-8B and hf_token_secret"
        )


def check_admission(s: Settings, p: Problems) -> None:
    """Whether the job's team can ever hold it (infra/admission.py, the one model the team kit
    and the review read too): never is an error naming the field to change, only by borrowing
    a warning. Judged once the job, its group and the teams are sound."""
    from infra import admission

    if any(p.named(area) for area in ("sample_job", "governance", "hyperpod.instance_groups")):
        return
    verdict = admission.sample_job(s)
    if verdict is None:
        return
    verdict.report(p)
    if verdict.verdict == "unmanaged":
        holders = [t.name for t in s.governance.teams if any(q.instance_type == verdict.instance_type for q in t.quotas)]
        if holders:
            p.warn(f"{verdict.line}, beside the quotas {', '.join(holders)} hold{'s' * (len(holders) == 1)} of {verdict.instance_type}, "
                   "whose admitted jobs may then wait for nodes it took; give it a team")
    job = s.sample_job
    if job.max_nodes is not None and verdict.nodes_at_most is not None and verdict.verdict != "never" and job.max_nodes > verdict.nodes_at_most:
        p.warn(
            f"sample_job.max_nodes: {job.max_nodes} is more than team {job.team} can ever hold ({verdict.nodes_at_most} "
            f"{'node' if verdict.nodes_at_most == 1 else 'nodes'} of {verdict.instance_type}): the elastic job never scales past that"
        )


def job_model(s: Settings) -> str:
    """sample_job.model, or where unset the 8B where it fits the job's GPUs with the margin, else tiny."""
    if s.sample_job.model:
        return s.sample_job.model
    fit = memory_fit(s, "llama3.1-8b")
    return "llama3.1-8b" if fit is None or fit.verdict == "fits" else "tiny"


def memory_fit(s: Settings, model: str) -> MemoryFit | None:
    """What `model` needs of the memory of the job's GPU (or MIG slice) as train.py runs it,
    sharded over the job's ranks at its fewest nodes. None where the group or its GPU is not
    known (other checks say so)."""
    from training import model_shape

    job = s.sample_job
    group = s.instance_group(job.instance_group)
    spec = catalogue.figures(group.instance_type) if group is not None else None
    if spec is None or not spec.is_accelerated:
        return None
    if job.gpu_partition is not None:
        if job.gpu_partition not in group.mig_slices:
            return None
        mib, ranks, where = spec.mig_memory_mib(job.gpu_partition), 1, f"a {job.gpu_partition} slice"
    else:
        mib, ranks, where = spec.accelerator_memory_mib, job.nodes * spec.accelerators, f"{spec.name}'s {spec.accelerator}"
    if mib is None:
        return None
    seen, stated = model_shape.torch_memory_mib(spec.accelerator if job.gpu_partition is None else None, mib)
    preset = model_shape.PRESETS[model]
    seq_len, batch = model_shape.JOB_SEQ_LEN[model], model_shape.JOB_BATCH
    parts = model_shape.memory_per_gpu(preset, preset.vocab, seq_len=seq_len, batch=batch, ranks=ranks)
    projected = projected_per_gpu(parts, ranks)
    return MemoryFit(model, where, ranks, seq_len, batch, parts, projected, seen * MIB, mib * MIB, stated)


def memory_note(s: Settings) -> str:
    """The sample job's memory margin, for validate's and render-job's lines ("" without a job or a known GPU)."""
    fit = memory_fit(s, job_model(s)) if s.sample_job.enabled else None
    return f"sample job: {fit.margin}" if fit else ""


def memory_problem(s: Settings, model: str) -> str | None:
    """Why `model` can never fit the job's GPU, in one line; None where it can."""
    fit = memory_fit(s, model)
    if fit is None or fit.verdict != "never":
        return None
    return (f"needs about {_gib(fit.projected)} per GPU over {fit.ranks} rank{'s' * (fit.ranks > 1)} {fit.reasoning}, more than "
            f"the {fit.seen}; use model tiny, or more nodes or GPUs with more memory")


def memory_caution(s: Settings, model: str) -> str | None:
    """A job that fits its GPU without the margin FIT_SHARE keeps: the warning, with the margin."""
    fit = memory_fit(s, model)
    if fit is None or fit.verdict != "tight":
        return None
    return (f"sample_job.model: {fit.margin}, over the {FIT_SHARE:.0%} an honest margin allows ({fit.reasoning}): it may run out "
            "of memory; more nodes shard the state further")


def _check_partition(job: SampleJobSettings, group, p: Problems) -> None:
    """A slice the group has, for a job of one process (memory_problem sizes it)."""
    slices = group.mig_slices
    if job.gpu_partition not in slices:
        has = f"is cut into {', '.join(slices)}" if slices else "has no mig_profile"
        p.error("sample_job.gpu_partition", job.gpu_partition, f"is not a slice of instance group {group.name!r}, which {has}")
        return
    if job.nodes != 1:
        p.error("sample_job.nodes", job.nodes, "must be 1 on a MIG slice: a slice runs one process, and NCCL does not span slices")


def _check_elastic(s: Settings, group, p: Problems) -> None:
    job = s.sample_job
    if job.max_nodes <= job.nodes:
        p.error(
            "sample_job.max_nodes",
            job.max_nodes,
            f"must be more than nodes ({job.nodes}): the job starts on nodes and may scale up to max_nodes; unset, its size is fixed",
        )
    elif group is not None and group.ceiling >= 1 and job.max_nodes > group.ceiling:
        p.error("sample_job.max_nodes", job.max_nodes, f"is more than instance group {group.name!r} can have ({group.ceiling})")
    if job.gpu_partition is not None:
        p.error("sample_job.max_nodes", job.max_nodes, "cannot scale a job on a MIG slice (gpu_partition), which is one process on one node")
