"""`hyperpod-cdk`: the operator CLI.

  hyperpod-cdk topology [--from FILE [--pods FILE]] [--format mermaid|html|markdown] [--output FILE] [--summary] [--full]
  hyperpod-cdk render-job [-c env=NAME] [--nodes N] [--team T] [--priority P] [--image URI] ...
  hyperpod-cdk team NAME [-c env=NAME] [--format text|json]
  hyperpod-cdk validate [-c env=NAME ... | --all]
  hyperpod-cdk review [-c env=NAME ... | --all] [--against REF|DIR|FILE] [--assembly DIR]
  hyperpod-cdk preflight [-c env=NAME] [--region R] [--profile P]
  hyperpod-cdk accept [-c env=NAME] [--group G] [--render] [--from DIR] [--no-deep-health-check]
  hyperpod-cdk dashboards [-c env=NAME]
  hyperpod-cdk job-record [-c env=NAME] [--checkpoint-dir URI] [--format text|json]
  hyperpod-cdk upgrade-plan --to 1.N [-c env=NAME ... | --all] [--from-account [--region R] [--profile P]] [--write-pins]

Each command has --help. Errors are one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from cli import job_record, render_endpoint, topology
from infra import config, validation
from infra.checks.sample_job import memory_note


class CliError(Exception):
    """A problem to report in one line, with exit status 2."""


def find_cdk_json(start: Path | None = None) -> Path:
    """The cdk.json of the current folder or its nearest parent: the project the user is in,
    never the one this code happens to be installed from."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "cdk.json").is_file():
            return folder / "cdk.json"
    raise CliError(f"no cdk.json in {here} or any folder above it; run hyperpod-cdk inside the project")


def load_context(path: Path | None = None) -> dict:
    """cdk.json's context: a JSON object, whose "context" is an object (or absent)."""
    path = path or find_cdk_json()
    print(f"config: {path}", file=sys.stderr)
    try:
        # A key written twice is refused (config.ConfigError, one line each), as the app refuses it.
        doc = config.read_cdk_json(path.read_text(), str(path))
    except config.ConfigError:
        raise
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CliError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise CliError(f"{path}: must be a JSON object with a \"context\" object, not {_json_kind(doc)}")
    context = doc.get("context")
    if context is not None and not isinstance(context, dict):
        raise CliError(f"{path}: \"context\" must be a JSON object of settings, not {_json_kind(context)}")
    return context or {}


def _json_kind(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")


def envs_from(args) -> list[str]:
    """The names -c env=NAME (as for cdk, repeatable) and --env NAME give, in order, each once.
    Anything else given with -c is refused: a command never guesses which one was meant."""
    named = []
    for item in args.context or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"-c {item}: give key=value, as cdk takes it (-c env=NAME)")
        if key != "env":
            raise CliError(f"-c {item}: unknown context key {key!r}; hyperpod-cdk takes only -c env=NAME (every other "
                           "setting is in cdk.json)")
        if not value:
            raise CliError(f"-c {item}: give the environment's name, -c env=NAME")
        named.append(value)
    given = list(dict.fromkeys([*named, *([args.env] if getattr(args, "env", None) else [])]))
    if given and getattr(args, "all", False):
        raise CliError(f"--all and {' and '.join(given)} name different environments; give names or --all")
    return given


def env_from(args) -> str:
    """The one environment of a command that takes one; default dev."""
    given = envs_from(args)
    if len(given) > 1:
        raise CliError(f"-c env and --env name {' and '.join(sorted(given))}; give one environment")
    return given[0] if given else config.DEFAULT_ENV


def _fleet(args, context: dict) -> list[str]:
    """The environments of a command that takes several (cli.fleet): those named, or --all."""
    from cli import fleet

    return fleet.names(envs_from(args), getattr(args, "all", False), context)


def _fleet_table(settings: list, reports: dict, context: dict, envs: list[str], failed: dict[str, str]) -> None:
    from cli import fleet

    print("\n" + fleet.table(fleet.rows(settings, reports, context, envs, failed)))


def _settings(env: str) -> tuple[config.Settings, list[str]]:
    return validation.load_settings(load_context(), env)


