"""The README and docs/ say what the code does, and have one source each.

- The configuration reference is written from the config models (infra/config/reference.py):
  the page must be what the models write today.
- Every command line a page shows runs here (offline: this checkout's cdk.json, the recorded
  dumps in tests/fixtures), or is in ALLOWED with the reason it cannot run offline; even then a
  `hyperpod-cdk` line must parse with the CLI's own parser and a `make` line name a target.
- Every console block is a command and what it prints: the command runs again and must print
  exactly that. Every generated region is what its generator writes today.
- Every repository path and every link a page names exists.

HYPERPOD_DOCS_WRITE=1 writes every console block and generated region again instead of failing
(then read the diff): `HYPERPOD_DOCS_WRITE=1 pytest tests/test_docs.py`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import pytest

from infra import validation
from infra.config.loading import fields
from infra.naming import STACK_SUFFIXES
from tests import doc_pages
from tests.conftest import CONTEXT, ROOT, cdk_project, patched_context, review_outdir

WRITE = os.environ.get("HYPERPOD_DOCS_WRITE") == "1"
PAGES = doc_pages.pages()

# Words a page writes for what the reader puts in, and what a test runs with instead.
PLACEHOLDERS = {
    "<uri>": "111111111111.dkr.ecr.us-east-1.amazonaws.com/llama-fsdp:1",
    "<training image URI>": "111111111111.dkr.ecr.us-east-1.amazonaws.com/llama-fsdp:1",
    "<env>": "dev",
}

# Command lines no test here runs, each with why: a pattern over the line's simple command (its
# program without its folder, then its words), and the reason. Each entry must still match some
# line of some page.
ALLOWED: dict[str, str] = {
    r"^aws ": "calls AWS: needs an account and credentials",
    r"^kubectl ": "needs a deployed cluster (the current kubectl context)",
    r"^cdk (bootstrap|deploy|destroy|diff)\b": "needs an AWS account and credentials (a diff reads the deployed stacks)",
    r"^(for|do|done)\b": "a shell loop around `aws` lines",
    r"^export PATH=": "sets the shell's PATH",
    r"^bash$": "runs what `hyperpod-cdk dashboards` prints: AWS calls with your credentials",
    r"^make synth\b": "installs into .venv and node_modules and writes cdk.out, which would re-point a shared install; its two "
    "steps run here: `cdk synth` through the pinned CLI (tests/infra/test_app_cli_path.py) and `hyperpod-cdk review "
    "--assembly` (docs/review-example.md, below)",
    r"^make test$": "is this suite",
    r"^make (install|install-synth)$": "installs packages from PyPI and npm",
    r"^make hyperpod-chart\b": "clones the chart's repository from GitHub and runs helm dependency build (the network)",
    r"^python -m pytest\b": "is the suite (or this test) itself",
    r"^hyperpod-cdk preflight\b": "calls AWS read-only: needs credentials (tests/cli/test_preflight*.py run it on stubbed accounts)",
    r"^hyperpod-cdk review\b(?!.*--assembly)": "synthesizes (10-20 s, and main's app in a git worktree): tests/cli/test_review*.py "
    "run it; the review example runs it on two kept syntheses",
    r"^hyperpod-cdk accept -c env=prod( --group \S+)*( --no-deep-health-check)?$": "needs a deployed cluster and credentials "
    "(tests/cli/test_accept.py runs it against a fake cluster)",
    r"^hyperpod-cdk topology( --summary| --full| --format html --output \S+)?$": "reads the live cluster through kubectl",
    r"^hyperpod-cdk dashboards\b": "needs addons.observability.grafana.enabled, off in the committed cdk.json "
    "(tests/cli/test_dashboards.py runs it with Grafana on)",
    r"^hyperpod-cdk job-record -c env=prod$": "reads the job's S3 checkpoint prefix with credentials (tests/cli/test_job_record.py "
    "reads a moto bucket; tests/training/test_nonfinite.py a real give-up's folder)",
}

# Lines whose exit status is not 0 on purpose.
EXIT_STATUS = {
    "hyperpod-cdk accept -c env=prod --from tests/fixtures/acceptance/prod-two-nodes": 1,  # the recording fails two checks
    "hyperpod-cdk validate 2>&1 | grep ^error": 2,  # a config with three mistakes
    "hyperpod-cdk render-job -c env=prod --team ml-production --nodes 4 --image <uri> 2>&1 | grep ^error": 2,  # never admitted
}


def _substituted(line: str) -> str:
    for word, value in PLACEHOLDERS.items():
        line = line.replace(word, value)
    return line


def _all_lines() -> list[tuple[doc_pages.Block, str]]:
    return [(b, line) for page in PAGES for b in doc_pages.blocks(page) for line in doc_pages.command_lines(b)]


def _commands() -> list[tuple[doc_pages.Block, str, list[str]]]:
    """(block, its line, one simple command of the line as words) for every command a page shows."""
    return [(b, line, doc_pages.program(words)) for b, line in _all_lines() for words in doc_pages.segments(_substituted(line))]


def _allowed(words: list[str]) -> str | None:
    joined = " ".join(words)
    return next((pattern for pattern in ALLOWED if re.search(pattern, joined)), None)


# ---------------------------------------------------------------- running a line here


def _sandbox(where: Path, context: dict | None = None) -> Path:
    """A folder to run commands in, as a checkout is: its cdk.json (this one's, or `context`), the
    recorded dumps under tests/, and the files the pages' examples name (nodes.json, pods.json)."""
    if context is None:
        where.mkdir(parents=True)
        (where / "cdk.json").symlink_to(ROOT / "cdk.json")
    else:
        cdk_project(context, where)
    (where / "tests").symlink_to(ROOT / "tests")
    (where / "nodes.json").symlink_to(ROOT / "tests/fixtures/nodes/full_labels.json")
    (where / "pods.json").write_text(json.dumps({"items": []}))
    return where


def _run_cli(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    from cli import main as cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(argv)
    return status, out.getvalue(), err.getvalue()


def _run_module(words: list[str], cwd: Path) -> tuple[int, str, str]:
    """`python -m MODULE ARGS`: the module's main(ARGS), in-process."""
    import importlib

    module = importlib.import_module(words[2])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = module.main(words[3:])
    return status, out.getvalue(), err.getvalue()


def run_line(line: str, cwd: Path) -> tuple[int, str]:
    """Run a page's line here: its first simple command in-process (hyperpod-cdk, python -m), its
    `2>&1` and its `| grep PATTERN` as the shell would. (exit status, what it prints)."""
    first, *rest = doc_pages.segments(_substituted(line))
    words = doc_pages.program(first)
    if words[0] == "hyperpod-cdk":
        status, out, err = _run_cli(words[1:], cwd)
    elif words[:2] in (["python", "-m"], ["python3", "-m"]):
        status, out, err = _run_module(words, cwd)
    else:
        raise AssertionError(f"no way to run {line!r} here; add it to ALLOWED with why")
    printed = out + err if "2>&1" in line else out
    for words in rest:
        if _allowed(doc_pages.program(words)):  # `| kubectl apply -f -`: the part that runs here is the first
            continue
        assert words[0] == "grep" and len(words) == 2, f"{line!r}: only `| grep PATTERN` follows a command run here"
        printed = "".join(l for l in printed.splitlines(keepends=True) if re.search(words[1], l))
    return status, printed


# ---------------------------------------------------------------- what writes the written text


def _validate_example(block, page_blocks, tmp_path, synth) -> str:
    """The config of the JSON block just above, as environments.dev, validated."""
    above = [b for b in page_blocks if b.lang == "json" and b.line < block.line][-1]
    project = _sandbox(tmp_path / "validate-example", patched_context("dev", json.loads(above.body)))
    return run_line(doc_pages.console(block)[0], project)[1]


def _drift_account(block, page_blocks, tmp_path, synth) -> str:
    """preflight's drift section, against the account tests/cli/test_drift.py stubs."""
    from cli import preflight
    from tests.cli.test_drift import PATCH, drift

    settings = validation.load_settings(patched_context("dev", PATCH), "dev")[0]
    return preflight.table(drift(settings)) + "\n"


SETUPS = {"the config above as environments.dev": _validate_example, "the account tests/cli/test_drift.py stubs": _drift_account}

REVIEW_COMMAND = "hyperpod-cdk review --env prod --against main.out --assembly cdk.out"


def _mirror(assembly: Path, where: Path) -> None:
    """A folder whose entries are links to an assembly's: what a command writes beside them stays out
    of the session's synthesis."""
    where.mkdir()
    for entry in assembly.iterdir():
        (where / entry.name).symlink_to(entry)


def _review_example(tmp_path, synth, lint_cache) -> str:
    """The review of the team pull request of tests/cli/test_review_teams.py against prod as cdk.json
    has it: both syntheses are the session's (no synthesis of its own); cfn-lint and `cdk diff` run."""
    from tests.cli.test_review_teams import PULL_REQUEST

    project = cdk_project(patched_context("prod", PULL_REQUEST), tmp_path / "review-example")
    _mirror(synth("prod", PULL_REQUEST).outdir, project / "cdk.out")
    _mirror(synth("prod").outdir, project / "main.out")
    review_outdir(project / "cdk.out", lint_cache)  # the review writes beside the assembly, as make synth's does
    status, out, err = _run_cli(REVIEW_COMMAND.split()[1:], project)
    assert status == 0, err
    change = json.dumps(PULL_REQUEST, indent=2)
    return f"\n```bash\n{REVIEW_COMMAND}\n```\n\nafter this change to `environments.prod`:\n\n```json\n{change}\n```\n\n{out}"


def _nag_acknowledgments(tmp_path, synth, lint_cache) -> str:
    """dev's cdk-nag acknowledgments, grouped by reason as the review prints them."""
    from cli.review import report as review

    report = review.to_markdown(review.build(synth("dev").outdir, with_lint=False, with_cdk_diff=False))
    return "\n" + "\n".join(line for line in report.splitlines() if line.startswith("- acknowledged (")) + "\n\n"


GENERATED = {
    "the review example": (REVIEW_COMMAND, _review_example),
    "dev's cdk-nag acknowledgments": (None, _nag_acknowledgments),
}


def _write(page: Path, start: int, end: int, new: str) -> None:
    content = page.read_text()
    page.write_text(content[:start] + new + content[end:])


# ---------------------------------------------------------------- the tests


def test_the_configuration_reference_is_what_the_models_write():
    from infra.config import reference

    page = ROOT / "docs" / "config-reference.md"
    written = reference.render(CONTEXT.get("defaults") or {})
    if WRITE and page.read_text() != written:
        page.write_text(written)
    assert page.read_text() == written, f"docs/config-reference.md differs from the models: run {reference.COMMAND}"


def test_every_config_field_has_a_description_in_the_reference():
    page = (ROOT / "docs" / "config-reference.md").read_text()
    for path, field in fields():
        assert field.description, f"{path} has no description"
        assert f"| `{path}` |" in page or f"## `{path}`" in page


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_console_block_prints_what_its_command_prints(page, tmp_path, synth):
    page_blocks = doc_pages.blocks(page)
    # From the end, so that writing one block leaves the offsets of those above it as they were.
    for block in reversed([b for b in page_blocks if b.lang == "console"]):
        line, shown = doc_pages.console(block)
        if block.setup:
            assert block.setup in SETUPS, f"{block.where}: no setup {block.setup!r} in tests/test_docs.py"
            printed = SETUPS[block.setup](block, page_blocks, tmp_path, synth)
        else:
            status, printed = run_line(line, _sandbox(tmp_path / f"line{block.line}"))
            assert status == EXIT_STATUS.get(line, 0), f"{block.where}: {line} exited {status}"
        if WRITE and printed != shown:
            _write(page, block.start, block.end, f"$ {line}\n{printed}")
        assert printed == shown or WRITE, f"{block.where}: {line} prints otherwise now (HYPERPOD_DOCS_WRITE=1 writes it)"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_generated_region_is_what_the_code_writes(page, tmp_path, synth, lint_cache):
    for region in reversed(doc_pages.regions(page)):
        assert region.name in GENERATED, f"{page.name}:{region.line}: nothing generates {region.name!r}"
        written = GENERATED[region.name][1](tmp_path, synth, lint_cache)
        if WRITE and written != region.body:
            _write(page, region.start, region.end, written)
        assert written == region.body or WRITE, f"{page.name}:{region.line}: {region.name} differs (HYPERPOD_DOCS_WRITE=1 writes it)"


def test_every_command_a_page_shows_runs_here_or_is_allowed_with_why(tmp_path):
    from cli import main as cli

    run = {doc_pages.console(b)[0] for page in PAGES for b in doc_pages.blocks(page) if b.lang == "console"}
    run |= {command for command, _ in GENERATED.values() if command}
    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))
    used, ran = set(), 0
    for block, line, words in _commands():
        pattern = _allowed(words)
        if words[0] == "hyperpod-cdk":  # allowed or not, its flags are the CLI's
            argv = [w for w in words[1:] if w != "SUBSTITUTION"]
            with contextlib.redirect_stderr(io.StringIO()) as err:
                try:
                    cli.build_parser().parse_args(argv)
                except SystemExit:
                    pytest.fail(f"{block.where}: {line}: {err.getvalue().strip().splitlines()[-1]}")
        if words[0] == "make":
            assert all(w in targets or re.match(r"^[A-Z]+=", w) for w in words[1:]), f"{block.where}: {line}: no such target"
        if pattern:
            used.add(pattern)
        elif line in run or doc_pages.program(doc_pages.segments(_substituted(line))[0]) != words:
            continue  # a console block's command runs in its own test; a later part of a line with the first
        else:
            status, _ = run_line(line, _sandbox(tmp_path / f"run{ran}"))
            assert status == EXIT_STATUS.get(line, 0), f"{block.where}: {line} exited {status}"
            ran += 1
    assert set(ALLOWED) - used == set(), "ALLOWED has entries no page needs any more"
    assert ran >= 5


