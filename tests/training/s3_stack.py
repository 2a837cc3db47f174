"""The training image's S3 stack (s3fs and everything it needs, as training/requirements.txt
locks them), for the test that checkpoints to S3 with it.

    python tests/training/s3_stack.py > requirements-s3.txt    (make install does this)

The project's .venv cannot hold it: aiobotocore 2.26.0 pins botocore 1.41.5, and the
project's boto3 needs a newer one. make install puts it in .venv-s3 (pip --target, by hash,
no dependency resolution), and the test's training process puts that folder first on its
PYTHONPATH: s3fs, aiobotocore and botocore come from the image's lock, torch from .venv.
"""

from __future__ import annotations

import sys
from pathlib import Path

from infra import lock

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "training" / "requirements.txt"
TARGET = ROOT / ".venv-s3"
TOP = "s3fs"


def closure(lock_text: str, top: str = TOP) -> dict[str, tuple[str, str]]:
    """{name: (version, requirement with its hashes)} of `top` and everything the lock says
    it pulls in, directly or not (infra/lock.py reads the lock, as it does the synth lock)."""
    entries = lock.pins(lock_text)
    needed = lock.closure(entries, {top})
    return {p.name: (p.version, p.entry) for p in sorted(entries, key=lambda p: p.name) if p.name in needed}


def main() -> int:
    for _, requirement in closure(LOCK.read_text()).values():
        print(requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main())
