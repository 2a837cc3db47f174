"""Shared fixtures: each environment is synthesized once per test session, in-process.

`synth(env)` builds the app exactly as app.py does (compose + both nag packs) into a
session temp folder and returns the templates; variants of an environment (a patched
config) are synthesized once per distinct patch. Under pytest-xdist (`make test` runs the
suite on every core) the workers share those syntheses through the session's temp folder,
and tests that share a fixture set up once per module or session run in one worker.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONTEXT = json.loads((ROOT / "cdk.json").read_text())["context"]

from infra import config, validation  # noqa: E402

ENVIRONMENTS = config.environment_names(CONTEXT)

# Capabilities that no environment turns on by default, each in a config of its own (dev with
# the patch), synthesized and put through the same gates as the environments.
CAPABILITIES = {
    "karpenter": {
        "hyperpod": {
            "autoscaling": "karpenter",
            "instance_groups": [
                {"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
                {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 0, "autoscaled": True, "max_count": 4},
            ],
        },
    },
    "cluster-options": {
        "network": {"hyperpod_subnets": [{"availability_zone": "us-east-1a", "cidr": "10.1.0.0/17"},
                                         {"availability_zone": "us-east-1b", "cidr": "10.1.128.0/17"}]},
        "hyperpod": {
            "tiered_storage_memory_percent": 20,
            # Customer managed keys need continuous provisioning (HyperPod's smcluster-cmk page).
            "continuous_provisioning": True,
            "volume_encryption": {},
            "instance_groups": [
                {"name": "system", "instance_type": "ml.m5.4xlarge", "count": 2, "min_count": 1, "capacity": "on_demand",
                 "image_id": "ami-0123456789abcdef0",
                 "scheduled_update": {"schedule": "cron(0 3 ? * SUN *)", "batch": {"unit": "percent", "value": 50},
                                      "wait_seconds": 300, "rollback_alarms": ["hyperpod-dev-node-health"]}},
                {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 1, "capacity": "spot",
                 "alternative_instance_types": ["ml.g6.8xlarge"], "network_interface": "efa",
                 "auto_patch": {"strategy": "WhenIdle", "batch": {"unit": "instances", "value": 1}, "wait_seconds": 120}},
                # A value of the schema's MAJOR.MINOR.PATCH pattern, not a HyperPod AMI release we could confirm.
                {"name": "reserved", "instance_type": "ml.g5.12xlarge", "count": 1, "availability_zone": "us-east-1b",
                 "image_release_version": "1.0.0",
                 "training_plan_arn": "arn:aws:sagemaker:us-east-1:111111111111:training-plan/research-q1",
                 "labels": {"team": "research"}, "taints": [{"key": "reserved", "value": "research", "effect": "NoSchedule"}]},
            ],
        },
    },
    "fsx": {
        "fsx": {"enabled": True, "storage_gib": 2400, "throughput_per_tib": 500},
        # The FSx capacity alarm exists only beside a file system this project creates.
        "operations": {"alerts": {"enabled": True}},
        "sample_job": {"checkpoint_to": "fsx", "dataset": {"files": ["/fsx/datasets/c4/*.txt"]}},
    },
    "closed-network": {
        "network": {"nat_gateways": 0, "interface_endpoints": "all"},
        "eks": {"endpoint_access": "private", "public_access_cidrs": []},
        # Nothing reaches Hugging Face: the job's text and tokenizer come from FSx. Data kept, as
        # in prod, so the file system's final backup on deletion goes through the gates too. Its
        # account bootstrapped with the CDK's example permissions boundary, which every role must carry.
        "protection": {"retain_data": True, "permissions_boundary": "cdk-hnb659fds-permissions-boundary-111111111111-us-east-1"},
        "fsx": {"enabled": True, "directory_image": "111111111111.dkr.ecr.us-east-1.amazonaws.com/busybox:1.37.0"},
        "sample_job": {"dataset": {"files": ["/fsx/datasets/c4/*.txt"]}, "tokenizer": "/fsx/tokenizers/llama"},
        # Two of the chart's images are copied from Docker Hub, which limits anonymous pulls.
        "hyperpod": {"helm_chart": {"docker_hub_secret": "hyperpod/dockerhub"}},
    },
    # An H100 group cut into MIG slices (3 x 1g.10gb and 1 x 4g.40gb per GPU), two teams with
    # quotas by slice (one also by vCPUs, one with an absolute borrow limit and its people's
    # role), and the tiny job on one slice in that team's queue.
    "mig": {
        "hyperpod": {"instance_groups": [
            {"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
            {"name": "gpu", "instance_type": "ml.p5.48xlarge", "count": 1, "mig_profile": "mixed-3-1g.10gb-1-4g.40gb"},
        ]},
        "governance": {"teams": [
            {"name": "research", "principals": ["arn:aws:iam::111111111111:role/research-scientists"],
             "quotas": [{"instance_type": "ml.p5.48xlarge", "accelerator_partition": {"type": "mig-1g.10gb", "count": 16}}],
             "absolute_borrow_limits": [{"instance_type": "ml.p5.48xlarge", "accelerator_partition": {"type": "mig-1g.10gb", "count": 8}},
                                        {"instance_type": "ml.m5.4xlarge", "vcpu": 8, "memory_gib": 32}]},
            {"name": "inference", "principals": ["arn:aws:iam::111111111111:role/inference-engineers"],
             "quotas": [{"instance_type": "ml.p5.48xlarge", "accelerator_partition": {"type": "mig-4g.40gb", "count": 8},
                         "vcpu": 64, "memory_gib": 512}],
             "absolute_borrow_limits": [{"instance_type": "ml.m5.4xlarge", "count": 1}]},
        ]},
        "sample_job": {"instance_group": "gpu", "gpu_partition": "1g.10gb", "model": "tiny", "team": "research"},
    },
    "existing-vpc": {
        "network": {
            "existing_vpc": {
                "vpc_id": "vpc-0a1b2c3d4e5f60718",
                "vpc_cidr": "10.20.0.0/16",
                "secondary_cidrs": ["100.64.0.0/16"],
                "private_subnet_ids": ["subnet-0a1b2c3d4e5f60711", "subnet-0a1b2c3d4e5f60712", "subnet-0a1b2c3d4e5f60713"],
                "private_subnet_route_table_ids": ["rtb-0a1b2c3d4e5f60711", "rtb-0a1b2c3d4e5f60712", "rtb-0a1b2c3d4e5f60713"],
            },
            "hyperpod_subnets": [{"availability_zone": "us-east-1a", "subnet_id": "subnet-0a1b2c3d4e5f60714",
                                  "route_table_id": "rtb-0a1b2c3d4e5f60714"}],
            "interface_endpoints": "all",
        },
    },
}
# HyperPod joins an EKS cluster this project does not create, in that cluster's VPC, adopting the
# cert-manager add-on it runs (as a quick-setup cluster does: its inference operator, on by
# default, installs it); creating the others there is the path dev's add-ons take.
# Serving beside training: the inference operator add-on with its prerequisites (the roles, the TLS
# bucket, the CSI drivers, metrics-server), and the endpoint of the sample job's model in a serving
# team's queue at the inference priority, on the GPU group training uses.
CAPABILITIES["inference"] = {
    "inference": {"enabled": True, "endpoint": {"team": "serving", "replicas": 1}},
    "governance": {"teams": [
        {"name": "ml-research", "quotas": [{"instance_type": "ml.g5.8xlarge", "accelerators": 1}], "sharing": "LendAndBorrow"},
        {"name": "serving", "quotas": [{"instance_type": "ml.g5.8xlarge", "accelerators": 1}], "sharing": "LendAndBorrow",
         "borrow_limit": 100},
    ]},
    "hyperpod": {"instance_groups": [
        {"name": "system", "instance_type": "ml.m5.4xlarge", "count": 1},
        {"name": "gpu", "instance_type": "ml.g5.8xlarge", "count": 2},
    ]},
}
CAPABILITIES["existing-cluster"] = {
    "network": CAPABILITIES["existing-vpc"]["network"],
    "eks": {"existing_cluster": {"name": "platform-shared", "security_group_id": "sg-0a1b2c3d4e5f60719"}},
    "addons": {"cert_manager": {"existing": True}},
}
# The pipeline through three environments (dev and staging in another region side by side, in one
# wave; then prod in another account, after a person's approval), held in dev's config as the
# delivery block is, beside the two environments it adds to cdk.json's (FLEETS): a staging like dev
# but with termination protection and its data kept, and prod in the second account. The pipeline
# runs in a tooling account of its own: never in the account of an environment nobody approves.
TOOLING_ACCOUNT = "333333333333"
CAPABILITIES["delivery"] = {
    "delivery": {
        "source": {"connection_arn": f"arn:aws:codeconnections:us-east-1:{TOOLING_ACCOUNT}:connection/0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d",
                   "repository": "example-org/hyperpod-platform", "branch": "main"},
        "account": TOOLING_ACCOUNT,
        "waves": [["dev", "staging"], ["prod"]],
        "protected": ["prod"],
    },
}
FLEETS = {
    "delivery": {
        "staging": config.deep_merge(CONTEXT["environments"]["dev"], {
            "region": "eu-central-1", "availability_zones": ["eu-central-1a", "eu-central-1b", "eu-central-1c"],
            "network": {"hyperpod_subnets": [{"availability_zone": "eu-central-1a", "cidr": "10.1.0.0/16"}]},
            "protection": {"termination_protection": True, "retain_data": True},
            "eks": {"public_access_cidrs": ["203.0.113.0/24"]},
        }),
        # Only the account moves: its people's roles stay those of the first account (EKS admits a
        # principal of another account; validate warns), so its stacks are prod's, resource for resource.
        "prod": config.deep_merge(CONTEXT["environments"]["prod"], {"account": "222222222222"}),
    },
}


def patched_context(env: str, patch: dict, fleet: dict | None = None) -> dict:
    """cdk.json context with `patch` deep-merged into environment `env`, and the environments of
    `fleet` (name -> block) in place of cdk.json's of that name."""
    ctx = json.loads(json.dumps(CONTEXT))
    ctx["environments"].update(json.loads(json.dumps(fleet or {})))
    ctx["environments"][env] = config.deep_merge(ctx["environments"][env], patch)
    return ctx


