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
# one and passes over those steps' batches rather than train on them again.
PASS_OVER_NEXT_LINE = "the restart passes over steps {first}-{last} (recorded in {record})"
# At a resume: each window of steps an earlier run stopped on, whose batches are not trained on.
PASSED_OVER_LINE = "passing over steps {first}-{last}: an earlier run stopped on non-finite values there; their batches are not trained on"
# At a start, once more windows than allowed came back: the run ends at once, each restart alike.
NONFINITE_GIVE_UP_LINE = (
    "training will not resume: non-finite values came back after passing over {windows} ({count} windows, at most {limit}); "
    "the recipe diverges, not a batch: lower the learning rate or start from another checkpoint, then delete {record}"
)
# At a resume on another world size: the learning rate follows the global batch.
LR_SCALED_LINE = (
    "world {recipe_world} -> {world}: global batch {recipe_batch} -> {batch} sequences, learning rate x{scale:g} with it "
    "(peak {recipe_lr:.3e} -> {lr:.3e}; the linear scaling rule)"
)
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
