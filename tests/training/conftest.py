"""The training tests' shared fixture: a folder with a local corpus and a tokenizer trained on
it (tests/bench/bench_train.py prepare), one per test module, so nothing is downloaded."""

from __future__ import annotations

import pytest

from tests.bench import bench_train


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    work = tmp_path_factory.mktemp("train")
    bench_train.prepare(work)
    return work
