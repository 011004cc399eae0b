"""Trainer callbacks shared by the training stages."""

from __future__ import annotations

import math

from transformers import TrainerCallback
from transformers.integrations.integration_utils import rewrite_logs

from rlcw.errors import RunFailed
from rlcw.runs import RunDir
from rlcw.tracking import Tracker


class JsonlMetricsCallback(TrainerCallback):
    """Mirror every trainer log (train and eval) into the run's metrics.jsonl and the `train.report_to` trackers.

    The trackers get HF's key layout (`train/loss`, `eval/loss`: transformers' `rewrite_logs`, what its own
    TensorBoard and wandb callbacks send); the stages set TRL/HF's `report_to="none"` so this is the one path
    (rlcw.tracking checks what a tracker receives). A logged loss or reward that is not finite ends the run
    (`RunFailed`: summary.json `failed`, exit 1) on every rank, after the row is written."""

    def __init__(self, run: RunDir, tracker: Tracker | None = None):
        self.run, self.tracker = run, tracker

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        if state.is_world_process_zero:
            self._write(state.global_step, logs)
        bad = {k: v for k, v in logs.items() if k in DIVERGED_KEYS and isinstance(v, float) and not math.isfinite(v)}
        if bad:
            raise diverged(bad, state.global_step, str(self.run.path))

    def _write(self, step: int, logs: dict) -> None:
        clean = {
            k: v
            for k, v in logs.items()
            if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))
        }
        self.run.log(step, clean)
        if self.tracker is not None:
            self.tracker.log(rewrite_logs(clean), step)


# Logged values that a diverged run turns into nan or inf (HF's train loss, TRL's mean reward of GRPO and RLOO).
DIVERGED_KEYS = ("loss", "reward")


def diverged(bad: dict[str, float], step: int, run_path: str) -> RunFailed:
    """The failure of a run whose logged `bad` values (key -> nan/inf) stopped being finite at `step`."""
    what = ", ".join(f"{k} became {v}" for k, v in bad.items())
    return RunFailed(
        f"training diverged: {what} at step {step}",
        where=run_path,
        hint="lower train.learning_rate (or clip gradients harder); checkpoints before this step are in "
        f"{run_path}/checkpoints",
    )
