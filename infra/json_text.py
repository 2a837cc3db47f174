"""Where each member of a JSON text is written: one walk over the text that `json` itself parses,
for what the parsed value no longer says (offsets, lines, a key written twice in one object)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

_SPACE = re.compile(r"[ \t\n\r]*")


def members(text: str) -> Iterator[tuple[tuple, int, int]]:
    """(path, start, end) of every member and element of a valid JSON text, a key written twice
    included: path is the keys and list indexes down to it, start the offset of its key (of the
    element itself in a list), end the offset where its value ends; in the order they are written."""
    decoder = json.JSONDecoder()
    found: list[tuple[tuple, int, int]] = []

    def value(i: int, path: tuple) -> int:
        i = _SPACE.match(text, i).end()
        if text[i] in "{[":
            close, index = "}" if text[i] == "{" else "]", 0
            i = _SPACE.match(text, i + 1).end()
            while text[i] != close:
                start = i
                if close == "}":
                    key, i = json.decoder.scanstring(text, start + 1)
                    step, i = key, _SPACE.match(text, i).end() + 1  # past the colon
                else:
                    step, index = index, index + 1
                end = value(i, (*path, step))
                found.append(((*path, step), start, end))
                i = _SPACE.match(text, end).end()
                if text[i] == ",":
                    i = _SPACE.match(text, i + 1).end()
            return i + 1
        return decoder.raw_decode(text, i)[1]

    value(0, ())
    return iter(sorted(found, key=lambda member: member[1]))
