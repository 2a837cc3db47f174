"""The training image's S3 stack (s3fs and everything it needs, as training/requirements.txt
locks them), for the test that checkpoints to S3 with it.

    python tests/training/s3_stack.py > requirements-s3.txt    (make install does this)

The project's .venv cannot hold it: aiobotocore 2.26.0 pins botocore 1.41.5, and the
project's boto3 needs a newer one. make install puts it in .venv-s3 (pip --target, by hash,
no dependency resolution), and the test's training process puts that folder first on its
PYTHONPATH: s3fs, aiobotocore and botocore come from the image's lock, torch from .venv.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "training" / "requirements.txt"
TARGET = ROOT / ".venv-s3"
TOP = "s3fs"


def _entries(lock_text: str) -> dict[str, tuple[str, str, set[str]]]:
    """Each locked package: (version, its entry with hashes, the packages that pull it in),
    read from the `# via` comments uv writes."""
    entries = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", lock_text):
        head = re.match(r"([A-Za-z0-9_.-]+)==(\S+) \\", block)
        if not head:
            continue
        requirement = "\n".join(l for l in block.splitlines() if not l.lstrip().startswith("#")).strip()
        via = set()
        for comment in re.findall(r"^\s+#\s*(?:via\s+)?(\S+)\s*$", block, flags=re.M):
            if comment not in ("via", "-r"):
                via.add(comment.lower())
        entries[head.group(1).lower()] = (head.group(2), requirement, via)
    return entries


def closure(lock_text: str, top: str = TOP) -> dict[str, tuple[str, str]]:
    """{name: (version, requirement with its hashes)} of `top` and everything the lock says
    it pulls in, directly or not."""
    entries = _entries(lock_text)
    needed = {top}
    while True:
        more = {name for name, (_, _, via) in entries.items() if name not in needed and via & needed}
        if not more:
            return {name: entries[name][:2] for name in sorted(needed)}
        needed |= more


def main() -> int:
    for _, requirement in closure(LOCK.read_text()).values():
        print(requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main())
