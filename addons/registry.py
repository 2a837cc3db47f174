"""Every add-on this package knows, and the one pass that orders the enabled ones.

The order is a topological sort over `requires` and `after`; it never depends on the
order of this list. A required add-on that is switched off is a config error naming both.
"""

from __future__ import annotations

from addons.base import Addon
from addons.cert_manager import CertManagerAddon
from addons.fsx_csi import FsxCsiAddon
from addons.inference_operator import InferenceOperatorAddon, MetricsServerAddon, S3CsiAddon
from addons.observability import ObservabilityAddon
from addons.pod_identity_agent import PodIdentityAgentAddon
from addons.task_governance import TaskGovernanceAddon
from addons.training_operator import TrainingOperatorAddon
from infra.config import ConfigError, Settings
from infra.validation import load_settings

ALL: tuple[type[Addon], ...] = (
    PodIdentityAgentAddon,
    CertManagerAddon,
    TaskGovernanceAddon,
    TrainingOperatorAddon,
    ObservabilityAddon,
    FsxCsiAddon,
    S3CsiAddon,
    MetricsServerAddon,
    InferenceOperatorAddon,
)


def plan(settings: Settings) -> list[Addon]:
    """The enabled add-ons, each after everything it requires or must follow."""
    enabled = {cls: cls(settings) for cls in ALL if cls(settings).enabled}
    problems = [
        f"{settings.env_name}: {enabled[cls].config_path}.enabled: true requires {dep(settings).config_path} ({dep.title}), which is off; "
        f"turn {dep.key} on or {cls.key} off"
        for cls in enabled
        for dep in cls.requires
        if dep not in enabled
    ]
    if problems:
        raise ConfigError(problems)
    ordered: list[Addon] = []
    state: dict[type[Addon], str] = {}

    def visit(cls: type[Addon]) -> None:
        if state.get(cls) == "done":
            return
        if state.get(cls) == "visiting":
            raise ConfigError([f"addons: {cls.key} depends on itself through {', '.join(c.key for c in state)}"])
        state[cls] = "visiting"
        for dep in (*cls.requires, *cls.after):
            if dep in enabled:
                visit(dep)
        state[cls] = "done"
        ordered.append(enabled[cls])

    for cls in enabled:
        visit(cls)
    return ordered


def dependencies(addon: Addon, enabled: list[Addon]) -> list[type[Addon]]:
    """The enabled add-ons `addon` must wait for."""
    on = {type(a) for a in enabled}
    return [dep for dep in (*addon.requires, *addon.after) if dep in on]


def load(context: dict, env: str | None) -> tuple[Settings, list[str], tuple[tuple[Settings, ...], ...]]:
    """Settings of `env` with every rule checked, the add-ons' requirements included, and where
    it holds the delivery block, every environment its pipeline deploys, wave by wave (empty
    without one): what app.py deploys from and what `hyperpod-cdk validate` reports on."""
    settings, warnings = _load_one(context, env)
    return settings, warnings, pipeline(context, settings, warnings)


def _load_one(context: dict, env: str | None) -> tuple[Settings, list[str]]:
    settings, warnings = load_settings(context, env)
    try:
        plan(settings)
    except ConfigError as err:
        raise ConfigError(err.problems, warnings) from None
    return settings, warnings


def pipeline(context: dict, settings: Settings, warnings: list[str] | None = None) -> tuple[tuple[Settings, ...], ...]:
    """The settings of each environment `settings.delivery` deploys, wave by wave (empty without
    a delivery block): each an environment of cdk.json that validates, as its stage deploys it.
    Raises ConfigError with a line per problem, each naming delivery.waves and the environment."""
    if settings.delivery is None:
        return ()
    from infra.config import environment_names

    known, problems, waves = environment_names(context), [], []
    for wave in settings.delivery.waves:
        loaded = []
        for name in wave:
            if name not in known:
                problems.append(f"{settings.env_name}: delivery.waves: {name!r} is not an environment in cdk.json; valid: {', '.join(known)}")
                continue
            try:
                loaded.append(settings if name == settings.env_name else _load_one(context, name)[0])
            except ConfigError as err:
                problems += [f"{settings.env_name}: delivery.waves: environment {name!r} does not validate, so its stage cannot deploy: {line}"
                             for line in err.problems]
        waves.append(tuple(loaded))
    problems += _where_the_pipeline_runs(settings, waves)
    if problems:
        raise ConfigError(problems, warnings)
    if warnings is not None:
        warnings += _waiting_for_approval(settings, waves)
    return tuple(waves)