def cmd_render_job(args) -> int:
    from cli import render_job

    deployed, _ = _settings(env_from(args))
    sys.stdout.write(render_job.render(deployed, args))
    return 0


def cmd_team(args) -> int:
    from cli import team_kit

    settings, _ = _settings(env_from(args))
    try:
        kit = team_kit.build(settings, args.name)
    except team_kit.UnknownTeam as err:
        raise CliError(str(err)) from None
    sys.stdout.write(json.dumps(kit, indent=2) + "\n" if args.format == "json" else team_kit.to_text(kit))
    return 0


def _config_error(env: str, err: config.ConfigError) -> None:
    for line in err.warnings:
        print(f"warning: {line}", file=sys.stderr)
    for line in err.problems:
        print(f"error: {line}", file=sys.stderr)
    print(f"failed: {env}")


def cmd_validate(args) -> int:
    """Config and add-on requirements of each environment; no synth, no AWS."""
    from addons import registry
    from cli.fleet import last_review

    context = load_context()
    envs, passed = _fleet(args, context), []
    for env in envs:
        try:
            settings, warnings, _ = registry.load(context, env)
        except config.ConfigError as err:
            _config_error(env, err)
            continue
        for line in warnings:
            print(f"warning: {line}", file=sys.stderr)
        print(f"ok: {env}" + (f" ({note})" if (note := memory_note(settings)) else ""))
        passed.append(settings)
    if len(envs) > 1:
        out_root = find_cdk_json().parent / "cdk.out"
        _fleet_table(passed, {s.env_name: last_review(out_root, context, s.env_name) for s in passed}, context, envs,
                     {e: "config refused (the error lines above)" for e in envs if e not in {s.env_name for s in passed}})
    return 0 if len(passed) == len(envs) else 2


# Under the review's output folder: baselines synthesized from git revisions, by what they were
# built from (cli.revision.baseline_key), and cfn-lint's findings by template.
BASELINE_CACHE = "review-cache/baselines"
LINT_CACHE = "review-cache/lint"


def _overlaps(a: Path, b: Path) -> bool:
    a, b = a.resolve(), b.resolve()
    return a == b or a in b.parents or b in a.parents


