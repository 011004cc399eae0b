"""TRL's RewardTrainer whose training forward runs a batch's sequences in length buckets.

    trainer = BucketedRewardTrainer(model=..., args=RewardConfig(...), ...)   # as TRL's RewardTrainer
    logits = bucketed_logits(model, input_ids, attention_mask, max_padding=0.1)   # (2B, 1), batch order
    with bf16_frozen_linears(model): ...                                          # frozen linears in bf16

TRL's collator pads a batch's 2B sequences (chosen, then rejected) to the longest of them, and on a CPU every
padded position costs as much as a real one. `bucketed_logits` sorts the rows by length, cuts them into buckets
where padding would pass `max_padding` of the real tokens (`rlcw.rm.scoring.length_batches`, the scorer's own
batching), runs each bucket trimmed to its longest row and puts the scores back in batch order; the loss, its
metrics and everything else stay TRL's. The rows are right-padded and attention is causal, so trimming trailing
padding changes no real position: each score is the one of the padded batch up to float rounding (other matmul
shapes). Evaluation runs TRL's forward as it is. Not for the ODIN two-head trainer or the joint ensemble, which
have their own losses.

With the trainer's bf16 flag on a CPU (train-rm's `train.cpu_precision`), the frozen linear weights are held in bf16
for the whole training (`bf16_frozen_linears`): the products bf16 autocast computes, without casting every weight
again on every forward; the fp32 weights come back before anything is merged or saved.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch
from transformers.modeling_outputs import SequenceClassifierOutputWithPast
from trl import RewardTrainer

from rlcw.rm.scoring import length_batches


def right_padded(attention_mask: torch.Tensor) -> bool:
    """True when every row's mask is ones then zeros (B, T)."""
    lengths = attention_mask.sum(1, keepdim=True)
    return bool((attention_mask == (torch.arange(attention_mask.size(1)) < lengths).to(attention_mask)).all())


def bucketed_logits(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_padding: float, **kwargs
) -> torch.Tensor:
    """The model's (N, H) logits of right-padded (N, T) rows, run in length buckets (module docstring); a batch
    that is not right-padded, or needs one bucket of its full width anyway, runs as it is."""
    lengths = attention_mask.sum(1).tolist()
    buckets = length_batches(lengths, len(lengths), None, max_padding)
    if (len(buckets) == 1 and max(lengths) == input_ids.size(1)) or not right_padded(attention_mask.cpu()):
        return model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).logits
    parts, order = [], []
    for idx in buckets:
        rows, width = torch.tensor(idx, device=input_ids.device), max(lengths[i] for i in idx)
        ids, mask = input_ids[rows, :width], attention_mask[rows, :width]
        parts.append(model(input_ids=ids, attention_mask=mask, **kwargs).logits)
        order += idx
    inverse = torch.empty(len(order), dtype=torch.long, device=input_ids.device)
    inverse[torch.tensor(order, device=input_ids.device)] = torch.arange(len(order), device=input_ids.device)
    return torch.cat(parts)[inverse]


class _Bucketed:
    """A model called as TRL's compute_loss calls it (`model(**inputs)`), running `bucketed_logits`."""

    def __init__(self, model, max_padding: float):
        self.model, self.max_padding = model, max_padding

    def __call__(self, input_ids, attention_mask, **kwargs):
        logits = bucketed_logits(self.model, input_ids, attention_mask, self.max_padding, **kwargs)
        return SequenceClassifierOutputWithPast(logits=logits)


@contextmanager
def bf16_frozen_linears(model):
    """Every frozen fp32 `nn.Linear` weight of `model` held in bf16 inside the block, its fp32 tensor put back after
    (a merge or a save sees the weights it had). Under CPU bf16 autocast a linear casts its fp32 weight to bf16 on
    every call, streaming the whole model twice a forward; a weight already bf16 gives the same product without
    the copy. Trainable weights (LoRA, the score head) stay fp32 and are cast per call, as autocast does."""
    held = []
    for module in model.modules():
        w = getattr(module, "weight", None)
        if isinstance(module, torch.nn.Linear) and w is not None and not w.requires_grad and w.dtype == torch.float32:
            held.append((w, w.data))
            w.data = w.data.to(torch.bfloat16)
    try:
        yield len(held)
    finally:
        for w, data in held:
            w.data = data


class BucketedRewardTrainer(RewardTrainer):
    """TRL's RewardTrainer; in training each batch's forward is `bucketed_logits` at `max_padding` (None: TRL's
    padded forward), and with the bf16 flag on a CPU the frozen linears are held in bf16 (`bf16_frozen_linears`)."""

    max_padding: float | None = 0.1

    def train(self, *args, **kwargs):
        bf16_on_cpu = self.args.bf16 and self.args.use_cpu
        with bf16_frozen_linears(self.model) if bf16_on_cpu else nullcontext():
            return super().train(*args, **kwargs)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.max_padding is not None and model.training:
            model = _Bucketed(model, self.max_padding)
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def cpu_bf16(cpu_precision: str, hf_bf16: bool, bucketed: bool) -> bool:
    """Whether a BT training step autocasts to bf16 on this CPU (train-rm's `train.cpu_precision`; `hf_bf16`, its
    `train.bf16`, decides instead when set, as it does on a GPU), said in the log with whether the batches run in
    length buckets."""
    from rlcw.cpu_isa import cpu_autocast

    return cpu_autocast(
        cpu_precision, hf_bf16, "train-rm", extra=", batches run in length buckets" if bucketed else ""
    )