def test_every_command_written_inline_has_the_clis_flags_and_the_makefiles_targets():
    """Commands in the prose (`make gpu-smoke`, `hyperpod-cdk team NAME -c env=ENV`) are not run, but
    what they name must exist: a target, a subcommand and its flags."""
    from cli import main as cli

    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))
    checked = 0
    for page in PAGES:
        prose = re.sub(r"^\s*(`{3,}).*?^\s*\1", "", page.read_text(), flags=re.M | re.S)
        for span in re.findall(r"`((?:hyperpod-cdk|make) [^`]+)`", prose):
            for words in doc_pages.segments(_substituted(span)):
                words = doc_pages.program(words)
                if words[0] == "make":
                    assert all(w in targets or re.match(r"^[A-Z]+=", w) for w in words[1:]), f"{page.name}: `{span}`"
                elif words[0] == "hyperpod-cdk":
                    with contextlib.redirect_stderr(io.StringIO()) as err:
                        try:
                            cli.build_parser().parse_args([w for w in words[1:] if w != "SUBSTITUTION"])
                        except SystemExit as exit_:
                            if exit_.code == 0:  # --version, --help
                                continue
                            pytest.fail(f"{page.name}: `{span}`: {err.getvalue().strip().splitlines()[-1]}")
                checked += 1
    assert checked >= 10