def cmd_review(args) -> int:
    from dataclasses import replace

    from cli import revision
    from cli.review import report as review
    from cli.review import baselines, changes, removed
    from cli.synth import SynthRefused, synthesize

    cdk_json = find_cdk_json()
    context = load_context(cdk_json)
    out_root = Path(args.outdir) if args.outdir else cdk_json.parent / "cdk.out"
    repo = cdk_json.parent if revision.toplevel(cdk_json.parent) else None  # git runs here; the checkout may be wider
    main_branch = revision.default(repo)  # the default baseline in a git checkout with a main branch
    envs, status, verdicts, reviewed, reports = _fleet(args, context), 0, {}, [], {}
    if args.assembly and len(envs) > 1:
        raise CliError(f"--assembly {args.assembly} holds one environment's stacks; give one environment with it")
    for env in envs:
        last_review = out_root / f"reviewed-{env}"  # elsewhere, the default baseline: what the previous review saw
        fallback = [main_branch] if main_branch else ([str(last_review)] if (last_review / "manifest.json").exists() else [])
        against = args.against or fallback
        # An environment only the baseline revision's cdk.json has: removed or renamed, nothing to synthesize.
        if (left := removed.find(context, env, against, repo)) is not None:
            out_root.mkdir(parents=True, exist_ok=True)
            written = review.write(report := review.left_behind(left), out_root / f"review-{env}")
            print(review.to_markdown(report) + f"\n(written to {', '.join(review.shown(str(w)) for w in written)})")
            verdicts[env], reports[env] = f"LEFT BEHIND ({review.shown(str(written[0]))})", report
            continue
        if args.assembly:  # what `cdk synth` wrote (make synth): reviewed as it is
            outdir = Path(args.assembly)
            if not (outdir / "manifest.json").exists():
                raise CliError(f"{outdir} has no manifest.json; run cdk synth -c env={env} first")
        else:
            outdir = out_root / f"review-{env}"
            if any(_overlaps(outdir, Path(a.partition("=")[2] or a)) for a in against):
                outdir = out_root / f"review-{env}-next"  # never write over what we compare against
            shutil.rmtree(outdir, ignore_errors=True)
        # A config cdk synth would refuse (a job no team can ever hold among its rules) is refused here, in
        # its lines and exit 2, before anything is synthesized, the baseline included.
        try:
            settings, _ = validation.load_settings(context, env)
        except config.ConfigError as err:
            _config_error(env, err)
            status, verdicts[env] = 2, "config refused"
            continue
        reviewed.append(settings)
        # Read the baseline before synthesizing, so nothing written below can change it.
        baseline, first_deploy, moved = None, None, None
        if against:
            try:
                baseline, first_deploy, moved = baselines.read(against, asked=bool(args.against), context=context, settings=settings,
                                                               repo=repo, cache=out_root / BASELINE_CACHE)
            except changes.BaselineError as err:
                raise CliError(str(err)) from None
            against = against if baseline is not None else None
        if args.baseline_only:  # kept in the cache, where the review that follows (make synth) finds it
            continue
        if not args.assembly:
            print(f"synthesizing {env} offline into {outdir} ...", file=sys.stderr, flush=True)
            try:
                synthesize(context, env, outdir)
            except SynthRefused as err:  # as `cdk synth` exits 1, so does the review
                for line in err.problems:
                    print(f"error: {line}", file=sys.stderr)
                status, verdicts[env] = status or 1, "refused by synth"
                continue
        if baseline is not None and baseline.this_checkout:
            print(f"note: the baseline {baseline.description}: no change to compare", file=sys.stderr)
            baseline = replace(changes.load_baseline([str(outdir)], []), description=baseline.description)
        print(f"reviewing {env}: changes, cost, exposure, cdk-nag, cfn-lint, IAM, deploy plan ...", file=sys.stderr, flush=True)
        report = review.build(outdir, against=baseline, cache=out_root / LINT_CACHE, config=(context, env), first_deploy=first_deploy,
                              moved=moved)
        text = review.quiet_markdown(report) if args.quiet else review.to_markdown(report)
        written = review.write(report, out_root / f"review-{env}")
        if not args.against:
            changes.snapshot(outdir, last_review)
        if baseline is None and against is not None:
            print(f"note: no earlier review of {env} to compare with; the next review compares with this one "
                  "(or pass --against a deployed template or an assembly)", file=sys.stderr)
        print(text)
        print(f"(written to {', '.join(review.shown(str(w)) for w in written)})")
        status = status or (0 if report["pass"] else 1)
        reports[env], verdicts[env] = report, f"{'PASS' if report['pass'] else 'FAIL'} ({review.shown(str(written[0]))})"
    if len(envs) > 1 and not args.baseline_only:
        print("\n" + "\n".join(f"review of {env}: {verdicts[env]}" for env in envs))
        _fleet_table(reviewed, reports, context, envs, {e: f"{v} (the error lines above)" for e, v in verdicts.items()
                                                          if not v.startswith(("PASS", "FAIL"))})
    return status


def cmd_preflight(args) -> int:
    from cli import preflight

    cdk_json, env = find_cdk_json(), env_from(args)
    context = load_context(cdk_json)
    settings, _ = validation.load_settings(context, env)
    # Whether the credentials outlast the deploy: this change's minutes from the last review, else the whole deploy's.
    deploy = lambda: preflight.deploy_time(cdk_json.parent / "cdk.out", context, env, pipeline=args.pipeline)  # noqa: E731
    try:
        results = preflight.run(settings, region=args.region, profile=args.profile, deploy=deploy)
    except preflight.PreflightStop as err:
        raise CliError(str(err)) from None
    print(preflight.table(results))
    return 1 if any(r.status == "fail" for r in results) else 0