@dataclass
class Synth:
    settings: config.Settings
    outdir: Path
    templates: dict  # stack suffix -> template dict

    def template(self, suffix: str):
        from aws_cdk.assertions import Template

        return Template.from_json(self.templates[suffix])

    def resources(self, suffix: str, type_: str) -> dict:
        return {k: r for k, r in self.templates[suffix]["Resources"].items() if r["Type"] == type_}

    def manifests(self, suffix: str) -> list[dict]:
        """The Kubernetes objects a stack applies: each manifest is a JSON string with
        CloudFormation tokens joined in (inside JSON strings), read here as TOKEN."""
        out = []
        for res in self.resources(suffix, "Custom::AWSCDK-EKS-KubernetesResource").values():
            raw = res["Properties"]["Manifest"]
            text = raw if isinstance(raw, str) else "".join(p if isinstance(p, str) else "TOKEN" for p in raw["Fn::Join"][1])
            out += json.loads(text)
        return out

    def exported(self, name: str) -> tuple[str, object]:
        """(stack suffix, value) of the output exported as `name`: where an import leads."""
        for suffix, template in self.templates.items():
            for output in template.get("Outputs", {}).values():
                if output.get("Export", {}).get("Name") == name:
                    return suffix, output["Value"]
        raise KeyError(f"no stack exports {name}")

    @property
    def report(self) -> dict:
        return json.loads((self.outdir / "validation-report.json").read_text())


