"""A log for people: rlcw's own progress lines (`[rlcw] <stage>: ...`) and a trainer progress callback that
prints a few headline numbers per logged step instead of the trainer's whole log dict (every key still goes
to metrics.jsonl and the trackers, rlcw.measure.callbacks.JsonlMetricsCallback).

    say("grpo", "loading the policy")                 # [rlcw] grpo: loading the policy
    quiet_progress(trainer, "grpo")                   # [rlcw] grpo: step 3/24  reward -0.81  kl 0.012 ...

Only rank 0 prints (nanochat `print0`).
"""

from __future__ import annotations

import os
import sys
import warnings

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


# Libraries whose FutureWarnings speak to their own users' code, not to someone running rlcw.
_QUIET_MODULES = r"(transformers|trl|peft|accelerate|datasets|torch|deepspeed)(\.|$)"


def quiet_libraries() -> None:
    """Keep the libraries' set-up chatter out of a run's log (set before they are imported; RLCW_VERBOSE=1 or
    the variables set by hand win): weight-loading bars, load reports (the fresh score head of a reward model
    is expected), deprecation notices addressed to library users. Training progress and errors still show."""
    if os.environ.get("RLCW_VERBOSE", "") not in ("", "0"):
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # "Loading weights", downloads, datasets maps
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # load reports ("score.weight MISSING")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the fork warning of HF tokenizers
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # "rollout_func is experimental" (rlcw pins TRL)
    warnings.filterwarnings("ignore", category=FutureWarning, module=_QUIET_MODULES)
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=_QUIET_MODULES)
    if "torch" in sys.modules and not sys.modules["torch"].cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # what DeepSpeed falls back to anyway, without its warning


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