def cmd_upgrade_plan(args) -> int:
    from botocore.exceptions import BotoCoreError, ClientError
    from cli import preflight, upgrade_plan
    from cli.fleet import last_review

    cdk_json = find_cdk_json()
    context = load_context(cdk_json)
    envs, planned = _fleet(args, context), []
    if len(envs) > 1 and (flag := "--from-account" if args.from_account else "--write-pins" if args.write_pins else None):
        raise CliError(f"{flag} reads one account with one profile: give one environment with it")
    for env in envs:
        try:
            settings, _ = validation.load_settings(context, env)
            source = upgrade_plan.OfflineVersions()
            if args.from_account:
                source = upgrade_plan.AccountVersions(preflight.client(settings, "eks", region=args.region, profile=args.profile))
            sys.stdout.write(upgrade_plan.run(settings, args.to, source, write=args.write_pins, cdk_json=cdk_json, guard=len(envs) == 1))
        except config.ConfigError as err:
            if len(envs) == 1:
                raise
            _config_error(env, err)
            continue
        except (upgrade_plan.Refused, preflight.NoCredentials, BotoCoreError, ClientError) as err:
            line = str(err) if isinstance(err, (upgrade_plan.Refused, preflight.NoCredentials)) else preflight.failure_line(err, args.profile)
            if len(envs) == 1:
                raise CliError(line) from None
            print(f"error: {env}: {line}", file=sys.stderr)
            print(f"failed: {env}")
            continue
        planned.append(settings)
    if len(envs) > 1:
        print("\n".join(upgrade_plan.fleet_guard_lines(planned)) if not args.write_pins and planned else "")
        _fleet_table(planned, {s.env_name: last_review(cdk_json.parent / "cdk.out", context, s.env_name) for s in planned}, context,
                     envs, {e: "no plan (the error lines above)" for e in envs if e not in {s.env_name for s in planned}})
    return 0 if len(planned) == len(envs) else 2


def cmd_accept(args) -> int:
    from cli import accept, preflight
    from infra.checks.acceptance import accepted_groups, unpullable_images
    from manifests import acceptance as acceptance_manifests

    settings, _ = _settings(env_from(args))
    known = [g.name for g in accepted_groups(settings)]
    for name in args.group or []:
        if name not in known:
            raise CliError(f"--group {name}: not a group the acceptance run proves; groups: {', '.join(known) or '(none)'}")
    unpullable = unpullable_images(settings)
    if unpullable and not args.from_dir:
        raise CliError(unpullable[0])
    try:
        cluster = accept.Recording(Path(args.from_dir)) if args.from_dir else accept.Kubectl()
        if args.render:
            objects = acceptance_manifests.objects(settings, accept.nodes_to_test(settings, cluster, args.group))
            # The metadata guard's probe on every node, then the tenancy probes of each team (the
            # privileged pod is only ever a dry run).
            objects += list(accept.guard_probes(settings, cluster.nodes()).values())
            objects += [o for t in settings.governance.teams for k, o in acceptance_manifests.tenancy_objects(settings, t.name).items() if k != "privileged"]
            sys.stdout.write(accept.to_yaml(objects))
            return 0
        sagemaker = None
        if not args.from_dir and not args.no_deep_health_check and accept.needs_sagemaker(settings, args.group or ()):
            sagemaker = preflight.client(settings, "sagemaker", region=args.region, profile=args.profile, verify_as="accept")
        runtime = None if args.from_dir or not settings.inference.enabled else \
            preflight.client(settings, "sagemaker-runtime", region=args.region, profile=args.profile, verify_as="accept")
        report = accept.run(settings, cluster, sagemaker=sagemaker, runtime=runtime, groups=args.group or (),
                            deep_health_check=not args.no_deep_health_check, keep=args.keep)
    except (accept.AcceptError, preflight.NoCredentials) as err:
        raise CliError(str(err)) from None
    sys.stdout.write(accept.to_text(report))
    return 0 if report.passed else 1


def cmd_dashboards(args) -> int:
    from cli import dashboards

    settings, _ = _settings(env_from(args))
    try:
        sys.stdout.write(dashboards.command(settings))
    except dashboards.NoGrafana as err:
        raise CliError(str(err)) from None
    return 0


def _env_args(parser: argparse.ArgumentParser, fleet: bool = False) -> None:
    parser.add_argument("-c", "--context", action="append", metavar="env=NAME", help="environment, as for cdk (default dev)"
                        + ("; repeat it for several, each reported in turn, then a table of them" if fleet else ""))
    parser.add_argument("--env", help="environment name (same as -c env=NAME)")
    if fleet:
        parser.add_argument("--all", action="store_true", help="every environment in cdk.json")


