"""The official sagemaker-hyperpod package's pydantic models of the operators' custom resources,
loaded by their file's path: the package is installed with --no-deps (Makefile), and importing it
needs `kubernetes`; each model file needs only pydantic."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path
from types import ModuleType


def model_module(model_file: str) -> ModuleType:
    """The module of `model_file`, a path inside the installed sagemaker-hyperpod distribution."""
    path = importlib.metadata.distribution("sagemaker-hyperpod").locate_file(model_file)
    spec = importlib.util.spec_from_file_location(Path(model_file).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
