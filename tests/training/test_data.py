"""Which rank reads which document: train.py's real load_stream over a local dataset of many
shards (text files written here, one document per line, each with its own id), on N ranks
simulated one after the other. The truth is the count of each document's readers."""

from __future__ import annotations

import sys
from collections import Counter

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "training"))  # train.py imports its neighbours as the image does
import train  # noqa: E402

SHARDS, PER_SHARD = 8, 25


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    # load_dataset counts each load with a request to the Hub unless offline: seconds without a network.
    monkeypatch.setattr("datasets.config.HF_HUB_OFFLINE", True)


@pytest.fixture(scope="module")
def shard_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shards")
    files = []
    for shard in range(SHARDS):
        path = folder / f"part-{shard:02d}.txt"
        path.write_text("".join(f"doc-{shard:02d}-{line:02d} some words\n" for line in range(PER_SHARD)))
        files.append(str(path))
    return files


def _args(files, *extra):
    # The job's own settings (seed, the 10,000-document shuffle buffer) unless a test overrides them.
    return train.parse_args(["--data-files", *files, *extra])


def _read_one_pass(args, world: int, epoch: int = 0) -> list[list[str]]:
    per_rank = []
    for rank in range(world):
        documents = train.load_stream(args, rank, world)
        documents.set_epoch(epoch)
        per_rank.append([example["text"].split()[0] for example in documents])
    return per_rank


@pytest.mark.parametrize("buffer", ["job's 10000", "7"])
@pytest.mark.parametrize("world", [2, 3, 5, 16])  # 8 shards: divides, does not, does not, more ranks than shards
def test_every_document_is_read_by_exactly_one_rank_per_pass(shard_files, world, buffer):
    args = _args(shard_files, *([] if buffer.startswith("job") else [f"--shuffle-buffer={buffer}"]))
    assert args.shuffle_buffer and args.seed == train.parse_args([]).seed  # the shuffle is on
    everything = {f"doc-{s:02d}-{i:02d}" for s in range(SHARDS) for i in range(PER_SHARD)}
    for epoch in (0, 1):
        per_rank = _read_one_pass(args, world, epoch)
        readers = Counter(doc for docs in per_rank for doc in docs)
        assert set(readers) == everything and set(readers.values()) == {1}, epoch
        # Each rank its share: a whole shard counts PER_SHARD, a split one differs by at most one.
        sizes = [len(docs) for docs in per_rank]
        assert max(sizes) - min(sizes) <= SHARDS % world, sizes


def test_whole_shards_go_to_ranks_where_the_world_divides_the_shard_count(shard_files):
    args = _args(shard_files)
    for world in (1, 2, 4, 8):
        plans = [train.load_stream(args, rank, world).plan() for rank in range(world)]
        assert all(every == 1 for plan in plans for _, every, _ in plan)
        assert sorted(shard for plan in plans for shard, _, _ in plan) == list(range(SHARDS))
    # 3 ranks: 6 whole shards, and the 2 left are split by example rather than every rank
    # reading all 8 (datasets' split_dataset_by_node).
    plans = [train.load_stream(args, rank, 3).plan() for rank in range(3)]
    assert [sum(every == 1 for _, every, _ in plan) for plan in plans] == [2, 2, 2]
    assert [len(plan) for plan in plans] == [4, 4, 4]


def test_the_shuffle_is_repeatable_and_new_each_pass(shard_files):
    args = _args(shard_files, "--shuffle-buffer=7")
    in_order = _read_one_pass(_args(shard_files, "--shuffle-buffer=0"), 2)
    shuffled = _read_one_pass(args, 2)
    assert shuffled[0] != in_order[0]
    assert _read_one_pass(args, 2) == shuffled  # the same seed, the same pass
    assert _read_one_pass(args, 2, epoch=1) != shuffled  # a new pass, a new order
