"""The hash-locked dependency sets, and the tool that makes and checks them.

    python -m infra.lock lock          make lock: re-lock every set with uv (needs PyPI)
    python -m infra.lock check         make check-lock: offline, each lock against its source
    python -m infra.lock constraints   the synth lock's pins without hashes (for pip -c)

pyproject.toml's ranges stay the source: `requirements/synth.txt` is what `uv pip compile
--generate-hashes` resolved from its `[project] dependencies` and `[build-system] requires`
(the project itself is installed with `--no-build-isolation`, so its setuptools comes from
the lock too). `requirements/tools.txt` locks the locking tool (uv) and what `check` reads
with (packaging) from `requirements/tools.in`. Every install path (make, .ci/run, the pull
request workflow, each CodeBuild step of the pipeline) installs a lock with pip's
`--require-hashes --no-deps`: nothing is resolved at install time, and a file whose hash
is not PyPI's is refused.

One universal lock (`--universal`, from Python 3.11, the oldest `requires-python` takes) with
`--fork-strategy fewest`: a single version of each package, with every file's hash, for 3.11
(GitHub's runner, CodeBuild's standard:7.0 default) and 3.12 alike, on any platform; `check`
refuses a lock that forks a package into two versions.

`check` resolves nothing: it compares each source requirement's specifier with the lock's pin
(packaging's own specifier logic), and walks the lock's `# via` annotations from the sources to
find pins nothing needs any more. Whether the pins are the newest the ranges allow is for
`make lock` to say, not for the check.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SYNTH_LOCK = "requirements/synth.txt"
TOOLS_IN = "requirements/tools.in"
TOOLS_LOCK = "requirements/tools.txt"
# Where the hashes come from: PyPI's own files, whatever index this machine's pip or uv config names.
INDEX = "https://pypi.org/simple"
# The oldest Python pyproject's requires-python takes: a universal lock starts there.
LOCK_PYTHON = "3.11"


@dataclass(frozen=True)
class Pin:
    """One package of a lock: its version, its entry as pip reads it (hashes included, comments
    not), and the packages that pull it in, from the `# via` comments uv writes."""

    name: str
    version: str
    marker: str
    hashes: tuple[str, ...]
    entry: str
    via: frozenset[str]


def canonical(name: str) -> str:
    """PEP 503's normalized name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock_text: str) -> list[Pin]:
    """Every entry of a uv-compiled requirements file, in its order."""
    found = []
    for block in re.split(r"\n(?=[A-Za-z0-9])", lock_text):
        head = re.match(r"([A-Za-z0-9_.-]+)==([^\s;\\]+)\s*(?:;\s*([^\\]*?))?\s*\\?\n", block + "\n")
        if not head:
            continue
        entry = "\n".join(line for line in block.splitlines() if not line.lstrip().startswith("#")).strip()
        via = {canonical(c) for c in re.findall(r"^\s+#\s*(?:via\s+)?(\S+)\s*$", block, flags=re.M) if c not in ("via", "-r")}
        found.append(Pin(canonical(head.group(1)), head.group(2), head.group(3) or "",
                         tuple(re.findall(r"--hash=(\S+)", block)), entry, frozenset(via)))
    return found


def closure(lock: list[Pin], roots: set[str]) -> set[str]:
    """The names of `roots` and of every pin the lock says they pull in, directly or not."""
    needed = {canonical(r) for r in roots}
    while more := {p.name for p in lock if p.name not in needed and p.via & needed}:
        needed |= more
    return needed


def sources(root: Path = ROOT) -> dict[str, list[str]]:
    """{lock: the requirement strings it is made from}."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    tools = [line.split("#")[0].strip() for line in (root / TOOLS_IN).read_text().splitlines()]
    return {
        SYNTH_LOCK: [*pyproject["project"]["dependencies"], *pyproject["build-system"]["requires"]],
        TOOLS_LOCK: [t for t in tools if t],
    }


def problems(root: Path = ROOT) -> list[str]:
    """One line per disagreement between a lock and its source (empty: they agree)."""
    from packaging.requirements import Requirement

    found = []
    for lock_path, requirements in sources(root).items():
        if not (root / lock_path).is_file():
            found.append(f"{lock_path}: missing: run make lock")
            continue
        lock = pins((root / lock_path).read_text())
        by_name: dict[str, Pin] = {}
        for pin in lock:
            if pin.name in by_name:
                found.append(f"{lock_path}: {pin.name} is locked twice ({by_name[pin.name].version}, {pin.version}): "
                             "one version for every Python the project takes (make lock)")
            by_name.setdefault(pin.name, pin)
            if not pin.hashes:
                found.append(f"{lock_path}: {pin.name}=={pin.version} has no --hash: run make lock")
        wanted = [Requirement(r) for r in requirements]
        for req in wanted:
            pin = by_name.get(canonical(req.name))
            if pin is None:
                found.append(f"{lock_path}: {req} is not locked: run make lock")
            elif not req.specifier.contains(pin.version, prereleases=True):
                found.append(f"{lock_path}: {pin.name}=={pin.version} is outside {req}: run make lock")
        stale = sorted(set(by_name) - closure(lock, {r.name for r in wanted}))
        found += [f"{lock_path}: {name}=={by_name[name].version} is locked but nothing needs it: run make lock" for name in stale]
    return found


def constraints(root: Path = ROOT) -> str:
    """The synth lock's pins as a pip constraints file (pip takes no hashes in one): what the test
    dependencies are installed beside, so that they cannot move a locked package."""
    return "".join(f"{p.name}=={p.version}{f' ; {p.marker}' if p.marker else ''}\n" for p in pins((root / SYNTH_LOCK).read_text()))


def lock(uv: str, root: Path = ROOT) -> None:
    """Re-lock every set from its source with uv (hashes from PyPI). `--no-config` and the
    explicit index: no uv.toml or mirror of this machine decides what the lock holds."""
    common = [uv, "pip", "compile", "--no-config", "--quiet", "--universal", "--fork-strategy", "fewest",
              "--python-version", LOCK_PYTHON, "--generate-hashes", "--default-index", INDEX,
              "--custom-compile-command", "make lock"]
    # The build requirement comes in on stdin: uv compiles pyproject.toml's [project] dependencies only.
    build = "\n".join(tomllib.loads((root / "pyproject.toml").read_text())["build-system"]["requires"])
    subprocess.run([*common, "pyproject.toml", "-", "-o", SYNTH_LOCK], cwd=root, input=build, text=True, check=True)
    subprocess.run([*common, TOOLS_IN, "-o", TOOLS_LOCK], cwd=root, check=True)


def main(argv: list[str]) -> int:
    match argv:
        case ["lock", uv]:
            lock(uv)
            return 0
        case ["check"]:
            found = problems()
            for line in found:
                print(line, file=sys.stderr)
            return 1 if found else 0
        case ["constraints"]:
            sys.stdout.write(constraints())
            return 0
    print("usage: python -m infra.lock lock <uv> | check | constraints", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