def _synthesize(context: dict, env: str, outdir: Path) -> Synth:
    return _read_back(outdir, *_synthesize_files(context, env, outdir))


def _synthesize_files(context: dict, env: str, outdir: Path) -> tuple[config.Settings, dict[str, str]]:
    """The settings, and each stack's template file in `outdir` by stack suffix (compose order)."""
    from cli.synth import synthesize

    settings, stacks = synthesize(context, env, outdir)
    prefix = f"{settings.prefix}-{env}-"
    return settings, {s.stack_name[len(prefix):]: f"{s.artifact_id}.template.json" for s in stacks}


def _read_back(outdir: Path, settings: config.Settings, files: dict[str, str]) -> Synth:
    return Synth(settings, outdir, {k: json.loads((outdir / name).read_text()) for k, name in files.items()})


def session_folder(tmp_path_factory, name: str) -> Path:
    """A folder of this test session that every xdist worker sees (a worker's own base temp is
    a folder of the session's): what one worker makes there, the others can read."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(exist_ok=True)
    return folder


def _synthesized_once(folder: Path, context: dict, env: str) -> Synth:
    """The synthesis of `context`'s `env` in `folder`: made by the first process that asks (under
    a lock), read back from its assembly by every later one, which take the settings from the
    config as the synthesis did."""
    from filelock import FileLock

    index = folder / "stacks.json"  # written last: a folder without it holds no finished synthesis
    with FileLock(f"{folder}.lock"):
        if index.exists():
            settings, files = validation.load_settings(context, env)[0], json.loads(index.read_text())
        else:
            shutil.rmtree(folder, ignore_errors=True)  # what a synthesis that raised left behind
            settings, files = _synthesize_files(context, env, folder / "out")
            index.with_suffix(".part").write_text(json.dumps(files))
            index.with_suffix(".part").rename(index)
    return _read_back(folder / "out", settings, files)


_CACHE: dict[str, Synth] = {}


@pytest.fixture(scope="session")
def synth(tmp_path_factory):
    shared = session_folder(tmp_path_factory, "syntheses")

    def get(env: str, patch: dict | None = None) -> Synth:
        fleet = FLEETS.get(env)
        if env in CAPABILITIES:  # a capability's own config: dev with its patch
            env, patch = "dev", CAPABILITIES[env]
        key = json.dumps([env, patch, fleet] if fleet else [env, patch], sort_keys=True)
        if key not in _CACHE:
            ctx = patched_context(env, patch, fleet) if patch else CONTEXT
            folder = shared / f"{env}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
            _CACHE[key] = _synthesized_once(folder, ctx, env)
        return _CACHE[key]

    return get


def cdk_lib_source(suffix: str) -> str:
    """A file of aws-cdk-lib as installed (its jsii bundle), e.g. a custom-resource handler's
    source: what a test holds our assumptions about CDK's own runtime against."""
    import tarfile

    import aws_cdk

    bundle = next((Path(aws_cdk.__file__).parent / "_jsii").glob("aws-cdk-lib@*.jsii.tgz"))
    with tarfile.open(bundle) as tar:
        member = next(m for m in tar if m.name.endswith(suffix))
        return tar.extractfile(member).read().decode()