def _where_the_pipeline_runs(settings: Settings, waves: list[tuple[Settings, ...]]) -> list[str]:
    """The pipeline's account and partition against the environments it deploys.

    A target account bootstrapped with `--trust` lets every principal of the pipeline's account that
    may assume roles act with its execution policy (aws-cdk-lib `pipelines` README, Security
    Considerations): a pipeline in the account of an environment nobody approves makes whoever may
    act in that account an administrator of the approved environments in other accounts. And no role,
    connection or artifact crosses a partition."""
    from infra import naming

    d, lines = settings.delivery, []
    account, region = d.account or settings.account, d.region or settings.region
    approved = d.approved(waves)
    everyone = [s for wave in waves for s in wave]
    unapproved_here = [s.env_name for s in everyone if s.account == account and s.env_name not in approved]
    approved_elsewhere = [f"{s.env_name} ({s.account})" for s in everyone if s.env_name in approved and s.account != account]
    if unapproved_here and approved_elsewhere:
        field = "delivery.account" if d.account else "delivery.account (default: this environment's)"
        lines.append(
            f"{settings.env_name}: {field}: {account} is the account of {' and '.join(unapproved_here)}, which "
            f"{'deploys' if len(unapproved_here) == 1 else 'deploy'} without a person's approval, and "
            f"{' and '.join(approved_elsewhere)} would trust it with its execution policy (cdk bootstrap --trust): any "
            "principal there that may assume roles could deploy what a person approves (aws-cdk-lib pipelines README, "
            "Security Considerations); put the pipeline in an account of its own (a tooling account: docs/delivery.md)")
    partition = naming.partition(region)
    arn_partition = d.source.connection_arn.split(":")[1] if d.source.connection_arn.count(":") >= 2 else partition
    if arn_partition != partition:
        lines.append(f"{settings.env_name}: delivery.source.connection_arn: {d.source.connection_arn} is in partition "
                     f"{arn_partition}, the pipeline's region {region} in {partition}; CodePipeline reads a connection "
                     "of its own partition only")
    for s in everyone:
        if naming.partition(s.region) != partition:
            lines.append(f"{settings.env_name}: delivery.waves: {s.env_name} deploys to {s.region} (partition "
                         f"{naming.partition(s.region)}), the pipeline runs in {region} ({partition}); no role or artifact "
                         "crosses a partition: give that partition a pipeline of its own")
    return lines


def _waiting_for_approval(settings: Settings, waves: list[tuple[Settings, ...]]) -> list[str]:
    """A wave is one CodePipeline stage, whose actions run by run order across the stage (the
    CodePipeline User Guide, action structure requirements: actions that run in parallel share a
    runOrder, a serial sequence takes increasing ones; CDK Pipelines numbers a wave's stages side by
    side, so each environment's approval holds the other's next step): an environment beside one a
    person approves deploys nothing until that approval, and a failure of either stops both."""
    approved, lines = settings.delivery.approved(waves), []
    for i, wave in enumerate(waves):
        waiting = [s.env_name for s in wave if s.env_name not in approved]
        approvals = [s.env_name for s in wave if s.env_name in approved]
        if waiting and approvals:
            lines.append(
                f"{settings.env_name}: delivery.waves[{i}]: {' and '.join(waiting)} {'deploys' if len(waiting) == 1 else 'deploy'} "
                f"nothing until a person approves {' and '.join(approvals)}: a wave is one CodePipeline stage whose actions go by "
                "run order, each after every earlier step of the wave; give the approved environments a wave of their own"
            )
    return lines
