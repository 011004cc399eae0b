"""Trainer callbacks shared by the training stages."""

from __future__ import annotations

import math

from transformers import TrainerCallback
from transformers.integrations.integration_utils import rewrite_logs

from rlcw.runs import RunDir
from rlcw.tracking import Tracker


class JsonlMetricsCallback(TrainerCallback):
    """Mirror every trainer log (train and eval) into the run's metrics.jsonl and the `train.report_to` trackers.

    The trackers get HF's key layout (`train/loss`, `eval/loss`: transformers' `rewrite_logs`, what its own
    TensorBoard and wandb callbacks send); the stages set TRL/HF's `report_to="none"` so this is the one path
    (rlcw.tracking checks what a tracker receives)."""

    def __init__(self, run: RunDir, tracker: Tracker | None = None):
        self.run, self.tracker = run, tracker

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or not state.is_world_process_zero:
            return
        clean = {
            k: v
            for k, v in logs.items()
            if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))
        }
        self.run.log(state.global_step, clean)
        if self.tracker is not None:
            self.tracker.log(rewrite_logs(clean), state.global_step)
