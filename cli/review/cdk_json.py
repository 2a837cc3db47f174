"""Where each of an environment's fields is written in cdk.json: the line and columns a review's
SARIF result stands at (cli/review/sarif.py), read from the text itself (infra/json_text)."""

from __future__ import annotations

import bisect
import json
import re
from pathlib import Path

from infra import json_text


def _positions(text: str) -> dict[tuple, tuple[int, int]]:
    """Every member and element of a JSON text: its path -> (the offset where it starts, at its
    key for a member, and the offset where its value ends)."""
    return {path: (start, end) for path, start, end in json_text.members(text)}


def _steps(field: str, merged: dict) -> tuple | None:
    """`hyperpod.instance_groups[gpu].count` -> ("hyperpod", "instance_groups", 1, "count"), read
    against the environment's merged config: an index in brackets stays a number, a name is the
    item of that name ([gpu]; [instance_type=ml.p5.48xlarge] the first whose field has that
    value), and in a list of plain values the value itself ([arn:aws:iam::...:role/x])."""
    steps: list = []
    value = merged
    for part in re.findall(r"[^.\[\]]+|\[[^\]]*\]", field):
        if not part.startswith("["):
            steps.append(part)
            value = value.get(part) if isinstance(value, dict) else None
            continue
        inner = part[1:-1]
        items = value if isinstance(value, list) else []
        if inner.isdigit():
            index = int(inner)
        else:
            key, _, want = inner.rpartition("=")
            found = [i for i, item in enumerate(items)
                     if (item.get(key or "name") if isinstance(item, dict) else (None if key else item)) == want]
            if not found:
                return None
            index = found[0]
        steps.append(index)
        value = items[index] if index < len(items) else None
    return tuple(steps)


class CdkJson:
    """cdk.json's text and where each of an environment's fields is written in it."""

    def __init__(self, path: Path, env: str):
        from cli.review.config_diff import merged

        self.path, self.env = path, env
        self.text = path.read_text()
        self.context = json.loads(self.text).get("context", {})
        self.merged = merged(self.context, env)
        self.positions = _positions(self.text)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]

    def where(self, field: str) -> tuple[int, int, int] | None:
        """(line, first column, column after the end) of `field` as this environment gets it:
        from its own block where written there, else from `defaults` (mappings merge key by
        key, anything else is replaced whole, as infra.config.deep_merge does); None where
        cdk.json does not write it (its default is in code)."""
        steps = _steps(field, self.merged)
        if not steps:
            return None
        blocks = (("environments", self.env), ("defaults",))
        for block in blocks:
            found = self.positions.get(("context", *block, *steps))
            if found:
                return self._region(*found)
            value = (self.context.get("environments") or {}).get(self.env) if len(block) == 2 else self.context.get("defaults")
            for step in steps[:-1]:
                value = value.get(step) if isinstance(value, dict) else None
                if value is None:
                    break
                if not isinstance(value, dict):
                    return None  # a list or value written here replaces the other block's whole
        return None

    def _region(self, start: int, end: int) -> tuple[int, int, int]:
        line = bisect.bisect_right(self.line_starts, start) - 1
        line_end = self.text.find("\n", start)
        line_end = len(self.text) if line_end == -1 else line_end
        offset = self.line_starts[line]
        return line + 1, start - offset + 1, min(end, line_end) - offset + 1

    def env_entry(self) -> tuple[int, int, int] | None:
        found = self.positions.get(("context", "environments", self.env))
        return self._region(found[0], found[0] + len(self.env) + 2) if found else None
