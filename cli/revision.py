"""A git revision as the review's baseline: that revision's own app and cdk.json, synthesized
offline for the same environment in a temporary worktree, then compared with this checkout.

The worktree borrows this checkout's .venv and node_modules (links, so nothing is installed)
and is removed afterwards, whatever happens. In a git checkout with a `main` branch, `main`
is the default baseline: what the change would merge into.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_BRANCH = "main"
# Links into the worktree: what synthesis needs that git does not track.
SHARED = (".venv", "node_modules")
# A synthesis of every stack takes about a minute on two cores; ten leaves room for a busy machine.
SYNTH_TIMEOUT_SECONDS = 600

# Run inside the worktree, by that revision's own code: its cli.synth composes its app.py.
# A refusal of the revision's config is its first line (and how many more), never a traceback's
# last line naming the revision's exception class.
_SYNTH = """
import json, sys
from pathlib import Path
from cli.synth import synthesize
context = json.loads(Path("cdk.json").read_text())["context"]
try:
    synthesize(context, sys.argv[1], Path(sys.argv[2]))
except Exception as err:
    problems = [str(p) for p in (getattr(err, "problems", None) or [])]
    if not problems:
        raise
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    print(f"{problems[0]}{more}", file=sys.stderr)
    sys.exit(2)
"""


class RevisionError(ValueError):
    """A revision that cannot be synthesized as a baseline; the message is one line."""


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


def toplevel(folder: Path) -> Path | None:
    """The root of the git checkout holding `folder`, or None (no git, or not a checkout)."""
    if shutil.which("git") is None:
        return None
    done = _git(folder, "rev-parse", "--show-toplevel")
    return Path(done.stdout.strip()) if done.returncode == 0 else None


def resolve(repo: Path, spec: str) -> str | None:
    """The commit a revision names (a branch, a tag, a commit, HEAD~1), or None."""
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}")
    return done.stdout.strip() if done.returncode == 0 else None


def default(repo: Path | None) -> str | None:
    """`main` where the checkout has that branch."""
    if repo is None:
        return None
    return DEFAULT_BRANCH if _git(repo, "show-ref", "--verify", "--quiet", f"refs/heads/{DEFAULT_BRANCH}").returncode == 0 else None


def is_this_checkout(repo: Path, commit: str) -> bool:
    """Whether the commit is HEAD and no tracked file is changed: the same app as this checkout."""
    head = resolve(repo, "HEAD")
    return head == commit and _git(repo, "status", "--porcelain", "--untracked-files=no").stdout.strip() == ""


def synthesize(repo: Path, spec: str, commit: str, env: str, outdir: Path) -> None:
    """Synthesize `env` as of `commit` into `outdir`. `repo`: the folder of cdk.json, which may
    lie below the checkout's root. Raises RevisionError."""
    top = toplevel(repo)
    if top is None:
        raise RevisionError(f"--against {spec}: {repo} is not in a git checkout")
    with tempfile.TemporaryDirectory(prefix="hyperpod-review-") as tmp:
        tree = Path(tmp) / "tree"
        project = tree / repo.resolve().relative_to(top.resolve())
        added = _git(repo, "worktree", "add", "--detach", str(tree), commit)
        if added.returncode != 0:
            raise RevisionError(f"--against {spec}: git worktree add failed: {_last_line(added.stderr)}")
        try:
            for name in SHARED:
                if (repo / name).exists() and not (project / name).exists():
                    (project / name).symlink_to((repo / name).resolve())
            if not (project / "cli" / "synth.py").exists():
                raise RevisionError(f"--against {spec}: {commit[:12]} has no cli/synth.py to synthesize it with; pass an assembly instead")
            try:
                done = subprocess.run(
                    [sys.executable, "-c", _SYNTH, env, str(outdir)],
                    cwd=project, capture_output=True, text=True, env=dict(os.environ), timeout=SYNTH_TIMEOUT_SECONDS,
                )
            except subprocess.TimeoutExpired:
                raise RevisionError(f"--against {spec}: synthesizing {commit[:12]} took over {SYNTH_TIMEOUT_SECONDS} s") from None
            if done.returncode != 0:
                raise RevisionError(f"--against {spec}: synthesizing {env} as of {commit[:12]} failed: {_last_line(done.stderr)}")
        finally:
            _git(repo, "worktree", "remove", "--force", str(tree))
            _git(repo, "worktree", "prune")


# What a synthesized baseline depends on beside its tree and environment: the libraries that
# synthesize it (shared from this checkout's .venv, not the revision's).
SYNTH_PACKAGES = ("aws-cdk-lib", "constructs", "cdk-nag")
# Baselines kept in the cache; the least recently used beyond these are removed.
CACHE_KEEP = 8


def baseline_key(repo: Path, commit: str, env: str) -> str:
    """What a baseline was built from, as a folder name: the commit's tree (its app and its
    cdk.json, whichever commit holds them), the environment and the synthesizing libraries."""
    from importlib.metadata import PackageNotFoundError, version

    import hashlib

    tree = _git(repo, "rev-parse", f"{commit}^{{tree}}").stdout.strip()
    libraries = []
    for name in SYNTH_PACKAGES:
        try:
            libraries.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            libraries.append(f"{name}==?")
    digest = hashlib.sha256("\n".join([tree, env, *libraries, sys.version.split()[0]]).encode()).hexdigest()[:16]
    return f"{env}-{digest}"


def prune(cache: Path, keep: int = CACHE_KEEP) -> None:
    """Remove all but the `keep` most recently used baselines."""
    kept = sorted((p for p in cache.iterdir() if p.is_dir() and not p.name.endswith(".part")), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in kept[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def committed_context(repo: Path, commit: str) -> dict | None:
    """The cdk.json context as `commit` holds it (repo: the folder of cdk.json), or None."""
    import json

    top = toplevel(repo)
    if top is None:
        return None
    relative = (repo.resolve() / "cdk.json").relative_to(top.resolve()).as_posix()
    shown = _git(repo, "show", f"{commit}:{relative}")
    try:
        context = json.loads(shown.stdout).get("context") if shown.returncode == 0 else None
    except (ValueError, AttributeError):
        return None
    return context if isinstance(context, dict) else None


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][-300:] if lines else "no output"
