"""Which rank reads which document: train.py's real load_stream over a local dataset of many
shards (text files written here, one document per line, each with its own id), on N ranks
simulated one after the other. The truth is the count of each document's readers."""

from __future__ import annotations

import sys
from collections import Counter
from itertools import islice, takewhile

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "training"))  # train.py imports its neighbours as the image does
import checkpoints  # noqa: E402
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
        assert all((start, every) == (0, 1) for plan in plans for _, start, every, _ in plan)
        assert sorted(shard for plan in plans for shard, _, _, _ in plan) == list(range(SHARDS))
    # 3 ranks: 6 whole shards, and the 2 left are split by example rather than every rank
    # reading all 8 (datasets' split_dataset_by_node).
    plans = [train.load_stream(args, rank, 3).plan() for rank in range(3)]
    assert [sum(every == 1 for _, _, every, _ in plan) for plan in plans] == [2, 2, 2]
    assert [len(plan) for plan in plans] == [4, 4, 4]


def test_the_shuffle_is_repeatable_and_new_each_pass(shard_files):
    args = _args(shard_files, "--shuffle-buffer=7")
    in_order = _read_one_pass(_args(shard_files, "--shuffle-buffer=0"), 2)
    shuffled = _read_one_pass(args, 2)
    assert shuffled[0] != in_order[0]
    assert _read_one_pass(args, 2) == shuffled  # the same seed, the same pass
    assert _read_one_pass(args, 2, epoch=1) != shuffled  # a new pass, a new order


class _Reader:
    """One rank's documents as TokenStream takes them: pass after pass, (epoch, id)."""

    def __init__(self, documents):
        self.documents, self.epoch, self._it = documents, documents.epoch, None

    def take(self, n: int) -> list[tuple[int, str]]:
        return list(islice(self._all(), n))

    def until(self, epoch: int) -> list[tuple[int, str]]:
        return list(takewhile(lambda read: read[0] < epoch, self._all()))

    def _all(self):
        while True:
            if self._it is None:
                self.documents.set_epoch(self.epoch)
                self._it = iter(self.documents)
            for example in self._it:
                yield self.epoch, example["text"].split()[0]
            self.epoch, self._it = self.epoch + 1, None
            self.documents.set_epoch(self.epoch)


@pytest.mark.parametrize("worlds", [(2, 1, 2), (2, 3), (3, 2, 5, 1)], ids=lambda w: "->".join(map(str, w)))
@pytest.mark.parametrize("buffer", ["job's 10000", "7"])
def test_a_resume_on_another_world_size_reads_every_document_once_per_pass(shard_files, tmp_path, worlds, buffer):
    """Each world reads some documents, saves its position through the checkpoint's files
    and stops; the next world, of another size, resumes from them. Rank 0 of the first
    world reads past its share into the second pass, so ranks are saved in different
    passes. The last world reads both passes to their end."""
    args = _args(shard_files, *([] if buffer.startswith("job") else [f"--shuffle-buffer={buffer}"]))
    everything = {f"doc-{s:02d}-{i:02d}" for s in range(SHARDS) for i in range(PER_SHARD)}
    readers = {0: Counter(), 1: Counter()}
    saved = None
    for phase, world in enumerate(worlds):
        streams = [train.load_stream(args, rank, world) for rank in range(world)]
        if saved:
            for rank, stream in enumerate(streams):
                before = worlds[phase - 1]
                assert checkpoints.load_data_state(str(saved), stream, rank, world) == f"data position of {before} rank{'s' * (before > 1)} re-divided over {world}"
        for rank, stream in enumerate(streams):
            reader = _Reader(stream)
            if phase == len(worlds) - 1:
                read = reader.until(2)
            else:
                share = SHARDS * PER_SHARD // world
                read = reader.take(share + 10 if (phase, rank) == (0, 0) else 4 + 3 * rank + 2 * phase)
            for epoch, doc in read:
                readers[epoch][doc] += 1
        if phase < len(worlds) - 1:
            saved = tmp_path / f"world{phase}"
            saved.mkdir()
            for rank, stream in enumerate(streams):
                checkpoints.write_data_state(str(saved), stream.state_dict(), rank)
    for epoch, counts in readers.items():
        assert set(counts) == everything, (epoch, sorted(everything - set(counts))[:5])
        assert {doc: n for doc, n in counts.items() if n > 1} == {}, epoch


def test_a_pass_over_other_files_or_with_a_rank_missing_is_refused_with_one_line(shard_files, tmp_path):
    args = _args(shard_files)
    saved = tmp_path / "ckpt"
    saved.mkdir()
    for rank in range(2):
        stream = train.load_stream(args, rank, 2)
        _Reader(stream).take(5)
        checkpoints.write_data_state(str(saved), stream.state_dict(), rank)
    fewer_files = train.load_stream(_args(shard_files[:-1]), 0, 2)
    with pytest.raises(train.DataStateError) as error:
        checkpoints.load_data_state(str(saved), fewer_files, 0, 2)
    assert str(error.value) == f"the checkpoint's data position is over {SHARDS} shards and this dataset has {SHARDS - 1}: a pass over other files cannot be continued"
    (saved / "data_rank00001.json").unlink()
    with pytest.raises(train.DataStateError) as error:
        checkpoints.load_data_state(str(saved), train.load_stream(args, 0, 3), 0, 3)
    assert "\n" not in str(error.value) and "ranks [0] of a world of 2" in str(error.value)
