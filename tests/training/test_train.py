"""train.py for real: 2 processes over gloo as torchrun starts them (fork_ranks.py), or one
plain process, the tiny preset, a local dataset and a tokenizer trained on the spot (nothing is
downloaded): the lines
the operator's log rules watch, the checkpoints and every way of resuming from them (a
truncated save, another world size, a run that died mid-way, S3 through the image's own S3
stack). Non-finite steps: test_nonfinite.py; the agent's stop: test_stop.py; the job's options
and recipe: test_options.py."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infra import validation
from manifests import job as job_manifest
from tests.bench import bench_train
from tests.conftest import CONTEXT, ROOT
from tests.training import s3_stack
from tests.training.runs import TRAIN, RankServer, job_train_args, losses_of, plain_command, saved_tensors, single_env, train_in_process, train_module


def _two_ranks(ranks: RankServer, work: Path, max_steps: int) -> subprocess.CompletedProcess:
    # The job's shuffle (its buffer and seed) and background saves: a resume must reproduce
    # the losses all the same.
    job = job_train_args()
    extra = [f"--checkpoint-dir={work / 'ckpt'}", "--checkpoint-interval=10", "--keep-checkpoints=2",
             f"--shuffle-buffer={job.shuffle_buffer}", f"--seed={job.seed}", *(["--async-checkpoint"] if job.async_checkpoint else [])]
    result = ranks.run(2, TRAIN, bench_train.train_args(work, max_steps=max_steps, extra=extra), cwd=work, env=bench_train.offline_env(), timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def first_run(ranks, workdir):
    return _two_ranks(ranks, workdir, 30).stdout


def test_loss_is_logged_every_step_is_finite_and_falls(first_run):
    losses = losses_of(first_run)
    assert sorted(losses) == list(range(1, 31))
    assert all(math.isfinite(v) for v in losses.values())
    first, last = [losses[s] for s in range(1, 6)], [losses[s] for s in range(26, 31)]
    assert sum(last) / 5 < 0.85 * sum(first) / 5


def test_every_loss_and_checkpoint_line_matches_the_rendered_log_rules(first_run):
    settings, _ = validation.load_settings(CONTEXT, "dev")
    rules = {r["name"]: re.compile(r["logPattern"]) for r in job_manifest.build(settings, image="x")["spec"]["runPolicy"]["logMonitoringConfiguration"]}
    loss_lines = [l for l in first_run.splitlines() if l.startswith("step=")]
    ckpt_lines = [l for l in first_run.splitlines() if l.startswith("checkpoint saved")]
    assert len(loss_lines) == 30 and len(ckpt_lines) == 3
    for line in loss_lines:
        assert rules["JobStart"].fullmatch(line) and rules["JobHangingDetection"].fullmatch(line)
        assert not rules["CheckpointCadence"].fullmatch(line)
    for line in ckpt_lines:
        assert rules["CheckpointCadence"].fullmatch(line) and not rules["JobStart"].fullmatch(line)
    # the hang rule's capture group is the loss itself
    assert float(rules["JobHangingDetection"].fullmatch(loss_lines[-1]).group(1)) == losses_of(first_run)[30]


def test_only_one_process_per_node_writes_the_watched_lines(first_run):
    assert len([l for l in first_run.splitlines() if l.startswith("step=1 ")]) == 1


def test_checkpoints_are_complete_listed_and_only_the_newest_are_kept(first_run, workdir):
    for step in (20, 30):
        manifest = json.loads((workdir / "ckpt" / f"step_{step:08d}" / "_COMPLETE.json").read_text())
        assert manifest["step"] == step and ".metadata" in manifest["files"]
        # The global batch trained with and the one the learning rate is given for (the first run's here).
        assert (manifest["world"], manifest["batch_tokens"], manifest["lr_batch_tokens"]) == (2, 2 * 4 * 32, 2 * 4 * 32)
        # each rank's stream position is part of the checkpoint
        assert {"data_rank00000.json", "data_rank00001.json"} <= set(manifest["files"])
    assert sorted(p.name for p in (workdir / "ckpt").iterdir()) == ["step_00000020", "step_00000030"]


def test_resume_skips_a_truncated_checkpoint_and_continues_at_the_right_step(first_run, ranks, workdir):
    latest = workdir / "ckpt" / "step_00000030"
    shard = sorted(latest.glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[:100])  # truncated, as by a node lost mid-upload
    partial = workdir / "ckpt" / "step_00000040"  # and one that never got its manifest
    partial.mkdir()
    (partial / ".metadata").write_bytes(b"partial")
    out = _two_ranks(ranks, workdir, 30).stdout
    assert f"resumed from {workdir / 'ckpt' / 'step_00000020'} at step=20" in out
    assert "replaying" not in out  # the stream continued from its saved state
    resumed = losses_of(out)
    assert sorted(resumed) == list(range(21, 31))
    # same weights, optimizer, schedule and data position: the same losses as the first run
    original = losses_of(first_run)
    for step in range(21, 31):
        assert resumed[step] == pytest.approx(original[step], abs=2e-3)


def test_reports_tokens_per_second(first_run, record_property):
    tps = [float(x) for x in re.findall(r"tokens_per_s=(\S+)", first_run)]
    assert tps and min(tps) > 0
    record_property("tiny_cpu_tokens_per_s_median", sorted(tps)[len(tps) // 2])
    print(f"\ntiny preset, 2 gloo processes on CPU: median {sorted(tps)[len(tps) // 2]:.0f} tokens/s")


def test_stream_state_resumes_at_the_next_chunk(workdir):
    import argparse

    sys.path.insert(0, str(ROOT / "training"))
    import train
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(workdir / "tok")
    args = argparse.Namespace(data_files=[str(workdir / "corpus.txt")], shuffle_buffer=0, seed=1, text_field="text")

    def stream():
        return train.TokenStream(train.load_stream(args, 0, 1), tokenizer, 32, "text")

    first = stream()
    for _ in range(7):
        next(first)
    state = json.loads(json.dumps(first.state_dict()))  # as saved in the checkpoint
    resumed = stream()
    resumed.load_state_dict(state)
    assert [next(resumed) for _ in range(5)] == [next(first) for _ in range(5)]


# Each rank lists a different newest checkpoint, as ranks listing an eventually consistent store
# (or their own node's disk) during a save can, and writes down the one it resumes from.
CHOOSE_AS_RANK = """
import json, os, sys
import torch.distributed as dist
import checkpoints
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
checkpoints.complete_checkpoints = lambda base: [(20 + 10 * rank, f"{base}/step_{20 + 10 * rank:08d}")]
open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w").write(json.dumps(checkpoints.choose_checkpoint("s3://b/ckpt", rank)))
dist.destroy_process_group()
"""


def test_every_rank_resumes_from_the_checkpoint_rank_0_chose(ranks, tmp_path):
    (tmp_path / "choose.py").write_text(CHOOSE_AS_RANK)
    done = ranks.run(2, tmp_path / "choose.py", [str(tmp_path)], cwd=tmp_path, env=single_env(), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    chosen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert chosen == [[20, "s3://b/ckpt/step_00000020"]] * 2


def _dies_at(train, step: int, *, once_saved: Path | None = None):
    """train.py's next_token_loss, raising at `step` of the run: a lost node, mid-way. With
    `once_saved` (a checkpoint written in the background), the node dies at the first step from
    `step` on at which that checkpoint is complete: its writer thread finishes on its own time
    (waited for here, up to a minute), and the loop writes the manifest at the step after."""
    import itertools
    import time

    real, steps = train.next_token_loss, itertools.count(1)

    def dies(logits, targets):
        now = next(steps)
        if now >= step and (once_saved is None or (once_saved / "_COMPLETE.json").exists()):
            raise RuntimeError("node lost")
        if now >= step:  # the shards' writer ends with the metadata file; then the loop's next verdict completes it
            deadline = time.monotonic() + 60
            while not (once_saved / ".metadata").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)
        return real(logits, targets)

    return dies


@pytest.fixture(scope="module")
def s3_server():
    """A moto S3 server on a free local port (moto's ThreadedMotoServer, in this process),
    and the environment that sends a training process's S3 calls to it with the training
    image's S3 stack (.venv-s3, as training/requirements.txt locks it) first on its path."""
    import logging
    import os

    from moto.server import ThreadedMotoServer

    assert (s3_stack.TARGET / ".installed").exists(), f"{s3_stack.TARGET} is missing: make install builds it"
    quiet = logging.getLogger("werkzeug")  # a line per request otherwise
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    credentials = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    env = {k: v for k, v in single_env().items() if not k.startswith("AWS_")}
    env.update(credentials, AWS_ENDPOINT_URL_S3=endpoint, AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
               AWS_EC2_METADATA_DISABLED="true", NO_PROXY=host, no_proxy=host, PYTHONPATH=os.pathsep.join([str(s3_stack.TARGET), str(ROOT / "training")]))
    try:
        yield endpoint, env
    finally:
        server.stop()
        quiet.setLevel(level)


def _s3_client(endpoint: str):
    import boto3  # the project's, in this process: only to set up and read back the bucket

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.fixture(scope="module")
def s3_ranks(s3_server):
    """The rank server (runs.py RankServer) in s3_server's env: its ranks import the image's S3 stack."""
    server = RankServer(s3_server[1])
    yield server
    server.close()


def _train_on_s3(ranks: RankServer, work: Path, env: dict, *args: str, dies_at: int | None = None) -> tuple[int, str]:
    """train.py on one rank of its own process with the image's S3 stack (s3_server's env); with
    `dies_at`, its next_token_loss raises at that step, as _dies_at does in process."""
    import inspect

    code = "from __future__ import annotations\nimport sys, train\n"
    if dies_at:
        code += inspect.getsource(_dies_at) + f"train.next_token_loss = _dies_at(train, {dies_at})\n"
    code += "sys.exit(train.train(train.parse_args(sys.argv[1:])))\n"
    script = work / f"train_on_s3_{dies_at}.py"
    script.write_text(code)
    result = ranks.run(1, script, plain_command(work, *args)[2:], cwd=work, env=env, timeout=300)
    return result.returncode, result.stdout + (result.stderr[-4000:] if result.returncode else "")


def test_the_s3_checkpoint_test_runs_the_images_s3_stack_beside_the_tests_torch(workdir, s3_server, s3_ranks):
    """In the ranks the S3 runs are forked from (s3_ranks, in s3_server's env): every package of
    the image's S3 stack at the version training/requirements.txt locks, s3fs, aiobotocore,
    botocore and fsspec from .venv-s3, and the project's torch."""
    _, env = s3_server
    locked = {name: version for name, (version, _) in s3_stack.closure(s3_stack.LOCK.read_text()).items()}
    probe = workdir / "s3_probe.py"
    probe.write_text("import importlib, importlib.metadata as m, json, sys, torch\n"
                     "print(json.dumps({'versions': {n: m.version(n) for n in sys.argv[1:]}, 'torch': torch.__file__,\n"
                     "  'files': {n: importlib.import_module(n).__file__ for n in ('s3fs', 'aiobotocore', 'botocore', 'fsspec')}}))")
    result = s3_ranks.run(1, probe, list(locked), cwd=workdir, env=env, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout)
    assert found["versions"] == locked and {"s3fs", "aiobotocore", "botocore", "fsspec"} <= set(locked)
    for name, path in found["files"].items():
        assert Path(path).is_relative_to(s3_stack.TARGET), (name, path)
    import torch

    assert found["torch"] == torch.__file__


@pytest.fixture(scope="module")
def uninterrupted(workdir, tmp_path_factory):
    """The uninterrupted run each resume is held to, once per data source: the job's shuffle
    buffer and seed over four shards of 50 documents (or synthetic tokens), 28 steps, saved every 8
    (its arguments, the run's output, and its checkpoint folder). The runs saved in the background
    or to S3 are held to the same run as the plain one: how a run saves changes nothing it trains."""
    job = job_train_args()
    assert job.shuffle_buffer > 200  # the job shuffles; here its buffer holds the whole pass
    folder = tmp_path_factory.mktemp("uninterrupted")
    lines = (workdir / "corpus.txt").read_text().splitlines()[:200]
    shards = []
    for i in range(4):
        shards.append(folder / f"part-{i}.txt")
        shards[-1].write_text("\n".join(lines[i::4]) + "\n")
    runs = {}

    def run(source: str) -> tuple[tuple[str, ...], str, Path]:
        if source not in runs:
            data = ["--synthetic-data"] if source == "synthetic" else ["--data-files", *map(str, shards)]
            common = ("--max-steps=28", "--log-interval=1", "--checkpoint-interval=8", f"--shuffle-buffer={job.shuffle_buffer}",
                      f"--seed={job.seed}", *data)
            code, out = train_in_process(workdir, *common, f"--checkpoint-dir={folder / source}")
            assert code == 0, out[-2000:]
            runs[source] = common, out, folder / source
        return runs[source]

    return run


@pytest.mark.parametrize("data", ["documents", "synthetic", "documents, saved in the background", "documents, saved to S3"])
def test_a_run_that_dies_mid_way_resumes_exactly_with_the_jobs_shuffle(workdir, tmp_path, data, request, uninterrupted):
    """An uninterrupted run, and one that dies at step 21 (an exception, as a lost node) and
    resumes from its step-16 checkpoint, with the job's shuffle buffer and seed over four
    shards of 50 documents: the buffer holds every document, and the second pass starts
    after the resume. Every loss and every weight and optimizer tensor must be equal. Saved
    in the background (--async-checkpoint), the interrupted run's checkpoints must hold the
    very state of their step, though training went on while they were written. Saved to S3,
    the interrupted run and its resume run in their own processes with the training image's
    S3 stack against a moto server, and their checkpoints must be in the bucket."""
    import torch
    import torch.distributed as dist

    common, whole, whole_dir = uninterrupted("synthetic" if data == "synthetic" else "documents")
    if "background" in data:
        common += ("--async-checkpoint",)

    if "S3" in data:
        endpoint, env = request.getfixturevalue("s3_server")
        ranks = request.getfixturevalue("s3_ranks")
        bucket = _s3_client(endpoint)
        bucket.create_bucket(Bucket="checkpoints")
        killed = "s3://checkpoints/killed"
        code, out = _train_on_s3(ranks, workdir, env, *common, f"--checkpoint-dir={killed}", dies_at=21)
        assert code != 0 and "RuntimeError: node lost" in out and "checkpoint saved step=16 path=s3://" in out, out[-2000:]
        code, resumed = _train_on_s3(ranks, workdir, env, *common, f"--checkpoint-dir={killed}")
        # Every checkpoint went to the bucket, and none to a local folder named after the URL.
        keys = [o["Key"] for o in bucket.list_objects_v2(Bucket="checkpoints").get("Contents", [])]
        for key in keys:  # read back below as the local runs' folders are
            (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
            bucket.download_file("checkpoints", key, str(tmp_path / key))
        steps = sorted({key.split("/")[1] for key in keys})
        assert steps == ["step_00000016", "step_00000024", "step_00000028"] and not (workdir / "s3:").exists(), keys
        for step in steps:
            assert {".metadata", "_COMPLETE.json", "data_rank00000.json"} <= {k.rsplit("/", 1)[1] for k in keys if f"/{step}/" in k}
    else:
        killed = tmp_path / "killed"
        train = train_module()
        with pytest.MonkeyPatch.context() as patch, pytest.raises(RuntimeError, match="node lost"):
            saved = killed / "step_00000016" if "background" in data else None
            patch.setattr(train, "next_token_loss", _dies_at(train, 21, once_saved=saved))
            train_in_process(workdir, *common, f"--checkpoint-dir={killed}")
        dist.destroy_process_group()
        code, resumed = train_in_process(workdir, *common, f"--checkpoint-dir={killed}")
    assert code == 0 and f"resumed from {killed}/step_00000016 at step=16" in resumed, resumed[-2000:]
    assert "replaying" not in resumed
    if data.startswith("documents"):  # the resumed part runs into the second pass
        state = json.loads((tmp_path / "killed" / "step_00000028" / "data_rank00000.json").read_text())
        assert state["epoch"] == 1 and json.loads((tmp_path / "killed" / "step_00000016" / "data_rank00000.json").read_text())["epoch"] == 0
    expected, got = losses_of(whole), losses_of(resumed)
    assert sorted(got) == list(range(17, 29))
    assert {s: got[s] for s in got} == {s: expected[s] for s in got}
    a = saved_tensors(whole_dir / "step_00000028", tmp_path)
    b = saved_tensors(tmp_path / "killed" / "step_00000028", tmp_path / "killed")
    assert sorted(a) == sorted(b) and len(a) > 40
    assert [k for k in a if not torch.equal(a[k], b[k])] == []
    if "background" in data:
        saved_lines = [l for l in resumed.splitlines() if l.startswith("checkpoint saved")]
        assert [int(re.search(r"step=(\d+)", l).group(1)) for l in saved_lines] == [24, 28]
        c = saved_tensors(whole_dir / "step_00000024", tmp_path)
        d = saved_tensors(tmp_path / "killed" / "step_00000024", tmp_path / "killed")
        assert [k for k in c if not torch.equal(c[k], d[k])] == []  # written while steps 25-27 trained


def test_a_two_rank_checkpoint_resumes_on_one_rank_and_other_files_are_refused_with_one_line(first_run, workdir, tmp_path):
    import shutil

    ckpt = tmp_path / "ckpt"
    shutil.copytree(workdir / "ckpt" / "step_00000020", ckpt / "step_00000020")  # two ranks' shards and positions
    resume = ("--max-steps=24", "--log-interval=1", f"--checkpoint-dir={ckpt}", "--checkpoint-interval=2",
              f"--shuffle-buffer={job_train_args().shuffle_buffer}", "--lr-ramp-steps=4")
    code, out = train_in_process(workdir, *resume)
    assert code == 0, out[-2000:]
    assert "data position of 2 ranks re-divided over 1" in out and f"resumed from {ckpt / 'step_00000020'} at step=20" in out
    assert sorted(losses_of(out)) == [21, 22, 23, 24] and all(math.isfinite(v) for v in losses_of(out).values())
    # Half the world trains on half the global batch: the learning rate follows the square root of
    # the batch ratio (the learning-rate part of Malladi et al.'s rule for adaptive methods, NeurIPS
    # 2022; the linear rule is SGD's), on the same schedule, reached over --lr-ramp-steps from the
    # resume; the batch it is given for goes on with the checkpoints.
    train = train_module()
    args = train.parse_args(plain_command(workdir, "--max-steps=24")[2:])
    ratio = math.sqrt(128 / 256)
    assert ("global batch 256 -> 128 tokens: learning rate x0.7071 (the square root of the batch ratio, the learning-rate part "
            f"of the square-root rule for adaptive methods, Malladi et al. 2022), peak 3.000e-03 -> {3e-3 * ratio:.3e}, ramped over "
            "steps 21-24; given as 3.000e-03 at 256 tokens") in out.splitlines()
    lrs = {int(m[0]): float(m[1]) for m in re.findall(r"^step=(\d+) loss=\S+ lr=(\S+) ", out, flags=re.M)}
    ramp = {step: 1 + (ratio - 1) * (step - 20) / 4 for step in (21, 22, 23, 24)}
    for step, lr in lrs.items():
        assert lr == pytest.approx(args.lr * ramp[step] * train.lr_schedule(args)(step - 1), rel=1e-3), step
    # A crash inside the ramp (step 23, after the save at 22): the restart goes on with the ramp,
    # step for step, rather than at the full new rate.
    shutil.rmtree(ckpt / "step_00000024")
    code, again = train_in_process(workdir, *resume)
    assert code == 0 and f"resumed from {ckpt / 'step_00000022'} at step=22" in again, again[-2000:]
    assert (f"learning rate ramp to peak {3e-3 * ratio:.3e} over steps 21-24 goes on from step 22 (peak {3e-3 * ramp[22]:.3e} "
            "there)") in again.splitlines()
    assert {step: lr for step, lr in lrs.items() if step > 22} == {int(m[0]): float(m[1]) for m in
                                                                   re.findall(r"^step=(\d+) loss=\S+ lr=(\S+) ", again, flags=re.M)}
    manifest = json.loads((ckpt / "step_00000024" / "_COMPLETE.json").read_text())
    assert (manifest["world"], manifest["batch_tokens"], manifest["lr_batch_tokens"]) == (1, 128, 256)
    assert manifest["lr_ramp"] == {"from": 1.0, "to": pytest.approx(ratio), "at": 20, "steps": 4}
    other = tmp_path / "other.txt"
    other.write_text((workdir / "corpus.txt").read_text())
    code, out = train_in_process(workdir, "--max-steps=30", f"--checkpoint-dir={ckpt}", "--data-files", str(workdir / "corpus.txt"), str(other))
    assert code == 2
    (refused,) = [l for l in out.splitlines() if l.startswith("cannot resume")]
    assert refused == (f"cannot resume from {ckpt / 'step_00000024'}: the checkpoint's data position is over 1 shards and this "
                       "dataset has 2: a pass over other files cannot be continued")


def test_a_background_save_writes_its_data_position_with_its_shards_not_before_them(workdir, tmp_path):
    # --async-checkpoint: the step's data position is taken at the step and written by a thread,
    # as the shards are (async_save), so training does not wait for some MB of JSON; the last save
    # is synchronous, its position written in the loop's own thread.
    import threading

    train_module()  # training/ on the path, as the image has it
    import checkpoints

    writers = []
    real = checkpoints.write_data_state

    def recording(ckpt, state, rank):
        writers.append((Path(ckpt).name, threading.current_thread().name))
        return real(ckpt, state, rank)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoints, "write_data_state", recording)
        code, out = train_in_process(workdir, "--max-steps=8", "--checkpoint-interval=4", "--async-checkpoint",
                                      f"--checkpoint-dir={tmp_path / 'ckpt'}")
    assert code == 0, out[-2000:]
    assert [name for name, _ in writers] == ["step_00000004", "step_00000008"]
    assert writers[0][1].startswith("data-state") and writers[1][1] == threading.main_thread().name
    assert json.loads((tmp_path / "ckpt" / "step_00000004" / "data_rank00000.json").read_text())["kind"] == "documents"


# train.py as a launcher starts it, with each rank's environment written down first (ENV_OUT.<rank>).
UNDER_A_LAUNCHER = """
import json, os, runpy, sys
open(os.environ["ENV_OUT"] + "." + os.environ["RANK"], "w").write(json.dumps(dict(os.environ)))
sys.path.insert(0, os.path.dirname(sys.argv[1]))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_the_forked_ranks_are_what_torch_distributed_run_starts(ranks, workdir, tmp_path):
    # Every other multi-rank test forks its ranks (fork_ranks.py, the imports paid once); this one
    # starts train.py under torch's own launcher too, the same run both ways, so the fast harness
    # cannot drift from it: the same worker environment for what torchrun sets per rank, the same
    # lines, losses and checkpoint.
    (tmp_path / "launched.py").write_text(UNDER_A_LAUNCHER)

    def args(where: str) -> list[str]:
        return [str(TRAIN), *bench_train.train_args(workdir, max_steps=3, extra=[
            "--log-interval=1", f"--checkpoint-dir={tmp_path / where}", "--checkpoint-interval=3"])]

    env = {**bench_train.offline_env(), "ENV_OUT": str(tmp_path / "torchrun-env")}
    real = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(tmp_path / "launched.py"), *args("torchrun")], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=300)
    assert real.returncode == 0, real.stderr[-4000:]
    forked = ranks.run(2, tmp_path / "launched.py", args("forkrank"), cwd=workdir, env={**env, "ENV_OUT": str(tmp_path / "forked-env")},
                       timeout=300)
    assert forked.returncode == 0, forked.stderr[-4000:]

    def environment(prefix: str) -> list[dict]:
        return [{k: v for k, v in json.loads((tmp_path / f"{prefix}-env.{r}").read_text()).items() if env.get(k) != v} for r in (0, 1)]

    # What torchrun sets for a worker that a forked rank has too, with the same per-rank values;
    # and nothing the fork sets that torchrun does not.
    per_rank = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
    for launched, fork in zip(environment("torchrun"), environment("forked")):
        assert set(fork) - {"ENV_OUT"} <= set(launched), set(fork) - set(launched)
        assert {k: fork[k] for k in per_rank} == {k: launched[k] for k in per_rank}
        assert {"MASTER_ADDR", "MASTER_PORT"} <= set(fork)

    def said(out: str, where: str) -> list[str]:
        timing = re.compile(r" (tokens_per_s|seconds)=\S+")
        return [timing.sub("", line).replace(str(tmp_path / where), "<ckpt>") for line in out.splitlines()]

    assert said(real.stdout, "torchrun") == said(forked.stdout, "forkrank")
    assert sorted(losses_of(real.stdout)) == [1, 2, 3]
    # (Folders of one name length: the checkpoint's .metadata holds its path.)
    manifests = [json.loads((tmp_path / where / "step_00000003" / "_COMPLETE.json").read_text()) for where in ("torchrun", "forkrank")]
    assert manifests[0] == manifests[1]
