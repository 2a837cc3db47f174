"""Checkpoints: sharded (torch.distributed.checkpoint), one directory per save, with each
rank's data position. A save is complete only when rank 0 has written its manifest listing
every file and its size, after all ranks finished; resume takes the newest complete one,
chosen by rank 0 for every rank. Beside them, the record of the windows of steps runs
stopped on with non-finite values and the record of each give-up; in each manifest the global
batch the learning rate is given for, the one the run trained with and its ramp. Local paths or
s3:// (fsspec).

Beside train.py in the image, which imports it as a sibling (`from checkpoints import ...`).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import torch.distributed as dist

from data_stream import DataStateError
from log_format import GAVE_UP_RECORD, NONFINITE_RECORD

MANIFEST = "_COMPLETE.json"
DATA_STATE = "data_rank{rank:05d}.json"


def _fs(path: str):
    import fsspec

    return fsspec.core.url_to_fs(path)[0]


def join_path(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def _step_dirs(fs, base: str) -> list[tuple[int, str]]:
    """(step, dir) of every step_<n> folder under `base`, complete or not."""
    if not fs.exists(base):
        return []
    found = []
    for entry in fs.ls(base, detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        match = re.fullmatch(r"step_(\d+)", name)
        if match:
            found.append((int(match.group(1)), join_path(base, name)))
    return found


def complete_checkpoints(base: str) -> list[tuple[int, str]]:
    """(step, dir) of every complete checkpoint under `base`, newest first."""
    fs = _fs(base)
    return sorted(((step, ckpt) for step, ckpt in _step_dirs(fs, base) if _is_complete(fs, ckpt)), reverse=True)


def _is_complete(fs, ckpt: str) -> bool:
    manifest = join_path(ckpt, MANIFEST)
    if not fs.exists(manifest):
        return False
    try:
        listed = json.loads(fs.cat_file(manifest))["files"]
    except (ValueError, KeyError):
        return False
    for name, size in listed.items():
        path = join_path(ckpt, name)
        if not fs.exists(path) or fs.size(path) != size:
            return False
    return True


def _writer_reader(path: str):
    if "://" in path:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

        return FsspecWriter(path), FsspecReader(path)
    import torch.distributed.checkpoint as dcp

    return dcp.FileSystemWriter(path), dcp.FileSystemReader(path)


def choose_checkpoint(base: str | None, rank: int) -> tuple[int, str | None]:
    """Rank 0 picks the newest complete checkpoint and every rank takes its pick, so ranks
    cannot resume from different steps (a listing racing a save, or an eventually
    consistent store)."""
    choice = [(0, None)]
    if base and rank == 0:
        found = complete_checkpoints(base)
        choice = [found[0] if found else (0, None)]
    dist.broadcast_object_list(choice, src=0)
    return choice[0]


def save_checkpoint(base: str, step: int, model, optimizer, stream, rank: int, keep: int, *, background=None, recipe: dict | None = None):
    """Every rank's shards of the weights and optimizer state and its data position, then
    rank 0's manifest: returns the complete checkpoint's path. With `background` (a gloo
    group of every rank, for the writer's own collectives) the state is copied to host
    memory and written by a thread, the data position (taken at this step) by another: returns
    both writes as one SaveInFlight, and complete_checkpoint writes the manifest once every
    rank's is done."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    ckpt = join_path(base, f"step_{step:08d}")
    model_sd, optim_sd = get_state_dict(model, optimizer)
    writer, _ = _writer_reader(ckpt)
    _fs(ckpt).makedirs(ckpt, exist_ok=True)
    data = stream.state_dict()  # of this very step, taken now; written with the shards
    if background is not None:
        shards = dcp.async_save({"model": model_sd, "optim": optim_sd}, storage_writer=writer, process_group=background)
        return SaveInFlight(shards, _data_writer().submit(write_data_state, ckpt, data, rank))
    write_data_state(ckpt, data, rank)
    dcp.save({"model": model_sd, "optim": optim_sd}, storage_writer=writer)
    dist.barrier()  # every rank's shards are written before the manifest says so
    complete_checkpoint(base, step, rank, keep, recipe=recipe)
    dist.barrier()
    return ckpt


def complete_checkpoint(base: str, step: int, rank: int, keep: int, *, recipe: dict | None = None) -> str:
    """Rank 0 lists what every rank wrote in the manifest (with `recipe`: the world size, the
    global batch in tokens the run trains with and the one its learning rate is given for),
    then prunes. Call once every
    rank's write of `step` is done."""
    ckpt = join_path(base, f"step_{step:08d}")
    if rank == 0:
        fs = _fs(ckpt)
        files = {
            e["name"].rstrip("/").rsplit("/", 1)[-1]: e["size"]
            for e in fs.ls(ckpt, detail=True)
            if e["type"] == "file" and not e["name"].endswith(MANIFEST)
        }
        tmp = join_path(ckpt, MANIFEST + ".tmp")
        fs.pipe_file(tmp, json.dumps({"step": step, "files": files, **(recipe or {})}).encode())
        fs.mv(tmp, join_path(ckpt, MANIFEST))
        prune_checkpoints(base, keep)
    return ckpt


def prune_checkpoints(base: str, keep: int) -> list[str]:
    """Delete all but the newest `keep` complete checkpoints, and any partial one older than
    the newest complete one (a save that died). Returns what was deleted."""
    fs = _fs(base)
    complete = complete_checkpoints(base)
    if not complete:
        return []
    kept = {path for _, path in complete[:keep]}
    newest = complete[0][0]
    doomed = [path for step, path in _step_dirs(fs, base) if path not in kept and step < newest]
    for path in doomed:
        fs.rm(path, recursive=True)
    return doomed


def load_checkpoint(ckpt: str, model, optimizer, stream, rank: int, world: int) -> str | None:
    """Weights and optimizer state (torch.distributed.checkpoint reshards them to this
    world), then the data position (load_data_state)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    _, reader = _writer_reader(ckpt)
    dcp.load(state, storage_reader=reader)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return load_data_state(ckpt, stream, rank, world)


def write_data_state(ckpt: str, state: dict, rank: int) -> None:
    """This rank's data position (its stream's state_dict: with documents, the shuffle buffer
    too, some MB for C4's 10,000 documents) beside the model's shards."""
    _fs(ckpt).pipe_file(join_path(ckpt, DATA_STATE.format(rank=rank)), json.dumps(state).encode())


_DATA_WRITER = []


def _data_writer():
    """One thread for the data positions of background saves (encoding some MB of JSON and
    writing it is off the training loop, as the shards' write is)."""
    if not _DATA_WRITER:
        from concurrent.futures import ThreadPoolExecutor

        _DATA_WRITER.append(ThreadPoolExecutor(1, thread_name_prefix="data-state"))
    return _DATA_WRITER[0]


class SaveInFlight:
    """A background save: the shards' write (async_save's Future) and the data position's.
    Done when both are; result() raises the first one's error."""

    def __init__(self, *futures):
        self.futures = futures

    def done(self) -> bool:
        return all(f.done() for f in self.futures)

    def result(self):
        return [f.result() for f in self.futures]


def load_data_state(ckpt: str, stream, rank: int, world: int) -> str | None:
    """Put `stream` where the checkpoint's pass was. In a world of the saved size each rank
    reads its own state; in another each reads all of them and takes its part of what they
    had left (stream.redivide), so no document is skipped or read twice. Returns how it
    resumed, or None where the checkpoint has no data state of this format (the caller
    replays the stream). Raises DataStateError where the pass cannot be continued."""
    fs = _fs(ckpt)
    own = join_path(ckpt, DATA_STATE.format(rank=rank))
    state = json.loads(fs.cat_file(own)) if fs.exists(own) else None
    if state is not None and "world" not in state:
        return None  # an older checkpoint's position, without its shuffle buffer
    if state is not None and state["world"] == world:
        stream.load_state_dict(state)
        return "data position continued"
    names = sorted(e for e in fs.ls(ckpt, detail=False) if re.fullmatch(r"data_rank\d{5}\.json", e.rstrip("/").rsplit("/", 1)[-1]))
    if not names:
        return None
    states = [json.loads(fs.cat_file(name)) for name in names]
    if any("world" not in s for s in states):
        return None
    saved_world = states[0]["world"]
    if [s["rank"] for s in states] != list(range(saved_world)) or any(s["world"] != saved_world for s in states):
        raise DataStateError(
            f"it holds the data position of ranks {[s['rank'] for s in states]} of a world of {saved_world}; "
            "without every rank's the pass cannot be re-divided"
        )
    stream.redivide(states)
    return f"data position of {saved_world} rank{'s' * (saved_world > 1)} re-divided over {world}"


def recorded_recipe(ckpt: str | None) -> dict | None:
    """What the checkpoint's manifest records of the learning rate's recipe (train.lr_plan reads
    it): the world size, the global batch in tokens trained with, the one --lr is given for and
    the ramp the run was on; a manifest of an earlier train.py holds less. None without a checkpoint."""
    if not ckpt:
        return None
    manifest = json.loads(_fs(ckpt).cat_file(join_path(ckpt, MANIFEST)))
    return {k: v for k, v in manifest.items() if k not in ("step", "files")}


def passed_over(base: str | None, rank: int) -> list[dict]:
    """The windows earlier runs stopped on with non-finite values (rank 0 reads, every rank
    takes its reading), each {"steps": [first, last], "update": the step whose update came
    before them or None, "world", "resume_from": the checkpoint step the run had, "documents":
    [[epoch, shard, index], ...] or None for a stream without documents}. A record of an older
    format, [first, last] lists, reads as windows of steps alone."""
    windows = [[]]
    if base and rank == 0:
        record = join_path(base, NONFINITE_RECORD)
        fs = _fs(base)
        windows = [json.loads(fs.cat_file(record))["windows"] if fs.exists(record) else []]
    dist.broadcast_object_list(windows, src=0)
    return [w if isinstance(w, dict) else {"steps": list(w), "update": None, "world": None, "resume_from": None, "documents": None}
            for w in windows[0]]


def record_nonfinite(base: str, window: dict, rank: int) -> str:
    """Add `window` (as passed_over reads it) to the record beside the checkpoints (rank 0
    writes); its path."""
    record = join_path(base, NONFINITE_RECORD)
    if rank == 0:
        fs = _fs(base)
        windows = json.loads(fs.cat_file(record))["windows"] if fs.exists(record) else []
        fs.makedirs(base, exist_ok=True)
        fs.pipe_file(record, json.dumps({"windows": windows + [window]}).encode())
    return record


def set_aside_nonfinite(base: str, stale: list[dict], rank: int) -> str:
    """Take `stale` windows out of the record (rank 0 writes): they name checkpoints that are
    gone, and a start with none must not pass over, or give up on, a run it does not continue.
    Returns the record's path."""
    record = join_path(base, NONFINITE_RECORD)
    if rank == 0:
        fs = _fs(base)
        windows = json.loads(fs.cat_file(record))["windows"]
        kept = [w for w in windows if not (isinstance(w, dict) and w in stale)]
        fs.pipe_file(record, json.dumps({"windows": kept}).encode())
    return record


def record_give_up(base: str, event: dict, rank: int) -> str:
    """Add a give-up (log_format.GAVE_UP_RECORD says its fields; `at` is set here, in UTC) to
    the record beside the checkpoints (rank 0 writes); its path."""
    record = join_path(base, GAVE_UP_RECORD)
    if rank == 0:
        fs = _fs(base)
        events = json.loads(fs.cat_file(record))["gave_up"] if fs.exists(record) else []
        fs.makedirs(base, exist_ok=True)
        event = {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"), **event}
        fs.pipe_file(record, json.dumps({"gave_up": events + [event]}).encode())
    return record


def unprinted_give_ups(base: str | None, rank: int) -> list[dict]:
    """The give-ups no start has printed yet (rank 0 reads and stamps them printed_at; every rank
    takes its reading)."""
    found = [[]]
    if base and rank == 0:
        record = join_path(base, GAVE_UP_RECORD)
        fs = _fs(base)
        events = json.loads(fs.cat_file(record))["gave_up"] if fs.exists(record) else []
        found = [[e for e in events if not e.get("printed_at")]]
        if found[0]:
            now = datetime.now(timezone.utc).isoformat(timespec="seconds")
            fs.pipe_file(record, json.dumps({"gave_up": [e if e.get("printed_at") else {**e, "printed_at": now} for e in events]}).encode())
    dist.broadcast_object_list(found, src=0)
    return found[0]