def test_every_path_a_page_names_is_in_the_repository():
    named = re.compile(r"(?<![\w./<-])((?:app\.py|cdk\.json|Makefile|pyproject\.toml|package-lock\.json)\b|"
                       r"(?:infra|cli|stacks|addons|manifests|training|tests|bin|docs)/[\w./-]*[\w/])")
    missing = []
    for page in PAGES:
        content = page.read_text()
        for path in named.findall(content):
            if not (ROOT / path.rstrip(".")).exists():
                missing.append(f"{page.name}: {path}")
        prose = re.sub(r"`[^`\n]*`", "", re.sub(r"^(`{3,}).*?^\1", "", content, flags=re.M | re.S))  # links outside code
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", prose):
            if not target.startswith(("http://", "https://")) and not (page.parent / target).exists():
                missing.append(f"{page.name}: link {target}")
    # The config models' descriptions name paths too; the reference shows them.
    for path, field in fields():
        for named_path in named.findall(field.description):
            if not (ROOT / named_path.rstrip(".")).exists():
                missing.append(f"{path}'s description: {named_path}")
    assert missing == [], "\n".join(missing)


def test_no_page_is_longer_than_600_lines_and_the_readme_reaches_the_first_deploy_in_150():
    for page in PAGES:
        assert len(page.read_text().splitlines()) <= 600, page.name
    readme = doc_pages.README.read_text().splitlines()
    assert any(line.startswith("cdk deploy --all -c env=dev") for line in readme[:150])
    assert sum(line.strip() in ("## Tearing down", "### Tearing down") for page in PAGES for line in page.read_text().splitlines()) == 1


