"""The training image is reproducible, and the CPU tests run what it runs."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

from tests.conftest import ROOT

TRAINING = ROOT / "training"


def _locked() -> dict[str, str]:
    text = (TRAINING / "requirements.txt").read_text()
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", text, flags=re.M))


def test_every_locked_requirement_has_a_version_and_a_hash():
    text = (TRAINING / "requirements.txt").read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text)
    packages = [e for e in entries if re.match(r"[A-Za-z0-9]", e)]
    assert len(packages) == len(_locked()) > 10
    for entry in packages:
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", entry), entry.splitlines()[0]


def test_the_lock_holds_every_direct_pin_and_no_torch():
    locked = _locked()
    for line in (TRAINING / "requirements.in").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            assert locked[name] == version, name
    # torch and its CUDA wheels come with the base image; the lock must not replace them.
    assert not [n for n in locked if n == "torch" or n == "triton" or n.startswith("nvidia-")]


def test_cpu_tests_run_the_images_transformers_datasets_and_tokenizers():
    locked = _locked()
    for name in ("transformers", "datasets", "tokenizers"):
        assert importlib.metadata.version(name) == locked[name], name


def test_the_image_installs_by_hash_checks_conflicts_and_pins_a_versioned_base():
    dockerfile = (TRAINING / "Dockerfile").read_text()
    assert re.search(r"pip install [^\n]*--require-hashes -r /tmp/requirements.txt[^\n]*&& pip check", dockerfile)
    (base,) = re.findall(r"^ARG BASE_IMAGE=(\S+)$", dockerfile, flags=re.M)
    # DLC release tags end in -v<major>.<minor>; the bare framework tag moves with every patch release.
    assert re.search(r":\d+\.\d+\.\d+-gpu-py\d+-cu\d+-ubuntu\d+\.\d+-ec2-v\d+\.\d+$", base), base
    # every file train.py reaches through its sibling imports is copied in beside it, and only those
    copied = re.search(r"^COPY --chown=trainer (.+) /workspace/$", dockerfile, flags=re.M).group(1).split()
    assert set(copied) == {f"{m}.py" for m in _siblings("train")}


def _siblings(module: str) -> set[str]:
    """`module` and every module beside it in training/ that it imports, and they in turn, as
    the image runs them: flat, by the script's folder on sys.path (`from data_stream import ...`)."""
    found, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        for node in ast.walk(ast.parse((TRAINING / f"{name}.py").read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            todo += [n for n in names if (TRAINING / f"{n}.py").exists()]
    return found


def test_no_module_beside_train_py_shadows_an_installed_one():
    # The script's folder comes first on sys.path, in the image and in the tests that import
    # train.py: a sibling named like an installed module would replace it for every importer.
    from importlib.machinery import PathFinder

    elsewhere = [p for p in sys.path if Path(p or ".").resolve() != TRAINING.resolve()]
    for name in _siblings("train"):
        assert name not in sys.builtin_module_names and PathFinder.find_spec(name, elsewhere) is None, name