def cdk_project(context: dict, where: Path) -> Path:
    """A folder whose cdk.json carries `context` and runs this checkout's app.py, as a user's
    checkout would have it: where the CDK CLI and `hyperpod-cdk` run as people run them."""
    where.mkdir(parents=True)
    cdk_json = json.loads((ROOT / "cdk.json").read_text())
    cdk_json["context"] = context
    cdk_json["app"] = f"{ROOT / '.venv' / 'bin' / 'python'} {ROOT / 'app.py'}"
    (where / "cdk.json").write_text(json.dumps(cdk_json))
    return where


def run_cdk(*args: str, cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    """The real CLI path users take: node_modules' cdk on the venv's Node, app.py via cdk.json."""
    from cli.synth import cdk_cli

    command, env = cdk_cli()  # as the Makefile runs it, whatever ran before in this session
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# Every config the gates (cdk-nag, cfn-lint, checkov, least privilege) must pass.
GATED = [*ENVIRONMENTS, *CAPABILITIES]


def gated_templates(synth, name: str) -> list[str]:
    """The stack suffixes the gates must check for a config: all of an environment's; of a
    capability's, those whose template differs from dev's (the same template, the same findings)."""
    s = synth(name)
    if name not in CAPABILITIES:
        return sorted(s.templates)
    from cli.review.changes import differs

    dev = synth("dev").templates
    return sorted(k for k, t in s.templates.items() if k not in dev or differs(dev[k], t))


@pytest.fixture(scope="session")
def lint_cache(tmp_path_factory) -> Path:
    """The review's own cfn-lint cache (cli.review.report.lint: findings by template text, region and
    cfn-lint), one for the session: a template the gates linted is not linted again by a review."""
    return session_folder(tmp_path_factory, "lint-cache")


def review_outdir(where: Path, lint_cache: Path) -> Path:
    """A `hyperpod-cdk review --outdir` whose lint cache (review-cache/lint, as cli.main names
    it) is the session's."""
    from cli.main import LINT_CACHE

    (where / LINT_CACHE).parent.mkdir(parents=True, exist_ok=True)
    (where / LINT_CACHE).symlink_to(lint_cache, target_is_directory=True)
    return where


# Session fixtures that tests of several files may share: what they make is shared across xdist
# workers some other way (the syntheses go through the session's folder, _synthesized_once; the
# lint cache is a folder written one finding file at a time, by rename).
SHARED_ACROSS_WORKERS = {"synth", "lint_cache"}


# The files that cost most (each run prints its slowest; docs/measured.md), handed out first and
# longest first (pyproject's --no-loadscope-reorder keeps this order), so that the two workers end
# together rather than one alone on a long file. checkov's file synthesizes every gated config
# first; the bad-input corpus, mostly `cdk synth` refusals and validate, runs beside it, and
# cfn-lint after it.
LONGEST_FIRST = (
    "tests/test_security_gates.py", "tests/test_bad_inputs.py", "tests/test_quality_gates.py", "tests/training/test_train.py",
    "tests/training/test_resize.py", "tests/stacks/test_pipeline_steps.py", "tests/cli/test_review.py", "tests/cli/test_review_changes.py",
    "tests/test_workflows.py", "tests/training/test_options.py", "tests/cli/test_preflight.py", "tests/training/test_stop.py",
    "tests/test_docs.py",
)


def pytest_collection_modifyitems(config, items):
    """`make test` runs the files on every core, each file whole in one worker (`--dist loadfile`):
    a fixture set up once per module, or once per session by the tests of one file (the cfn-lint
    pool, checkov over every config, the corpus's CLI runs, a training run), is set up once across
    the workers too. A session fixture that tests of two files share would be set up by each
    worker that runs one of them: refused here, unless it shares its work across workers."""
    files: dict[str, set[str]] = {}
    for item in items:
        for name, defs in item._fixtureinfo.name2fixturedefs.items():
            fixture = defs[-1]
            if fixture.scope == "session" and name not in SHARED_ACROSS_WORKERS and fixture.func.__module__.startswith("tests."):
                files.setdefault(f"{fixture.func.__module__}.{name}", set()).add(item.nodeid.split("::")[0])
    shared = {name: sorted(where) for name, where in files.items() if len(where) > 1}
    if shared:
        raise pytest.UsageError(f"session fixtures used by tests of several files, which xdist workers would each set up: {shared}")
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order


def pytest_configure(config):
    """An xdist worker leaves out the interpreter's teardown at its exit: its results are with
    the controller by then, and freeing what a worker holds at the end (every synthesis read
    back, checkov's and cfn-lint's results, torch) one object at a time took about 5 s that the
    controller waited for. Registered first, it runs after every other exit handler (jsii's
    kernel stop among them)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        atexit.register(_exit_at_once)


def _exit_at_once() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
