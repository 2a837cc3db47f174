"""`cdk diff` of each stack of an assembly against its baseline template, offline: the pinned CDK
CLI's own account of what a change set would change, shown under the review's callouts."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cli.review import diff_text
from cli.review.assembly import load_stacks
from cli.review.changes import Baseline, without_asset_metadata
from cli.synth import cdk_cli

# Terminal control sequences (colour, cursor): none may reach a report file.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def cdk_diff(new_outdir: Path, old: Baseline, stacks: list[str]) -> dict[str, str]:
    """`cdk diff` of each stack (by its CloudFormation name) against its baseline template, run
    side by side, offline."""
    command, base_env = cdk_cli()
    # The CLI's id of each stack: its name under the App, `<stage>/<name>` in a Stage's assembly.
    cli_ids = {s.name: s.cli_id for s in load_stacks(new_outdir)}
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # Both sides without asset metadata: a copy of the assembly's manifest and templates.
        app = Path(tmp) / "assembly"
        app.mkdir()
        for path in new_outdir.glob("*.json"):
            text = path.read_text()
            if path.name.endswith(".template.json"):
                text = json.dumps(without_asset_metadata(json.loads(text)))
            (app / path.name).write_text(text)

        def one(name: str) -> tuple[str, str]:
            path = Path(tmp) / f"{name}.json"
            path.write_text(json.dumps(without_asset_metadata(old.templates.get(name, {}))))
            # Plain text whatever the caller's terminal says: FORCE_COLOR (common in CI) wins
            # over NO_COLOR in the CLI's colour library, so it is dropped, not just outvoted.
            env = {**{k: v for k, v in base_env.items() if k != "FORCE_COLOR"}, "NO_COLOR": "1", "CI": "true"}
            done = subprocess.run(
                [*command, "diff", "--app", str(app), "--template", str(path), "--exclusively", cli_ids.get(name, name)],
                capture_output=True, text=True, env=env, timeout=300,
            )
            if done.returncode not in (0, 1):  # 1: differences found (with --fail)
                return name, f"cdk diff failed: {done.stderr.strip()[-400:]}"
            return name, diff_text.fold(re.sub(r"\n{3,}", "\n\n", ANSI.sub("", done.stdout).strip()))

        with ThreadPoolExecutor(max_workers=2) as pool:
            for name, text in pool.map(one, stacks):
                results[name] = text
    return results
