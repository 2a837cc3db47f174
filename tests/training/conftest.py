"""The training tests' shared fixtures, one per test module: a folder with a local corpus and a
tokenizer trained on it (tests/bench/bench_train.py prepare), so nothing is downloaded; and the
server its multi-rank runs are forked from (runs.py RankServer)."""

from __future__ import annotations

import pytest

from tests.bench import bench_train
from tests.training.runs import RankServer


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    work = tmp_path_factory.mktemp("train")
    bench_train.prepare(work)
    return work


@pytest.fixture(scope="module")
def ranks():
    server = RankServer()
    yield server
    server.close()
