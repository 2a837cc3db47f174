"""The learning rate: its rule for a global batch other than the one --lr is given for, the
schedule, and the ramp a resume takes from the rate its last run trained at (recorded in every
checkpoint's manifest, so a restart inside a ramp goes on with it).

Beside train.py in the image, which imports it as a sibling (`from lr_rule import ...`).
"""

from __future__ import annotations

import math

from log_format import LR_ASSUMED_LINE, LR_LINE, LR_RAMP_ON_LINE, LR_RESIZED_LINE


def lr_scale(batch_tokens: int, anchor_tokens: int) -> float:
    """The learning rate's factor for a global batch of `batch_tokens` where --lr is given for
    `anchor_tokens`: the square root of their ratio. This is the learning-rate part, alone, of
    the square-root scaling rule for adaptive methods (Malladi et al., "On the SDEs and Scaling
    Rules for Adaptive Gradient Algorithms", NeurIPS 2022): for a batch k times larger the rule
    also takes 1-beta1 and 1-beta2 times k, epsilon over sqrt(k) and k times fewer steps (the
    same tokens). The job keeps its betas, epsilon and step count, so a larger batch also trains
    on more tokens; the rule is followed in its learning rate only. (The linear rule, Goyal et
    al. 2017, is SGD's.) Anchored to the batch --lr is given for, not to whichever world a run
    first started on, so two runs of one recipe on different worlds train at one rate for one batch."""
    return math.sqrt(batch_tokens / anchor_tokens)


def ramp_multiplier(ramp: dict | None, scale: float, step: int) -> float:
    """The learning rate's multiplier at scheduler step `step` (the rate of training step step+1):
    `scale`, or on `ramp` ({"from", "to", "at", "steps"}: a resume at step `at` whose last run
    trained at `from`) linearly from `from` to `to` over `steps` steps from the resume."""
    if not ramp or step >= ramp["at"] + ramp["steps"]:
        return scale
    if step < ramp["at"]:
        return ramp["from"]
    return ramp["from"] + (ramp["to"] - ramp["from"]) * (step - ramp["at"] + 1) / ramp["steps"]


def lr_schedule(args, scale: float = 1.0, ramp: dict | None = None):
    """Linear warm-up, then cosine decay to min_lr_ratio; every value times `scale` (lr_scale
    of this run's global batch) or, on `ramp` (lr_plan), the ramp's multiplier: a resume whose
    last run trained at another rate moves to this one over --lr-ramp-steps rather than at
    once, as Adam's moments were estimated at the other batch's noise."""

    def factor(step: int) -> float:
        multiplier = ramp_multiplier(ramp, scale, step)
        if step < args.warmup_steps:
            return multiplier * (step + 1) / max(1, args.warmup_steps)
        progress = min(1.0, (step - args.warmup_steps) / max(1, args.max_steps - args.warmup_steps))
        return multiplier * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))

    return factor


def lr_plan(args, recorded: dict | None, batch_tokens: int, start: int, ckpt: str | None = None) -> tuple[dict, float, dict | None, str | None]:
    """This run's learning rate from what the checkpoint's manifest records (`recorded`; None
    on a first run): (the recipe to record in this run's manifests, this run's scale, the ramp its
    schedule follows or None, the line that says it or None).

    The batch --lr is given for: --lr-batch-tokens, else the manifest's, else this run's. The
    rate the last run trained at its last step: from its recorded global batch and ramp; a
    manifest of an earlier train.py records no global batch, and its rate is assumed as that
    train.py applied it (the linear rule over its recorded worlds, else --lr unscaled) and said
    so. A restart inside a ramp towards this same rate goes on with that ramp, step for step;
    any other difference is ramped from the last run's rate at its last step."""
    first_run, recorded = recorded is None, recorded or {}
    anchor = int(args.lr_batch_tokens or recorded.get("lr_batch_tokens") or batch_tokens)
    scale = lr_scale(batch_tokens, anchor)
    recipe = {"world": batch_tokens // (args.batch_size * args.seq_len), "batch_tokens": batch_tokens, "lr_batch_tokens": anchor}
    said = LR_LINE.format(tokens=batch_tokens, lr=args.lr * scale, base=args.lr, anchor=anchor) if scale != 1 else None
    if first_run:
        return {**recipe, "lr_ramp": None}, scale, None, said
    ramp = recorded.get("lr_ramp")
    if ramp and ramp["to"] == scale and start < ramp["at"] + ramp["steps"]:
        line = LR_RAMP_ON_LINE.format(lr=args.lr * scale, first=ramp["at"] + 1, last=ramp["at"] + ramp["steps"], start=start,
                                      at=args.lr * ramp_multiplier(ramp, scale, start - 1))
        return {**recipe, "lr_ramp": ramp}, scale, ramp, line
    before = recorded.get("batch_tokens")
    if before:
        last_scale, assumed = lr_scale(before, anchor), None
    elif recorded.get("recipe_world"):
        last_scale = recorded["world"] / recorded["recipe_world"]
        assumed = f"the linear rule train.py then applied, x{recorded['world']}/{recorded['recipe_world']} ranks"
    else:
        last_scale, assumed = 1.0, "--lr as given, unscaled, as train.py then trained"
    was = ramp_multiplier(ramp, last_scale, start - 1)
    if math.isclose(was, scale, rel_tol=1e-12):
        return {**recipe, "lr_ramp": None}, scale, None, said
    ramp = {"from": was, "to": scale, "at": start, "steps": max(1, args.lr_ramp_steps)}
    words = dict(old=args.lr * was, lr=args.lr * scale, first=start + 1, last=start + ramp["steps"], anchor=anchor, base=args.lr,
                 tokens=batch_tokens)
    if assumed:
        line = LR_ASSUMED_LINE.format(ckpt=ckpt, how=assumed, **words)
    else:
        line = LR_RESIZED_LINE.format(before=before, ratio=scale / last_scale, **words)
    return {**recipe, "lr_ramp": ramp}, scale, ramp, line
