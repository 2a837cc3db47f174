"""LLaMA pretraining with PyTorch FSDP on a streamed dataset (C4 by default).

Runs under `hyperpodrun` (the HyperPod elastic agent) and plain `torchrun` alike: both set
RANK, LOCAL_RANK, WORLD_SIZE and the rendezvous variables this script reads.

What the HyperPod training operator's log rules watch (log_format.py holds the formats
and the rules' regexes, so the two cannot drift apart):
  step=<n> loss=<float> lr=<float> tokens_per_s=<float> [mfu=<float>]   one line per step
  checkpoint saved step=<n> path=<dir> seconds=<float>                   one line per save
A step whose loss or gradient norm is not finite is skipped (no optimizer step) and prints
no loss line, so the rules' loss clocks keep running; a few in a row stop the job, and the
operator's restart, and every start after it, passes over the documents of those steps and of
the update before them instead of training on them again, on whatever world size it resumes
(the window is recorded beside the checkpoints, by document); past --max-nonfinite-restarts
windows the job gives up with one line and exit 0, which ends it instead of being retried, and
keeps the give-up beside the checkpoints for the next start and `hyperpod-cdk job-record`.

SIGUSR1 (the agent's graceful stop) and SIGTERM save at the next step boundary and exit;
where that cannot happen in the agent's stop timeout, the job exits without a save.

Checkpoints are sharded (torch.distributed.checkpoint), one directory per save, with each
rank's data position (its shuffle buffer too), so a resume continues exactly, on the same
world size or, re-divided, on another. A save is complete only when rank 0 has written its
manifest listing every file and its size, after all ranks finished; resume takes the newest
complete one, so a partial or truncated checkpoint is never picked. --async-checkpoint
writes in the background and completes the save at a later step boundary. Resumed on another
world size (an elastic job), the global batch changes with it and so does the learning rate:
the square root of the batch ratio (the learning-rate part of the square-root rule for adaptive
methods; lr_scale says what it leaves out), against the global batch --lr is given for
(--lr-batch-tokens), ramped over --lr-ramp-steps from the resume; the ramp is in every manifest,
so a restart inside it goes on with it.

This file holds the arguments and the loop. Its neighbours, which it imports as siblings
(the image copies them beside it; the tests run `python training/train.py` the same way):
data_stream.py (which rank reads which document, the token chunks, their saved position),
checkpoints.py (sharded saves, their manifest, the resume), llama_model.py (the model, its
FSDP2 sharding, the loss), agent_stop.py (the agent's stop signals and the watchdog),
lr_rule.py (the learning rate's batch rule, its schedule and ramps), model_shape.py (the presets
and their arithmetic) and log_format.py (the lines the operator watches).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from agent_stop import StopRequest
from checkpoints import (
    choose_checkpoint,
    complete_checkpoint,
    join_path,
    load_checkpoint,
    passed_over,
    record_give_up,
    record_nonfinite,
    recorded_recipe,
    save_checkpoint,
    set_aside_nonfinite,
    unprinted_give_ups,
)
from data_stream import DataStateError, SyntheticTokens, TokenStream, batches, document_segments, load_hf_token, load_stream
from llama_model import CAUSAL_ATTENTION, build_model, logits_of, materialise, model_config, next_token_loss, shard
from log_format import (
    CHECKPOINT_LINE,
    GAVE_UP_BEFORE_LINE,
    GAVE_UP_RECORD,
    GIVE_UP_EXIT,
    LOSS_LINE,
    MEMORY_LINE,
    NO_SAVE_STOP_LINE,
    NONFINITE_GIVE_UP_LINE,
    NONFINITE_RECORD,
    NONFINITE_STOP_LINE,
    PASS_OVER_NEXT_LINE,
    PASSED_OVER_LINE,
    SIGNAL_STOP_LINE,
    SKIPPED_LINE,
    STALE_RECORD_LINE,
    UNSAFE_STATE_LINE,
    give_up_words,
    window_words,
)
from lr_rule import lr_plan, lr_scale, lr_schedule  # lr_scale, lr_schedule: the tests read the rule through train
from model_shape import PRESETS, Preset, mfu, parameters, peak_tflops


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(PRESETS), default="llama3.1-8b")
    p.add_argument("--layers", type=int, default=None, help="override the preset's layer count (smoke tests)")
    p.add_argument("--tokenizer", default="meta-llama/Llama-3.1-8B", help="name or local path")
    p.add_argument("--dataset", default="allenai/c4")
    p.add_argument("--dataset-config", default="en")
    p.add_argument("--dataset-split", default="train")
    p.add_argument("--data-files", nargs="*", help="local text files: loaded with the 'text' builder, streamed the same way")
    p.add_argument("--synthetic-data", action="store_true", help="random tokens, no tokenizer or dataset (benchmarks)")
    p.add_argument("--text-field", default="text")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=1, help="sequences per device per step")
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=3e-4, help="peak learning rate at a global batch of --lr-batch-tokens")
    p.add_argument(
        "--lr-batch-tokens",
        type=int,
        default=None,
        help="the global batch, in tokens, --lr is given for; another global batch trains at --lr x the square root of the "
        "ratio (the learning-rate part of the square-root rule for adaptive methods, Malladi et al. 2022; betas, epsilon "
        "and steps stay). Default: the first run's global batch, carried in every checkpoint",
    )
    p.add_argument(
        "--lr-ramp-steps",
        type=int,
        default=100,
        help="steps over which a resume whose last run trained at another rate (another world size, an earlier train.py's "
        "checkpoint) moves the learning rate from that run's to its own; a restart inside the ramp goes on with it",
    )
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument(
        "--max-nonfinite-steps",
        type=int,
        default=3,
        help="steps in a row with a non-finite loss or gradient norm (each skipped) after which training stops",
    )
    p.add_argument(
        "--max-nonfinite-restarts",
        type=int,
        default=3,
        help="windows of non-finite steps a restart passes over (each recorded beside the checkpoints); past them a "
        "start ends at once, saying so, until the record is deleted",
    )
    p.add_argument("--checkpoint-dir", default=None, help="local path or s3://bucket/prefix")
    p.add_argument("--checkpoint-interval", type=int, default=50)
    p.add_argument("--keep-checkpoints", type=int, default=3, help="complete checkpoints kept; older ones are deleted")
    p.add_argument(
        "--async-checkpoint",
        action="store_true",
        help="write checkpoints in the background (torch.distributed.checkpoint.async_save): training waits only while "
        "the state is copied to host memory; the save completes (manifest, 'checkpoint saved' line) at the first step "
        "boundary after every rank's files are written. The last save and a stop's save stay synchronous",
    )
    p.add_argument("--log-interval", type=int, default=10, help="steps per tokens/s window, printed together at its end")
    p.add_argument(
        "--stop-timeout",
        type=float,
        default=300,
        help="seconds between the agent's stop signal and its SIGKILL (hyperpodrun --shutdown-timeout, the job's 300): "
        "a stop that has not saved by then (a peer gone, a hung collective) exits without a checkpoint",
    )
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--shuffle-buffer", type=int, default=10000, help="0: stream in order")
    p.add_argument(
        "--activation-checkpointing",
        choices=["full", "selective", "none"],
        default="full",
        help="selective: every second decoder layer (torchtitan's layer-level selective AC)",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile each decoder layer")
    p.add_argument(
        "--document-masking",
        action="store_true",
        help="each token attends only to its own document's earlier tokens in a packed row (torchtitan's document "
        "masking); off: causal over the whole row, SDPA's flash kernel, which a mask rules out",
    )
    p.add_argument("--fused-optimizer", action="store_true", help="fused AdamW")
    p.add_argument(
        "--fsdp-units",
        choices=["layers", "tuned"],
        default="layers",
        help="tuned: embedding and output head as their own units, last layer kept unsharded after forward",
    )
    p.add_argument("--bf16", choices=["auto", "on", "off"], default="auto", help="auto: on with CUDA bf16")
    p.add_argument("--peak-tflops", type=float, default=None, help="per device, for MFU (default: from the GPU name)")
    args = p.parse_args(argv)
    if args.max_nonfinite_steps < 1:
        p.error(f"--max-nonfinite-steps must be 1 or more, not {args.max_nonfinite_steps}")
    return args


# ---------------------------------------------------------------- distributed


def setup_distributed():
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if "MASTER_ADDR" not in os.environ:  # a single process without torchrun
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29511"))
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(minutes=30))
    return rank, world, local_rank, device


def log(line: str, *, local_rank: int):
    # One writer per node: each pod's log carries the lines the operator watches.
    if local_rank == 0:
        print(line, flush=True)


# ---------------------------------------------------------------- the give-up and the measure


def give_up(args, windows: list[dict], step: int, world: int, rank: int, local_rank: int, stop: StopRequest) -> int:
    """More windows than --max-nonfinite-restarts: the recipe diverges, not a batch. Every rank
    exits GIVE_UP_EXIT (0): the HyperPod elastic agent counts any other exit as a worker crash,
    which the operator restarts (up to runPolicy.jobMaxRetryCount, rebuilding the model each
    time); a worker group that exits 0 completes the job (hyperpod-elastic-agent 1.1.3,
    PLRHyperPodElasticAgent._invoke_run: SUCCEEDED, then AgentState.COMPLETED). The line says
    that the job ends without finishing its steps; the record beside the checkpoints keeps it
    after the job and its log are gone (ttlSecondsAfterFinished), for the next start and
    `hyperpod-cdk job-record`."""
    listed = "; ".join(window_words(w) for w in windows)
    kept = record_give_up(args.checkpoint_dir, {"step": step, "world": world, "limit": args.max_nonfinite_restarts,
                                                "exit": GIVE_UP_EXIT, "windows": windows}, rank)
    log(NONFINITE_GIVE_UP_LINE.format(windows=listed, count=len(windows), limit=args.max_nonfinite_restarts, gave_up=kept,
                                      record=join_path(args.checkpoint_dir, NONFINITE_RECORD), code=GIVE_UP_EXIT), local_rank=local_rank)
    stop.reported = True
    dist.barrier()  # every rank has read the record before any exits
    dist.destroy_process_group()
    return GIVE_UP_EXIT


def device_peak_tflops(args, device) -> float | None:
    """Dense bf16 TFLOPS of one device, for MFU: --peak-tflops, else from the GPU's name."""
    if args.peak_tflops:
        return args.peak_tflops
    if device.type != "cuda":
        return None
    return peak_tflops(torch.cuda.get_device_name(device))


