"""The training image is reproducible, and the CPU tests run what it runs."""

from __future__ import annotations

import importlib.metadata
import re

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
    # every file train.py imports from its folder is copied in
    copied = re.search(r"^COPY --chown=trainer (.+) /workspace/$", dockerfile, flags=re.M).group(1).split()
    local = {m for m in re.findall(r"^from (\w+) import", (TRAINING / "train.py").read_text(), flags=re.M) if (TRAINING / f"{m}.py").exists()}
    assert {f"{m}.py" for m in local} | {"train.py"} <= set(copied)
