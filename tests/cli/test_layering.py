"""The house: infra/ is what the stacks build on, cli/ is what operators run; nothing below
the CLI imports it."""

from __future__ import annotations

import ast

from tests.conftest import ROOT


def test_nothing_the_stacks_build_on_imports_the_operator_tools():
    offenders = []
    for folder in ("infra", "stacks", "addons", "manifests", "training"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(n == "cli" or n.startswith("cli.") for n in names):
                    offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
