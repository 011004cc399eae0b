"""A log for people: rlcw's own progress lines (`[rlcw] <stage>: ...`) and a trainer progress callback that
prints a few headline numbers per logged step instead of the trainer's whole log dict (every key still goes
to metrics.jsonl and the trackers, rlcw.rl.callbacks.JsonlMetricsCallback).

    say("grpo", "loading the policy")                 # [rlcw] grpo: loading the policy
    quiet_progress(trainer, "grpo")                   # [rlcw] grpo: step 3/24  reward -0.81  kl 0.012 ...

Only rank 0 prints (nanochat `print0`).
"""

from __future__ import annotations

import os
import sys

# The numbers a person reads per logged step, in this order, when the trainer logs them (TRL GRPO/DPO, HF).
HEADLINE_KEYS = (
    "loss",
    "eval_loss",
    "eval_accuracy",
    "reward",
    "reward_std",
    "kl",
    "monitor/kl_to_start",
    "completions/mean_length",
    "completions/clipped_ratio",
    "rewards/margins",
    "grad_norm",
)


def is_rank0() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def say(stage: str, message: str, *, file=None) -> None:
    """One `[rlcw] <stage>: <message>` line (rank 0 only)."""
    if is_rank0():
        print(f"[rlcw] {stage}: {message}", file=file or sys.stdout, flush=True)


def headline(logs: dict, keys: tuple[str, ...] = HEADLINE_KEYS) -> str:
    """`reward -0.81, kl 0.012, ...`: the headline numbers of one trainer log (4 significant digits)."""
    parts = []
    for key in keys:
        value = logs.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            parts.append(f"{key.split('/')[-1] if key.startswith('completions/') else key} {value:.4g}")
    return ", ".join(parts)


def headline_progress(stage: str):
    """A transformers ProgressCallback whose per-log line is `[rlcw] <stage>: step N/M: <headline>`."""
    from transformers.trainer_callback import ProgressCallback

    class HeadlineProgress(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs:
                return
            numbers = headline(logs)
            if not numbers:
                return
            line = f"[rlcw] {stage}: step {state.global_step}/{state.max_steps}: {numbers}"
            if self.training_bar is not None:
                self.training_bar.write(line)
            else:
                print(line, flush=True)

    return HeadlineProgress()


def quiet_progress(trainer, stage: str) -> None:
    """Swap the trainer's ProgressCallback (which prints every log dict) for `headline_progress(stage)`."""
    from transformers.trainer_callback import ProgressCallback

    if any(type(cb) is ProgressCallback for cb in trainer.callback_handler.callbacks):
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(headline_progress(stage))
