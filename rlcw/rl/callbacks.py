"""Trainer callbacks shared by the training stages."""

from __future__ import annotations

import math

from transformers import TrainerCallback

from rlcw.runs import RunDir


class JsonlMetricsCallback(TrainerCallback):
    """Mirror every trainer log (train and eval) into the run's metrics.jsonl."""

    def __init__(self, run: RunDir):
        self.run = run

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or not state.is_world_process_zero:
            return
        clean = {
            k: v
            for k, v in logs.items()
            if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))
        }
        self.run.log(state.global_step, clean)