def test_the_two_commands_are_the_readmes_first_block():
    first = doc_pages.blocks(doc_pages.README)[0]
    assert [doc_pages.segments(line)[0] for line in doc_pages.command_lines(first)] == [["make", "synth"], ["make", "test"]]


def test_the_readmes_cdk_json_excerpt_is_the_committed_defaults():
    excerpt = next(b for b in doc_pages.blocks(doc_pages.README) if b.lang == "json")
    shown = json.loads("{" + excerpt.body + "}")["defaults"]
    defaults = CONTEXT["defaults"]
    for key, value in shown.items():
        if isinstance(value, dict):
            for inner, v in value.items():
                assert defaults[key][inner] == v, f"defaults.{key}.{inner}"
        else:
            assert defaults[key] == value, f"defaults.{key}"


def test_every_stack_the_app_builds_is_in_the_readme_in_deploy_order(synth):
    readme = doc_pages.README.read_text()
    rows = re.findall(r"^\| \d \| `<prefix>-<env>-([a-z-]+)` \|", readme, re.M)
    assert rows == list(STACK_SUFFIXES)
    assert set(synth("dev").templates) <= set(STACK_SUFFIXES)
    assert re.findall(r"^\| \d \| `<prefix>-<env>-([a-z-]+)` \|", doc_pages.text("stacks.md"), re.M) == list(STACK_SUFFIXES)
    assert " -> ".join(STACK_SUFFIXES) in doc_pages.shown("deploying.md")


