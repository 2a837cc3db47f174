"""`cdk diff`'s text, made shorter where it repeats itself, for the review's report.

- Resources whose diffs are the same (the node gate's links, which all carry the group counts)
  are folded into the first, with the others named and counted.
- A value of many lines (an alert rule group's YAML) that cdk diff prints whole before and
  after is shown as the lines that change, with a line of context; so is a value of one long
  line that is JSON (a Kubernetes manifest, several KB on one line), laid out a field a line.

Everything else is `cdk diff`'s own text.
"""

from __future__ import annotations

import difflib
import re

_HEADER = re.compile(r"^\[([+\-~])\] (\S+) (\S+)(?: (\S+))?")  # [~] Type path logical-id
_SECTION = re.compile(r"^(?:Resources|Outputs|Parameters|Conditions|Mappings|Other Changes|IAM Statement Changes|"
                      r"Security Group Changes|Stack \S.*|✨.*|Number of stacks.*)$")
_TREE = re.compile(r"^([ │]*[├└]─ )\[([+\-~ ])\] ?(.*)$")  # ` ├─ [-] value`
# A value shown on more lines than this is summarized.
LONG_VALUE = 4
# A value of one line longer than this is laid out on lines where it reads as JSON.
LONG_LINE = 200


def _lines_of(value: list[str]) -> list[str]:
    """A value's lines; one long line of JSON (or of a JSON string holding JSON) a field a line."""
    import json

    if len(value) != 1 or len(value[0]) <= LONG_LINE:
        return value
    try:
        doc = json.loads(value[0])
        if isinstance(doc, str):
            doc = json.loads(doc)
    except ValueError:
        return value
    return json.dumps(doc, indent=1).splitlines() if isinstance(doc, (dict, list)) else value


def fold(text: str) -> str:
    out: list[str] = []
    block: list[str] = []
    blocks: list[list[str]] = []

    def flush_blocks():
        out.extend(_folded(blocks))
        blocks.clear()

    def close() -> list[str]:
        """End the block; its trailing blank lines are the section's."""
        nonlocal block
        trailing = []
        while block and not block[-1].strip():
            trailing.insert(0, block.pop())
        if block:
            blocks.append(block)
        block = []
        return trailing

    for line in text.splitlines():
        if _HEADER.match(line):
            blank = close()
            if blank:  # a blank line between two resources ends a run of them
                flush_blocks()
                out.extend(blank)
            block = [line]
        elif block and not _SECTION.match(line):
            block.append(line)  # the block's tree, or a line of a value of many lines (blank ones too)
        else:
            blank = close()
            flush_blocks()
            out.extend(blank)
            out.append(line)
    blank = close()
    flush_blocks()
    out.extend(blank)
    return "\n".join(out)


def _folded(blocks: list[list[str]]) -> list[str]:
    """Blocks with the same change (marker, type and body) as one, in the order first seen."""
    groups: dict[tuple, list[list[str]]] = {}
    for block in blocks:
        marker, type_ = _HEADER.match(block[0]).group(1, 2)
        groups.setdefault((marker, type_, tuple(block[1:])), []).append(block)
    out = []
    for same in groups.values():
        header = same[0][0]
        if len(same) > 1:
            others = ", ".join(_HEADER.match(b[0]).group(3) for b in same[1:])
            header += f" (x{len(same)}: the same change also in {others})"
        out += [header] + _summarized(same[0][1:])
    return out


def _entries(body: list[str]) -> list[list[str]]:
    """A block's body as tree entries, each a tree line and the lines of its value that follow."""
    entries: list[list[str]] = []
    for line in body:
        if _TREE.match(line) or not entries:
            entries.append([line])
        else:
            entries[-1].append(line)
    return entries


def _summarized(body: list[str]) -> list[str]:
    entries = _entries(body)
    out: list[str] = []
    i = 0
    while i < len(entries):
        entry = entries[i]
        first = _TREE.match(entry[0])
        after = _TREE.match(entries[i + 1][0]) if i + 1 < len(entries) else None
        pair = first and after and first.group(2) == "-" and after.group(2) == "+"
        old = _lines_of(_trimmed([first.group(3), *entry[1:]])) if pair else []
        new = _lines_of(_trimmed([after.group(3), *entries[i + 1][1:]])) if pair else []
        if pair and max(len(old), len(new), len(entry), len(entries[i + 1])) > LONG_VALUE:
            indent = " " * len(first.group(1))
            out.append(f"{first.group(1)}[~] a value of {len(old)} -> {len(new)} lines; the lines that change:")
            for line in difflib.unified_diff(old, new, lineterm="", n=1):
                if line.startswith(("---", "+++")):
                    continue
                out.append(f"{indent}    {line}")
            i += 2
            continue
        out += entry
        i += 1
    return out


def _trimmed(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines
