"""TRL's RewardTrainer with the ODIN loss (`rlcw.rm.odin`) for a two-head (quality, length) BT RM.

The dataset carries `chosen_words` / `rejected_words` next to TRL's `chosen_ids` / `rejected_ids`
(and optionally `margin`); the collator passes them on and the loss pops them before the forward.
Everything else (checkpoints, resume, evaluation, DeepSpeed, logging) is TRL's. The loss parts are
logged as `odin/bt_loss`, `odin/rho_quality`, `odin/rho_length`, `odin/head_dot`, `odin/head_cos`. In training the
correlations also read a window of earlier stories (`rm.odin.window`; this rank's earlier micro-batches and every
rank's, gathered, detached: `rlcw.rm.odin.ScoreWindow`).
"""

from __future__ import annotations

from typing import Any

import torch
from trl import RewardTrainer
from trl.trainer.reward_trainer import DataCollatorForPreference

from rlcw.rm.odin import OdinWeights, ScoreWindow, head_weight_param, odin_loss


class OdinCollator(DataCollatorForPreference):
    """TRL's preference collator plus (B,) `chosen_words` and `rejected_words` tensors."""

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        out = super().torch_call(examples)
        for key in ("chosen_words", "rejected_words"):
            out[key] = torch.tensor([float(e[key]) for e in examples])
        return out


class OdinRewardTrainer(RewardTrainer):
    def __init__(self, *args, odin_weights: OdinWeights, **kwargs):
        processing_class = kwargs["processing_class"]
        kwargs.setdefault("data_collator", OdinCollator(pad_token_id=processing_class.pad_token_id))
        config = kwargs["model"].config
        labels = dict(config.id2label)
        config.num_labels = 1  # TRL refuses num_labels != 1; the score layer keeps its two rows, the names come back
        try:
            super().__init__(*args, **kwargs)
        finally:
            config.id2label, config.label2id = labels, {v: k for k, v in labels.items()}
        self.odin_weights = odin_weights
        self._head_weight = head_weight_param(self.model)
        self._window = ScoreWindow(odin_weights.window)

    def _set_signature_columns_if_needed(self):
        if self._signature_columns is None:
            self._signature_columns = ["chosen_ids", "rejected_ids", "margin", "chosen_words", "rejected_words"]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        chosen_words, rejected_words = inputs.pop("chosen_words"), inputs.pop("rejected_words")
        margin = inputs.pop("margin", None)
        outputs = model(**inputs, use_cache=False)
        chosen, rejected = torch.chunk(outputs.logits, chunks=2)  # (B, 2) each: [quality, length]
        train = mode == "train"
        past = self._window.past if train else None
        loss, parts = odin_loss(
            chosen, rejected, chosen_words, rejected_words, self._head_weight, self.odin_weights, margin, past
        )
        if train:  # every rank's stories of this step join the window (detached)
            scores = torch.cat([chosen, rejected]).detach()
            words = torch.cat([chosen_words, rejected_words]).to(scores.device)
            if self.accelerator.num_processes > 1:  # batches may differ in size across ranks: gather as objects
                from accelerate.utils import gather_object

                every = gather_object([(scores.cpu(), words.cpu())])
                scores, words = torch.cat([s for s, _ in every]), torch.cat([w for _, w in every])
            self._window.add(scores, words)
        with torch.no_grad():
            total_c, total_r = chosen.sum(-1), rejected.sum(-1)
            self._metrics[mode]["accuracy"].append((total_c > total_r).float().mean().item())
            self._metrics[mode]["quality_accuracy"].append((chosen[:, 0] > rejected[:, 0]).float().mean().item())
            self._metrics[mode]["margin"].append((total_c - total_r).mean().item())
            for name, value in parts.items():
                self._metrics[mode][f"odin/{name}"].append(value.item())
        return (loss, outputs) if return_outputs else loss