def test_the_reviews_estimates_and_wildcard_roles_are_what_the_pages_say(synth):
    from cli.review import report as review

    figures = {}
    for env in ("dev", "prod"):
        report = review.build(synth(env).outdir, with_lint=False, with_cdk_diff=False)
        figures[env] = report
    dev, prod = figures["dev"], figures["prod"]
    measured = doc_pages.shown("measured.md")
    assert (f"dev about {dev['deploy_plan']['minutes']} minutes to deploy and ${dev['cost']['hourly']:.2f} an hour "
            f"(${dev['cost']['monthly']:,.0f} a month)") in measured
    assert (f"prod about {prod['deploy_plan']['minutes']} minutes ({prod['deploy_plan']['hyperpod_nodes_minutes']} of them "
            f"for four p5 nodes with deep health checks) and ${prod['cost']['hourly']:.2f} an hour "
            f"(${prod['cost']['monthly']:,.0f} a month)") in measured
    assert (f"about {dev['deploy_plan']['minutes']} minutes to deploy and ${dev['cost']['hourly']:.2f} an hour "
            f"(${dev['cost']['monthly']:,.0f} a month)") in doc_pages.shown("README.md")
    assert (f"{dev['iam']['roles_with_wildcards']} of {dev['iam']['roles']} in dev, {prod['iam']['roles_with_wildcards']} of "
            f"{prod['iam']['roles']} in prod") in doc_pages.shown("security.md")