# ---------------------------------------------------------------- training


def step_verdict(loss, grad_norm, stop: StopRequest, world: int, device, writing: bool = False) -> tuple[float, float, list[int], int]:
    """The step's one host sync, before the optimizer step: one all-reduce of the loss, the
    gradient norm, the stop signals each rank got and whether its background save is still
    writing. Returns the mean loss, the norm (the same on every rank: clip_grad_norm_
    reduces it over the shards), the signals asked anywhere and the ranks still writing, so
    every rank takes the same decision on the same step."""
    if hasattr(grad_norm, "full_tensor"):  # a DTensor under FSDP, already replicated
        grad_norm = grad_norm.full_tensor()
    flags = torch.tensor([float(stop.signum == s) for s in StopRequest.SIGNALS] + [float(writing)], dtype=torch.float64)
    verdict = torch.cat([torch.stack([loss.detach().double(), grad_norm.detach().double()]), flags.to(device)])
    dist.all_reduce(verdict)  # SUM (gloo has no AVG); float64, so large finite values stay finite
    total_loss, total_norm, *counts, writers = verdict.tolist()
    return total_loss / world, total_norm / world, [s for s, n in zip(StopRequest.SIGNALS, counts) if n], int(writers)


def state_is_finite(model, optimizer, device) -> bool:
    """Whether every rank's shard of the weights and of the optimizer's moments is finite: a
    finite step can still overflow them, and a checkpoint must never hold that."""
    bad = torch.zeros((), device=device)
    tensors = list(model.parameters()) + [t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
    for tensor in tensors:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        if local.is_floating_point():
            bad += (~torch.isfinite(local)).sum().to(device)
    dist.all_reduce(bad)
    return bad.item() == 0


def train(args) -> int:
    rank, world, local_rank, device = setup_distributed()
    stop = StopRequest(args.stop_timeout, lambda line: log(line, local_rank=local_rank))
    try:
        return _train(args, rank, world, local_rank, device, stop)
    finally:
        stop.close()


def _train(args, rank: int, world: int, local_rank: int, device, stop: StopRequest) -> int:
    preset = PRESETS[args.model]
    if args.layers:
        preset = Preset(**{**preset.__dict__, "layers": args.layers})
    use_bf16 = args.bf16 == "on" or (args.bf16 == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported())
    if args.synthetic_data:
        vocab = preset.vocab
        stream = SyntheticTokens(vocab, args.seq_len, args.seed, rank=rank, world=world)
    else:
        from transformers import AutoTokenizer

        secret = load_hf_token()
        if secret:
            log(f"hugging face token: read from Secrets Manager secret {secret}", local_rank=local_rank)
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        vocab = len(tokenizer)
        stream = TokenStream(load_stream(args, rank, world), tokenizer, args.seq_len, args.text_field)
    if vocab != preset.vocab:
        log(f"note: tokenizer vocabulary {vocab} differs from the preset's published {preset.vocab}; "
            "the embedding follows the tokenizer", local_rank=local_rank)
    config = model_config(preset, vocab)
    model = shard(
        build_model(config),
        device,
        bf16=use_bf16,
        activation_checkpointing=args.activation_checkpointing,
        compile_layers=args.compile,
        units=args.fsdp_units,
    )
    materialise(model, device, args.seed + rank)
    start, ckpt = choose_checkpoint(args.checkpoint_dir, rank)
    # A give-up ends the job as Completed and its log goes with the job: the next start says it.
    for event in unprinted_give_ups(args.checkpoint_dir, rank):
        log(GAVE_UP_BEFORE_LINE.format(gave_up=give_up_words(event), record=join_path(args.checkpoint_dir, GAVE_UP_RECORD)),
            local_rank=local_rank)
    # The windows earlier runs stopped on with non-finite values: replaying them from the last
    # checkpoint would fail the same way, so their documents (or, for a stream without documents,
    # their steps) are passed over. A window recorded against checkpoints that are gone does not
    # hold a start that has none: it is set aside.
    windows = passed_over(args.checkpoint_dir, rank)
    stale = [w for w in windows if start == 0 and (w.get("resume_from") or 0) > 0]
    if stale:
        record = set_aside_nonfinite(args.checkpoint_dir, stale, rank)
        log(STALE_RECORD_LINE.format(count=len(stale), windows=", ".join(window_words(w) for w in stale), record=record), local_rank=local_rank)
        windows = [w for w in windows if w not in stale]
    if len(windows) > args.max_nonfinite_restarts:
        return give_up(args, windows, start, world, rank, local_rank, stop)
    # (The last step is trained on all the same: a lone non-finite step is skipped, and the run ends saved.)
    by_steps = [w for w in windows if w.get("documents") is None]
    passing = {step for w in by_steps for step in range(w.get("update") or w["steps"][0], w["steps"][1] + 1) if start < step < args.max_steps}
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=args.lr,
        betas=(0.9, 0.95),
        weight_decay=args.weight_decay,
        **({"fused": True} if args.fused_optimizer else {}),
    )
    # The learning rate for this global batch, and on a resize the ramp from the last run's (the
    # scheduler made before the optimizer's state is loaded: LambdaLR takes its base from the groups).
    batch_tokens = args.batch_size * args.seq_len * world
    recipe, scale, ramp, lr_line = lr_plan(args, recorded_recipe(ckpt), batch_tokens, start, ckpt)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule(args, scale, ramp))
    skip = 0
    if ckpt:
        try:
            resumed = load_checkpoint(ckpt, model, optimizer, stream, rank, world)
        except DataStateError as error:
            log(f"cannot resume from {ckpt}: {error}", local_rank=local_rank)
            dist.destroy_process_group()
            return 2
        if resumed is None:
            skip = start * args.batch_size
            log(f"no stream state for rank {rank} in {ckpt}: replaying {skip} chunks", local_rank=local_rank)
        elif resumed != "data position continued":
            log(resumed, local_rank=local_rank)
        for _ in range(start):
            scheduler.step()
        log(f"resumed from {ckpt} at step={start}", local_rank=local_rank)
    if lr_line:
        log(lr_line, local_rank=local_rank)
    # Every window of documents, on every start: its documents are named whatever the world size,
    # and a checkpoint saved past its steps can still hold them unread (a shuffle buffer, a
    # re-divided rest of the pass), so a window's last step says nothing about what is left of it.
    documents_of = [w for w in windows if w.get("documents") is not None]
    if documents_of:
        stream.pass_over(d for w in documents_of for d in w["documents"])
    for w in windows:
        if w in documents_of or (w in by_steps and any((w.get("update") or w["steps"][0]) <= step <= w["steps"][1] for step in passing)):
            log(PASSED_OVER_LINE.format(window=window_words(w)), local_rank=local_rank)
    eos = getattr(getattr(stream, "tokenizer", None), "eos_token_id", None)
    if args.document_masking and eos is None:
        log("document masking: the stream has no end-of-text token to find documents by (synthetic tokens?); off", local_rank=local_rank)
    data = batches(stream, args.batch_size, device, skip=skip, mask_documents_after=eos if args.document_masking else None)
    peak = device_peak_tflops(args, device)
    tokens_per_step = args.batch_size * args.seq_len * world
    total_params, _ = parameters(preset, vocab)
    log(
        f"training model={args.model} params={total_params / 1e6:.1f}M world={world} device={device.type} "
        f"bf16={use_bf16} start_step={start} max_steps={args.max_steps}",
        local_rank=local_rank,
    )

    model.train()
    # A gloo group of its own for the background writer's collectives, which run in its
    # thread beside the training's on the default group.
    background = dist.new_group(backend="gloo") if args.async_checkpoint and args.checkpoint_dir else None
    writing = None  # (step, future, seconds training waited) of a background save not yet complete
    saved = stop.saved = start
    in_a_row = skipped = 0
    pending: list[tuple[int, float, float] | str] = []  # loss lines wait for their window's tokens/s
    window_start = time.perf_counter()
    # Each recent step's documents on this rank: a non-finite stop records those of its window
    # and of the update before it.
    recent: dict[int, list] = {}
    first_loss = True  # the first loss line of a run is printed at once: the JobStart rule waits for it

    def flush():
        nonlocal window_start, first_loss
        tps = tokens_per_step * len(pending) / (time.perf_counter() - window_start)
        for entry in pending:
            if isinstance(entry, str):
                log(entry, local_rank=local_rank)
                continue
            s, value, lr = entry
            first_loss = False
            line = LOSS_LINE.format(step=s, loss=value, lr=lr, tps=tps)
            if peak:
                line += f" mfu={mfu(tps, preset, vocab, args.seq_len, world, peak):.3f}"
            log(line, local_rank=local_rank)
        pending.clear()
        window_start = time.perf_counter()

    def finish(line: str, code: int) -> int:
        if line:
            log(line, local_rank=local_rank)
        stop.reported = True
        try:
            dist.destroy_process_group()
        except RuntimeError:
            pass  # a broken group: the process ends anyway
        return code

    def complete_background_save(wait: bool) -> None:
        """The background save's manifest and line: at once when every rank's write is done
        (the step verdict says so), or after waiting for it (wait: a stop, the end)."""
        nonlocal writing, saved
        step_, future, waited = writing
        writing = None
        future.result()  # its exception, if the write failed
        if wait:
            dist.barrier()
        path = complete_checkpoint(args.checkpoint_dir, step_, rank, args.keep_checkpoints, recipe=recipe)
        saved = stop.saved = step_
        log(CHECKPOINT_LINE.format(step=step_, path=path, seconds=waited), local_rank=local_rank)

    def stop_on_nonfinite(line: str, first: int, last: int, update: int | None) -> int:
        """Record the window for the restart, then end: its steps, the update before them
        (where that update is not in the last checkpoint) and every rank's documents of those
        steps, which name the same documents on any world size. Past --max-nonfinite-restarts
        windows the job gives up at once (give_up), else exits 3 for the operator's restart."""
        if not args.checkpoint_dir:
            log(line, local_rank=local_rank)
            dist.barrier()
            return finish("", 3)
        update = update if update is not None and update > max(saved, start) and update not in passing else None
        mine = [d for step in range(update or first, last + 1) for d in recent.get(step, [])] if hasattr(stream, "pass_over") else None
        gathered = [None] * world
        dist.all_gather_object(gathered, mine)
        documents = None if mine is None else sorted({tuple(d) for part in gathered for d in part})
        window = {"steps": [first, last], "update": update, "world": world, "resume_from": saved,
                  "documents": None if documents is None else [list(d) for d in documents]}
        line += "; " + PASS_OVER_NEXT_LINE.format(window=window_words(window), record=record_nonfinite(args.checkpoint_dir, window, rank))
        if len(windows) + 1 > args.max_nonfinite_restarts:
            log(line, local_rank=local_rank)
            return give_up(args, windows + [window], saved, world, rank, local_rank, stop)
        log(line, local_rank=local_rank)
        # No rank ends before the record is written and the line is out: the agent (torchrun too)
        # stops a rank's peers as soon as it exits non-zero.
        dist.barrier()
        return finish("", 3)

    def stopped_without_save(signum: int, why: str, error: Exception) -> int:
        why = f"{why} ({str(error).splitlines()[0][:200]})"
        return finish(NO_SAVE_STOP_LINE.format(signal=signal.Signals(signum).name, why=why, saved=saved), 128 + signum)

    for step in range(start + 1, args.max_steps + 1):
        batch = next(data)
        recent[step] = batch.documents
        recent.pop(step - args.max_nonfinite_steps - 1, None)
        if step in passing:  # its batch taken and left, the schedule moved on
            scheduler.step()
            continue
        loss = next_token_loss(logits_of(model, batch.inputs, batch.segments), batch.targets)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        try:
            loss_value, norm, asked, writers = step_verdict(loss, grad_norm, stop, world, device, writing is not None and not writing[1].done())
        except RuntimeError as error:  # a peer gone: gloo raises, NCCL's watchdog aborts
            if not stop.signum:
                raise
            flush()
            return stopped_without_save(stop.signum, f"the process group broke at step={step}", error)
        lr = scheduler.get_last_lr()[0]
        if math.isfinite(loss_value) and math.isfinite(norm):
            optimizer.step()
            in_a_row = 0
            pending.append((step, loss_value, lr))
        else:
            # Skipped: the weights and the optimizer's moments stay as they were.
            in_a_row, skipped = in_a_row + 1, skipped + 1
            pending.append(SKIPPED_LINE.format(step=step, loss=loss_value, norm=norm, in_a_row=in_a_row, total=skipped))
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        if writing is not None and not writers:
            flush()
            complete_background_save(wait=False)
        if in_a_row >= args.max_nonfinite_steps:
            flush()
            if writing is not None:  # its state was finite: finish it before stopping
                complete_background_save(wait=True)
            first = step - in_a_row + 1
            line = NONFINITE_STOP_LINE.format(count=in_a_row, first=first, last=step, saved=saved)
            return stop_on_nonfinite(line, first, step, update=first - 1)
        stopping = bool(asked)
        # Not in a run of non-finite steps: the weights may hold the update that caused it, which
        # the restart must be able to leave out (the window records it while it is not saved).
        save_now = args.checkpoint_dir and ((step % args.checkpoint_interval == 0 and not in_a_row) or step == args.max_steps or stopping)
        # The first step is printed at once: the JobStart rule waits for it.
        if len(pending) >= args.log_interval or save_now or stopping or in_a_row or first_loss or step == args.max_steps:
            flush()
        signum = (stop.signum or asked[0]) if stopping else None
        if save_now:
            t0 = time.perf_counter()
            # The last save and a stop's are complete before the process ends.
            in_background = background is not None and not stopping and step != args.max_steps
            try:
                if writing is not None:  # the last one still writing: this one waits for it
                    complete_background_save(wait=True)
                finite = state_is_finite(model, optimizer, device)
                if finite:
                    path = save_checkpoint(args.checkpoint_dir, step, model, optimizer, stream, rank, args.keep_checkpoints,
                                           background=background if in_background else None, recipe=recipe)
            except RuntimeError as error:  # a peer gone mid-save
                if not stopping:
                    raise
                return stopped_without_save(signum, f"the save at step={step} failed", error)
            if not finite:  # this step's own update overflowed
                return stop_on_nonfinite(UNSAFE_STATE_LINE.format(step=step, saved=saved), step, step, update=None)
            if in_background:
                writing = (step, path, time.perf_counter() - t0)
            else:
                saved = stop.saved = step
                log(CHECKPOINT_LINE.format(step=step, path=path, seconds=time.perf_counter() - t0), local_rank=local_rank)
        if stopping:
            return finish(SIGNAL_STOP_LINE.format(signal=signal.Signals(signum).name, step=step, saved=saved), 128 + signum)
    if writing is not None:
        complete_background_save(wait=True)
    log(f"training finished step={args.max_steps}", local_rank=local_rank)
    if device.type == "cuda":  # every rank its own line (the node benchmark reads them; no log rule does)
        print(MEMORY_LINE.format(rank=rank, allocated=torch.cuda.max_memory_allocated(device) / 2**30,
                                 reserved=torch.cuda.max_memory_reserved(device) / 2**30), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(train(parse_args()))
