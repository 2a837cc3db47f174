"""The documentation as the tests read it: the README and the pages of docs/, their fenced
blocks, the command lines those blocks show, and the blocks and regions a command or the code
writes (each checked, and written again with HYPERPOD_DOCS_WRITE=1, by tests/test_docs.py).

Two kinds of written text:
- a ```console block: its first line is `$ COMMAND`, the rest is what COMMAND prints. A
  `<!-- setup: NAME -->` line right above it names how it runs where it needs more than this
  checkout's cdk.json (a changed config, a stubbed account).
- a region between `<!-- generated: NAME -->` and `<!-- end generated -->`: text the code writes
  that is no single command's output, or is Markdown meant to render (the whole review).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"

SHELL_LANGS = ("bash", "sh", "shell")
_FENCE = re.compile(r"^\s*(`{3,})(\S*)\s*$")
_SETUP = re.compile(r"^<!-- setup: (.+?) -->$")
_GENERATED = re.compile(r"^<!-- generated: (.+?) -->$")
_END = "<!-- end generated -->"


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def text(name: str) -> str:
    """A page's text by its name: "README.md" or a page of docs/ ("deploying.md")."""
    return (README if name == "README.md" else DOCS / name).read_text()


def shown(name: str) -> str:
    """A page's text with its line breaks and runs of spaces made one space: for finding a sentence
    that the page wraps across lines."""
    return " ".join(text(name).split())


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    body: str  # between the fences, with its final newline
    start: int  # character offsets of the body in the page
    end: int
    setup: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


@dataclass
class Region:
    page: Path
    line: int
    name: str
    body: str
    start: int
    end: int


def blocks(page: Path) -> list[Block]:
    out, lines, offset = [], page.read_text().splitlines(keepends=True), 0
    i = 0
    starts = []
    for line in lines:
        starts.append(offset)
        offset += len(line)
    while i < len(lines):
        fence = _FENCE.match(lines[i].rstrip("\n"))
        if not fence:
            i += 1
            continue
        ticks, lang = fence.groups()
        j = i + 1
        while j < len(lines) and not re.match(rf"^\s*{ticks}`*\s*$", lines[j].rstrip("\n")):
            j += 1
        setup = _SETUP.match(lines[i - 1].strip()) if i else None
        body_start = starts[i + 1] if i + 1 < len(lines) else offset
        body_end = starts[j] if j < len(lines) else offset
        out.append(Block(page, i + 1, lang, "".join(lines[i + 1:j]), body_start, body_end, setup.group(1) if setup else None))
        i = j + 1
    return out


def regions(page: Path) -> list[Region]:
    content = page.read_text()
    out = []
    for match in re.finditer(r"^<!-- generated: (.+?) -->\n", content, re.M):
        end = content.find(_END, match.end())
        assert end != -1, f"{page.name}: <!-- generated: {match.group(1)} --> has no {_END}"
        line = content.count("\n", 0, match.start()) + 1
        out.append(Region(page, line, match.group(1), content[match.end():end], match.end(), end))
    return out


def console(block: Block) -> tuple[str, str]:
    """(the command, what the block says it prints) of a console block."""
    first, _, rest = block.body.partition("\n")
    assert first.startswith("$ "), f"{block.where}: a console block starts with `$ COMMAND`"
    return first[2:].strip(), rest


def command_lines(block: Block) -> list[str]:
    """The command lines a block shows: every line of a shell block (continuations joined), the
    `$` lines of a console block."""
    if block.lang == "console":
        return [console(block)[0]]
    if block.lang not in SHELL_LANGS:
        return []
    out, pending = [], ""
    for line in block.body.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(line.strip())
    return out


_REDIRECT = (">", ">>", "<", ">&", "&>", "2>")


def segments(line: str) -> list[list[str]]:
    """The simple commands of a shell line, as words: split at pipes, `&&`, `||` and `;`, without
    comments, redirections, leading variable assignments and command substitutions (`$(...)`
    becomes the word SUBSTITUTION)."""
    line = re.sub(r"\$\([^()]*\)", "SUBSTITUTION", line)
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    out, current, skip = [], [], False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        if word in ("|", "&&", "||", ";"):
            out.append(current)
            current = []
        elif word in _REDIRECT or word.startswith((">", "2>")):
            skip = word in _REDIRECT  # the target follows as its own word
        elif word.isdigit() and i + 1 < len(words) and words[i + 1].startswith(">"):
            continue  # the 2 of 2>&1
        else:
            current.append(word)
    out.append(current)
    commands = []
    for words in out:
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]
        if words:
            commands.append(words)
    return commands


def program(words: list[str]) -> list[str]:
    """The words with the program's folder dropped (`bin/cdk`, `.venv/bin/hyperpod-cdk`)."""
    return [words[0].rsplit("/", 1)[-1] if words[0].startswith(("bin/", ".venv/bin/")) else words[0], *words[1:]]
