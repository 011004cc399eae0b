"""Tail averaging: the final policy is the mean of the trainable weights over the last optimizer steps.

    avg = TailAverage(steps=12, max_steps=24)             # the weights after steps 13..24, averaged
    trainer = GRPOTrainer(..., callbacks=[avg])           # at the end of training the model holds their mean
    avg.load(Path("runs/grpo/checkpoints/checkpoint-16"))  # before trainer.train(resume_from_checkpoint=...)

Polyak-Ruppert averaging of the iterates (Polyak and Juditsky 1992; stochastic weight averaging, Izmailov et al.
2018): where the last steps move the weights back and forth around a point, the last iterate lands wherever the
schedule happened to stop, and their mean lands near the point (a trend over those steps it does not undo). Only the trainable weights are averaged (a LoRA's factors, or every weight
of a full fine-tune), each as an fp32 running mean; the mean is saved with every checkpoint
(`rlcw_tail_average.safetensors`) so a resumed run averages the same steps as an uninterrupted one. Under DDP every
rank holds the whole weights and keeps the same mean; ZeRO shards them, so the recipes refuse `train.deepspeed` with
it.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import TrainerCallback

from rlcw.errors import RlcwError
from rlcw.io import atomic_save_tensors
from rlcw.logs import say
from rlcw.rl.aux_state import saved_checkpoint

TAIL_FILE = "rlcw_tail_average.safetensors"


class TailAverage(TrainerCallback):
    """Keeps the running mean of the trainable weights after each optimizer step from `max_steps - steps + 1` on
    and puts it into the model when training ends (a run stopped early averages the steps it reached)."""

    def __init__(self, steps: int, max_steps: int, command: str = "grpo"):
        if not 0 < steps <= max_steps:
            raise ValueError(f"tail averaging needs 0 < steps <= max_steps, got {steps} of {max_steps}")
        self.first = max_steps - steps + 1
        self.command = command
        self.count = 0
        self.mean: dict[str, torch.Tensor] = {}

    @staticmethod
    def _trainable(model) -> dict[str, torch.nn.Parameter]:
        return {name: p for name, p in model.named_parameters() if p.requires_grad}

    def update(self, model) -> None:
        """Fold the model's current trainable weights into the mean."""
        self.count += 1
        with torch.no_grad():
            for name, p in self._trainable(model).items():
                value = p.detach().to(torch.float32)
                if name not in self.mean:
                    self.mean[name] = value.clone()
                else:
                    self.mean[name] += (value - self.mean[name]) / self.count

    def apply(self, model) -> None:
        """Copy the mean into the model's trainable weights (in their own dtype); nothing before the first step."""
        if not self.count:
            return
        params = self._trainable(model)
        missing = sorted(set(self.mean) ^ set(params))
        if missing:
            raise RuntimeError(f"tail average and model disagree on the trainable weights: {missing[:4]}")
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(self.mean[name].to(p.dtype))

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if model is not None and state.global_step >= self.first:
            self.update(model)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if model is None or not self.count:
            return
        self.apply(model)
        last = self.first + self.count - 1
        say(
            self.command, f"final policy: the mean of the weights after steps {self.first}-{last} ({self.count} steps)"
        )

    def on_save(self, args, state, control, **kwargs):
        if (folder := saved_checkpoint(args, state)) is not None:
            self.save(folder)

    def save(self, folder: Path) -> Path:
        """The mean, its count and its first step in `folder`, atomically."""
        meta = {"count": str(self.count), "first": str(self.first)}
        return atomic_save_tensors({k: v.contiguous() for k, v in self.mean.items()}, folder / TAIL_FILE, meta)

    def load(self, folder: Path) -> bool:
        """Restore the mean saved in a checkpoint; False when it has none. A file written for another tail (its
        first averaged step differs) is an error: the resumed run would average other steps than it says."""
        from safetensors import safe_open

        path = folder / TAIL_FILE
        if not path.is_file():
            return False
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            first = int(meta.get("first", self.first))
            if first != self.first:
                raise RlcwError(
                    f"this checkpoint averages the weights from step {first}, this run from step {self.first}",
                    where=str(path),
                    hint="resume with the train.tail_average and train.max_steps the run started with",
                )
            self.count = int(meta.get("count", 0))
            self.mean = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
        return True
