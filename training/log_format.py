"""What train.py and the job that runs it must agree on: the lines train.py prints, the
regexes the job's log-monitoring rules use, and the environment the job hands it.

One module, imported by train.py (in the image) and by manifests/job.py (which builds the
HyperPodPyTorchJob's logMonitoringConfiguration and env), so the rules match what is
printed. No third-party imports: the manifest builder runs without torch.
"""

# The Secrets Manager secret (its name) whose value is the Hugging Face token.
HF_TOKEN_SECRET_ENV = "HF_TOKEN_SECRET_ID"

LOSS_LINE = "step={step} loss={loss:.4f} lr={lr:.3e} tokens_per_s={tps:.1f}"
CHECKPOINT_LINE = "checkpoint saved step={step} path={path} seconds={seconds:.1f}"
# Lines no log rule watches (none has "step=<n> loss=<digits>" or "checkpoint saved"): a
# skipped step stops no clock, it only fails to feed the loss rules.
SKIPPED_LINE = "step {step} skipped: loss={loss:.4f} grad_norm={norm:.4g} not finite; {in_a_row} in a row, {total} skipped in all"
# Printed once, then the process exits non-zero; nothing after the last good step is saved.
NONFINITE_STOP_LINE = (
    "training stopped: {count} steps in a row with a non-finite loss or gradient norm (steps {first}-{last}); "
    "last checkpoint step={saved}"
)
UNSAFE_STATE_LINE = "training stopped: non-finite weights or optimizer state after step={step}, not saved; last checkpoint step={saved}"
# Said after either, where there are checkpoints: the operator's restart resumes from the last
# one and passes over the window's documents (what train.window_words says) rather than train
# on them again.
PASS_OVER_NEXT_LINE = "the restart passes over {window} (recorded in {record})"
# At a resume: each window an earlier run stopped on, whose documents are not trained on.
PASSED_OVER_LINE = "passing over {window}: an earlier run stopped on non-finite values there; they are not trained on"
# At a start with no checkpoint, windows recorded against checkpoints that are gone.
STALE_RECORD_LINE = (
    "setting aside {count} non-finite window(s) recorded against checkpoints that are gone ({windows}): "
    "this start has none to resume; removed from {record}"
)
# The exit of a give-up: 0, the one exit the HyperPod elastic agent does not count as a worker
# crash for the operator to restart (hyperpod-elastic-agent 1.1.3: every other exit code is a
# ProcessFailure, WorkerCrash); the job then ends Completed.
GIVE_UP_EXIT = 0
# Past the limit of windows: the run ends, and with it the job, the last line its log has.
NONFINITE_GIVE_UP_LINE = (
    "training gave up: non-finite values came back after passing over {windows} ({count} windows, at most {limit}); "
    "the recipe diverges, not a batch. Every rank exits {code}, so the operator ends the job as Completed instead of "
    "restarting it (any other exit is retried up to runPolicy.jobMaxRetryCount, rebuilding the model each time): it did "
    "not train to max_steps. Kept in {gave_up} (`hyperpod-cdk job-record` shows it). Lower the learning rate or start "
    "from another checkpoint, then delete {record}"
)

# The records beside the checkpoints (train.py writes them; `hyperpod-cdk job-record` reads them).
# The windows of steps runs stopped on with non-finite values: every start passes over their
# documents (or, for a stream without documents, their steps).
NONFINITE_RECORD = "_NONFINITE.json"
# Each give-up, for people: {"gave_up": [{"at", "step", "world", "limit", "exit", "windows", "printed_at"}]}.
# The job's log and the job object go ttlSecondsAfterFinished after the give-up; this stays, and
# deleting the windows' record to start over leaves it. The next start prints each give-up it has
# not printed yet (GAVE_UP_BEFORE_LINE) and stamps it printed_at.
GAVE_UP_RECORD = "_GAVE_UP.json"
GAVE_UP_BEFORE_LINE = "an earlier start gave up: {gave_up} (recorded in {record})"


def window_words(window: dict) -> str:
    """A recorded non-finite window, in words: its steps, the update before them, its documents."""
    first, last = window["steps"]
    update = window.get("update")
    steps = f"steps {update or first}-{last}" + (f" (step {update}'s update, then the non-finite steps)" if update else "")
    if window.get("documents") is None:
        return steps
    world = window.get("world")
    return f"the {len(window['documents'])} documents of {steps}" + (f" on {world} rank{'s' * (world > 1)}" if world else "")


def give_up_words(event: dict) -> str:
    """A recorded give-up, in words: when, from which checkpoint, on how many ranks, which windows."""
    windows = event["windows"]
    world = event["world"]
    return (f"at {event['at']}, last checkpoint step={event['step']}, on {world} rank{'s' * (world > 1)}, exit {event['exit']}: "
            f"{len(windows)} non-finite windows, at most {event['limit']} ({'; '.join(window_words(w) for w in windows)})")
# The learning rate of a global batch other than the one it is given for: the learning-rate part of
# the square-root scaling rule for adaptive methods (Malladi et al., NeurIPS 2022; train.lr_scale).
LR_RULE = "the learning-rate part of the square-root rule for adaptive methods, Malladi et al. 2022"
LR_LINE = "learning rate {lr:.3e} at a global batch of {tokens} tokens: {base:.3e} at {anchor} tokens x sqrt({tokens}/{anchor})"
LR_RESIZED_LINE = (
    "global batch {before} -> {tokens} tokens: learning rate x{ratio:.4g} (the square root of the batch ratio, " + LR_RULE + "), "
    "peak {old:.3e} -> {lr:.3e}, ramped over steps {first}-{last}; given as {base:.3e} at {anchor} tokens"
)
# A restart inside a ramp towards the same rate: the ramp goes on where it was.
LR_RAMP_ON_LINE = "learning rate ramp to peak {lr:.3e} over steps {first}-{last} goes on from step {start} (peak {at:.3e} there)"
# A checkpoint whose manifest records no global batch (an earlier train.py's): its run's rate assumed.
LR_ASSUMED_LINE = (
    "checkpoint {ckpt} records no global batch (an earlier train.py's), so its run's learning rate is assumed: {how}, peak "
    "{old:.3e}; this global batch of {tokens} tokens trains at {lr:.3e} ({base:.3e} at {anchor} tokens x sqrt({tokens}/{anchor})), "
    "ramped over steps {first}-{last}"
)
# At the end of a run on GPUs, each rank's allocator peaks (tests/bench/gpu_bench.py reads them).
MEMORY_LINE = "memory rank={rank} peak_allocated_gib={allocated:.2f} peak_reserved_gib={reserved:.2f}"
# A stop signal (SIGUSR1: the agent's graceful stop; SIGTERM) honoured by a save, or not.
SIGNAL_STOP_LINE = "training stopped on {signal} after step={step}; checkpoint step={saved}"
NO_SAVE_STOP_LINE = "training stopped on {signal} without a checkpoint: {why}; last checkpoint step={saved}"

# Any loss line; a non-finite loss ("nan", "inf") does not match, so it stops the clock.
LOSS_PATTERN = r".*step=\d+ loss=[0-9]+\.[0-9]+ .*"
# The same line with the loss value captured (a metric for threshold rules).
LOSS_VALUE_PATTERN = r".*step=\d+ loss=([0-9]+\.[0-9]+) .*"
# The same line with the job's tokens per second captured.
THROUGHPUT_PATTERN = r".*step=\d+ loss=[0-9]+\.[0-9]+ lr=\S+ tokens_per_s=([0-9]+\.[0-9]+).*"
CHECKPOINT_PATTERN = r".*checkpoint saved step=\d+ .*"
