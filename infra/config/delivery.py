"""Delivery: the pipeline (CDK Pipelines) that deploys environments in waves from one repository
branch, with its per-field checks. Which environments the waves name, and whether each of them
validates, is a rule across environments: addons/registry.py's `pipeline` reads the context."""

from __future__ import annotations

import re
from typing import Optional

from pydantic import Field

from infra.config.base import Model, Problems, duplicates

# What `git check-ref-format --branch` refuses (git-check-ref-format(1), rules 1 to 10, and its
# --branch mode: no leading '-', not HEAD): a branch git cannot name, no push ever runs the pipeline.
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")


def branch_problem(name: str) -> str | None:
    """Why git refuses `name` as a branch, or None."""
    if name.startswith("-") or name == "HEAD":
        return "starts with '-' or is HEAD"
    if name.startswith("/") or name.endswith(("/", ".")) or _REF_FORBIDDEN.search(name):
        return "holds what git refuses in a ref (a space or control character, ~ ^ : ? * [ \\, '..', '@{', '//', or a leading or trailing '/', or a trailing '.')"
    if any(part.startswith(".") or part.endswith(".lock") for part in name.split("/")):
        return "has a component that starts with '.' or ends with '.lock'"
    return None


# GitHub's owner/name (GitHub: "Repository names can contain ASCII letters, digits, and the characters ., -, and _";
# an owner is letters, digits and single hyphens); CodePipeline's CodeStarSourceConnection action takes it as FullRepositoryId.
REPOSITORY = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")


class DeliverySource(Model):
    """Where the pipeline takes its code: a repository branch through a CodeConnections connection."""

    connection_arn: str = Field(
        description="The CodeConnections connection to the repository's host (GitHub, GitLab, Bitbucket), created once in "
        "the console, where its owner completes the handshake (docs/delivery.md, The connection).",
    )
    repository: str = Field(description="The repository as `owner/name`.")
    branch: str = Field(default="main", description="The branch whose every push runs the pipeline (a name `git "
                        "check-ref-format --branch` accepts). Protect it: whoever may push to it changes the pipeline itself "
                        "(docs/delivery.md, Who can change prod).")


class DeliverySettings(Model):
    source: DeliverySource = Field(description="The repository branch the pipeline builds, and the connection it reads it through.")
    account: Optional[str] = Field(
        default=None, pattern=r"^\d{12}$",
        description="The account the pipeline runs in (default: this environment's); every environment's account trusts it "
        "through `cdk bootstrap --trust` (docs/delivery.md). A tooling account of its own: refused where it is the account of "
        "an environment nobody approves while an approved one in another account would trust it.",
    )
    region: Optional[str] = Field(
        default=None, pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$", description="The pipeline's region (default: this environment's)."
    )
    waves: tuple[tuple[str, ...], ...] = Field(
        min_length=1,
        description="The environments the pipeline deploys, in order: a list of waves, each a list of environment names "
        "deployed side by side, in step (e.g. `[[\"dev\", \"staging\"], [\"prod\"]]`; a wave is one CodePipeline stage, "
        "so an environment beside an approved one waits for its approval).",
    )
    protected: Optional[tuple[str, ...]] = Field(
        default=None,
        description="The environments that wait for a person's approval before their stage (default: those with "
        "`protection.termination_protection`, which prod has and dev turns off).",
    )

    @property
    def environments(self) -> tuple[str, ...]:
        return tuple(name for wave in self.waves for name in wave)

    def approved(self, waves) -> set[str]:
        """The environments a person approves before their stage: `protected` as configured, else
        those of `waves` (each environment's settings, wave by wave) whose stacks have termination
        protection."""
        if self.protected is not None:
            return set(self.protected)
        return {s.env_name for wave in waves for s in wave if s.protection.termination_protection}


def check_delivery(d: DeliverySettings | None, p: Problems) -> None:
    """The waves' own shape (it reads the block alone, so this module needs nothing of the root
    Settings); whether each name is an environment that validates is the pipeline's rule."""
    if d is None:
        return
    for i, wave in enumerate(d.waves):
        if not wave:
            p.error(f"delivery.waves[{i}]", [], "names no environment; a wave deploys at least one")
    for name in duplicates(d.environments):
        p.error("delivery.waves", name, "is named twice; each environment has one stage in the pipeline")
    for name in d.protected or ():
        if name not in d.environments:
            p.error("delivery.protected", name, f"is in no wave; the waves name {', '.join(d.environments) or 'none'}")
    if not REPOSITORY.match(d.source.repository):
        p.error("delivery.source.repository", d.source.repository, "is not owner/name (letters, digits, '.', '-' and '_')")
    if d.source.branch and (why := branch_problem(d.source.branch)):
        p.error("delivery.source.branch", d.source.branch, f"is no branch git can name (git check-ref-format --branch): it {why}")