def _aws_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--region", help="default: the environment's region")
    parser.add_argument("--profile", help="AWS profile (default: the usual credential chain)")


# What every command's exit status means (main() maps CliError and ConfigError to 2).
EXIT_STATUS = ("exit status: 0 done (or passed); 1 a check, review or acceptance run that fails; 2 bad input (a flag, "
               "cdk.json, a file, credentials), said in one `error:` line each")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hyperpod-cdk")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "(not installed)"


def _command(sub, name: str, func, *, help: str, description: str, examples: list[str]) -> argparse.ArgumentParser:
    """A subcommand whose --help always ends with examples and the exit status."""
    parser = sub.add_parser(
        name,
        help=help,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n" + "\n".join(f"  hyperpod-cdk {name} {e}".rstrip() for e in examples) + "\n\n" + EXIT_STATUS,
    )
    parser.set_defaults(func=func)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hyperpod-cdk", description=__doc__.splitlines()[0], epilog=EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    topo = _command(
        sub, "topology", topology.command,
        help="draw the EC2 network topology of the cluster's nodes",
        description=topology.__doc__,
        examples=["> topology.mmd", "--from nodes.json --pods pods.json --format html --output topology.html", "--format markdown",
                  "--summary", "--full > every-node.mmd"],
    )
    topo.add_argument("--from", dest="from_file", metavar="FILE", help="node list JSON (default: kubectl get nodes -o json)")
    topo.add_argument("--pods", metavar="FILE", help="pod list JSON for the GPUs in use (`kubectl get pods -A -o json`; "
                      "default: the live cluster's, or none with --from)")
    topo.add_argument("--full", action="store_true", help=f"Mermaid: draw every node (without it, past {topology.FULL_TREE_MAX_NODES} "
                      "nodes, one box per layer-3 network node)")
    topo.add_argument("--tolerate", action="append", metavar="KEY", help="a taint key the work tolerates (a group's dedicated "
                      "taint): it does not make a node unschedulable; repeatable")
    topo.add_argument(
        "--format",
        choices=["mermaid", "html", "markdown"],
        default="mermaid",
        help="Mermaid text, a page grouped by layer-3 network node, or a Markdown table for pull requests",
    )
    topo.add_argument("--output", metavar="FILE", help="write here instead of stdout")
    topo.add_argument("--summary", action="store_true", help="per layer-3 network node: nodes, schedulable nodes, their GPUs and free GPUs")
    topo.add_argument("--cluster-name", default="HyperPod cluster", help="label of the diagram's root")

    render = _command(
        sub, "render-job", cmd_render_job,
        help="print the sample HyperPodPyTorchJob as YAML for kubectl apply -f -",
        description="Render the sample job from config, with overrides, validated by the same rules as cdk synth.",
        examples=[
            "-c env=prod --image 111111111111.dkr.ecr.us-east-1.amazonaws.com/train:1 | kubectl apply -f -",
            "-c env=prod --nodes 4 --team ml-production --priority inference --image URI",
            "-c env=prod --preferred-topology topology.k8s.aws/network-node-layer-2 --image URI",
        ],
    )
    _env_args(render)
    render.add_argument("--nodes", type=int, help="replicas (nodes); at most the instance group's count")
    render.add_argument("--team", help="team whose local queue the job joins")
    render.add_argument("--priority", help="priority class (without -priority)")
    topo_group = render.add_mutually_exclusive_group()
    topo_group.add_argument("--preferred-topology", metavar="LEVEL", help="e.g. topology.k8s.aws/network-node-layer-3")
    topo_group.add_argument("--required-topology", metavar="LEVEL", help="e.g. topology.k8s.aws/network-node-layer-3")
    render.add_argument("--image", help="training image URI (default: sample_job.image_uri)")
    render.add_argument("--max-steps", type=int, help="training steps")

    kit = _command(
        sub, "team", cmd_team,
        help="print what a team member needs: role, kubeconfig, namespace, queue, priorities, quota",
        description="The team's kit, from config by the names the stacks give: how to reach the cluster, where to "
        "submit, with which labels and annotations, and the team's quota in plain words.",
        examples=["ml-research -c env=prod", "ml-research -c env=prod --format json > ml-research.json"],
    )
    kit.add_argument("name", help="the team (governance.teams[].name)")
    _env_args(kit)
    kit.add_argument("--format", choices=["text", "json"], default="text")

    validate = _command(
        sub, "validate", cmd_validate,
        help="check the config of one, several or all environments (no synth, no AWS)",
        description="Validate config as cdk synth does (every field, every rule across fields, add-on requirements): "
        "every problem on its own line on stderr, then `ok: <env>` or `failed: <env>` for each environment, and after "
        "several a table of them; exit 2 on any error.",
        examples=["", "-c env=prod", "-c env=dev -c env=prod", "--all"],
    )
    _env_args(validate, fleet=True)

    rev = _command(
        sub, "review", cmd_review,
        help="synthesize and print the review report (also cdk.out/review-<env>.md, .json and .sarif)",
        description="Synthesize offline, then report what the change does (callouts, deltas per section, then cdk diff) "
        "against main in a git checkout (else the last review) or --against, the stacks and the exports between them, "
        "the estimated cost, risk and exposure, IAM "
        "access by documented level, cdk-nag and cfn-lint findings and an estimated deploy plan. Writes "
        "review-<env>.md, .json and .sarif. Exits 1 on a nag or lint error, an unknown IAM action or a refused change.",
        examples=[
            "",
            "--env prod --against hyperpod-prod-hyperpod=deployed.json  # aws cloudformation get-template output",
            "--env prod --against main  # main's app, synthesized in a temporary worktree (the default where main exists)",
            "--env prod --against v1.4.0  # a tag, a commit, HEAD~1",
            "--env prod --against main.out  # an assembly synthesized earlier",
            "--all  # each environment's review and verdict, then a table of them",
            "--assembly cdk.out  # after cdk synth -c env=dev",
        ],
    )
    _env_args(rev, fleet=True)
    rev.add_argument(
        "--against",
        action="append",
        metavar="REF|DIR|[STACK=]FILE",
        help="compare with a git revision (its app synthesized offline in a temporary worktree), an earlier cloud "
        "assembly, or deployed templates (aws cloudformation get-template --stack-name STACK > STACK.json; repeat per "
        "stack). Default: main in a git checkout with a main branch, else the last review of the environment. A revision without "
        "the environment, or with it elsewhere, gives a first deploy; one that alone has it, a review of it as left behind",
    )
    rev.add_argument("--outdir", help="where review-<env>/ and its .md, .json and .sarif go (default: cdk.out beside cdk.json)")
    rev.add_argument("--assembly", metavar="DIR", help="review this cloud assembly (cdk synth's output) instead of synthesizing")
    rev.add_argument("--baseline-only", action="store_true", help="read (a git revision: synthesize and keep) the baseline, then "
                     "stop: what make synth runs beside cdk synth, so that the review after it synthesizes nothing more")
    rev.add_argument("--quiet", action="store_true", help="print only the verdict, the callouts and the deltas against the "
                     "baseline (the files written keep every section)")

    pre = _command(
        sub, "preflight", cmd_preflight,
        help="read-only checks against the real account before a deploy",
        description="Read-only AWS checks (boto3): account, whether the credentials outlast the deploy plan's minutes, AZs, SageMaker cluster-usage quotas, name clashes, EKS version, "
        "admin principals, CDK bootstrap; then, where the cluster is deployed, its drift from config (node counts, AMI "
        "status, add-on versions, chart revision), each said as expected or not. Exit 1 if any check fails.",
        examples=["-c env=prod", "-c env=prod --profile prod-admin --region us-east-1"],
    )
    _env_args(pre)
    _aws_args(pre)
    pre.add_argument("--pipeline", action="store_true", help="a step of the delivery pipeline: the deploy runs under the "
                     "pipeline's roles, and its minutes come from the review step's files in cdk.out (never a synthesis)")

    acc = _command(
        sub, "accept", cmd_accept,
        help="prove the deployed GPU groups (NCCL over EFA, DCGM level 2, HyperPod's deep health check) and team namespaces",
        description="Run DCGM diagnostics (level 2) on each node of each GPU group, then NCCL all_reduce_perf across all "
        "its nodes over EFA, through kubectl; then HyperPod's on-demand deep health check through the SageMaker API; judge the bus "
        "bandwidth against the published figure for the instance type and name the nodes that fall short. In each team "
        "namespace, GPU groups or none, check that a privileged pod is refused, the instance metadata service is out of "
        "reach and another namespace cannot connect; with inference on, that its endpoint serves a request. Exit 1 on any failed check.",
        examples=["-c env=prod", "-c env=prod --group gpu --no-deep-health-check", "-c env=prod --render > acceptance.yaml",
                  "-c env=prod --from tests/fixtures/acceptance/prod-two-nodes  # a recorded run"],
    )
    _env_args(acc)
    acc.add_argument("--group", action="append", metavar="NAME", help="only this instance group (repeatable)")
    acc.add_argument("--render", action="store_true", help="print the manifests the run would apply, for the nodes found")
    acc.add_argument("--from", dest="from_dir", metavar="DIR", help="read a recorded run instead of the cluster")
    acc.add_argument("--no-deep-health-check", action="store_true", help="skip HyperPod's deep health check (60-90 min on p5)")
    acc.add_argument("--keep", action="store_true", help="leave the finished checks' pods for inspection")
    _aws_args(acc)

    dash = _command(
        sub, "dashboards", cmd_dashboards,
        help="print the command that imports HyperPod's observability dashboards into Managed Grafana",
        description="CloudFormation has no Grafana dashboard resource: print the one bash command that creates the "
        "Prometheus data source and imports HyperPod's published dashboards into this environment's workspace.",
        examples=["-c env=prod | bash  # where addons.observability.grafana.enabled (off in the committed cdk.json)"],
    )
    _env_args(dash)

    ep = _command(sub, "render-endpoint", lambda args: render_endpoint.command(_settings(env_from(args))[0], args),
                  help="print the InferenceEndpointConfig serving the sample job's model, for kubectl apply -f -",
                  description=render_endpoint.__doc__, examples=render_endpoint.EXAMPLES)
    _env_args(ep)
    render_endpoint.arguments(ep)

    rec = _command(sub, "job-record", lambda args: job_record.command(_settings(env_from(args))[0], args), description=job_record.__doc__,
                   help="print the sample job's give-ups and non-finite windows, kept beside its checkpoints; exit 1 where it gave up",
                   examples=job_record.EXAMPLES)
    _env_args(rec)
    job_record.arguments(rec)
    _aws_args(rec)

    up = _command(
        sub, "upgrade-plan", cmd_upgrade_plan,
        help="print the ordered steps of a Kubernetes upgrade: versions, add-ons, migrations, AMI updates",
        description="From the cluster's Kubernetes version to --to, one minor version per step: the add-on versions for "
        "it, the task governance Kueue CRD migration where the add-on crosses it, the cdk.json change and commands, and "
        "each instance group's HyperPod AMI update with its rolling batch. Read-only but --write-pins (cdk.json).",
        examples=["--to 1.35", "--to 1.35 --all", "--to 1.35 -c env=prod --from-account --profile prod-admin"],
    )
    _env_args(up, fleet=True)
    up.add_argument("--to", required=True, metavar="1.N", help="the Kubernetes version to reach")
    up.add_argument("--from-account", action="store_true", help="read the cluster's version and its add-ons' from the account (EKS)")
    up.add_argument("--write-pins", action="store_true", help="with --to the cluster's version: pin every unpinned add-on in cdk.json")
    up.add_argument("--region", help="default: the environment's region")
    up.add_argument("--profile", help="AWS profile (default: the usual credential chain)")
    return parser


def main(argv: list[str] | None = None) -> int:
    from infra.node import use_venv_node

    use_venv_node()  # before anything imports aws_cdk
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CliError, topology.InputError, job_record.RecordError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except config.ConfigError as err:
        for line in err.problems:
            print(f"error: {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
