"""A Bradley-Terry reward model as a scorer and as a TRL reward function.

    scorer = BTScorer("runs/qs/rm/model")
    scorer.score(["prompt"], ["story"])                 # -> [float]
    GRPOTrainer(reward_funcs=[scorer], ...)            # (prompts, completions, **kw) -> list[float]

Scores use `encode_for_rm` (the RM folder's own rendering) and length-bucketed batches.
A failure raises: a reward function never returns a silent default.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rlcw.errors import RlcwError
from rlcw.rewards.render import encode_for_rm, load_spec


def message_text(value) -> str:
    """Plain text of a TRL prompt/completion (string, or a list of chat messages)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and isinstance(value[0], dict):
        users = [m["content"] for m in value if m.get("role") == "user"]
        if users and value[-1].get("role") != "assistant":
            return users[-1]
        return value[-1]["content"]
    raise TypeError(f"cannot read text from {type(value).__name__}")


def pad_batch(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token lists into (B, T) ids and attention mask."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


class BTScorer:
    """Scores (prompt, story) pairs with a BT reward model folder written by `rlcw train-rm`."""

    def __init__(self, rm_dir: str | Path, batch_size: int = 16, device: str | None = None, model=None, tokenizer=None):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.rm_dir = Path(rm_dir)
        self.spec = load_spec(self.rm_dir)
        if self.spec.type != "bt":
            raise RlcwError(f"expected a bt reward model, this one is '{self.spec.type}'", where=str(self.rm_dir))
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(self.rm_dir)
        self.model = model or AutoModelForSequenceClassification.from_pretrained(self.rm_dir)
        self.device = device or next(self.model.parameters()).device
        self.model.to(self.device).eval()
        self.batch_size = batch_size
        self.__name__ = f"rm_{self.rm_dir.parent.name or self.rm_dir.name}"

    @torch.no_grad()
    def score(self, prompts: list[str], stories: list[str]) -> list[float]:
        encoded = encode_for_rm(self.spec, self.tokenizer, prompts, stories)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))  # length buckets: little padding
        scores = [0.0] * len(encoded)
        pad_id = self.tokenizer.pad_token_id
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            ids, mask = pad_batch([encoded[i] for i in idx], pad_id)
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits  # (B, 1)
            values = logits.squeeze(-1).float().cpu().tolist()
            for i, v in zip(idx, values):
                if v != v:  # NaN
                    raise RlcwError("reward model returned NaN", where=str(self.rm_dir))
                scores[i] = v
        return scores

    def __call__(self, prompts, completions, **kwargs) -> list[float]:
        return self.score([message_text(p) for p in prompts], [message_text(c) for c in completions])
