"""The GenRM training loop: a transformers Trainer whose loss covers only the verdict/rationale tokens.

    trainer = GenRMTrainer(model, args, train_dataset, tokenizer, peft_config=None, callbacks=[...])
    trainer.train(resume_from_checkpoint=None)

Examples are `{"input_ids", "labels"}` rows (labels -100 outside the answer) from
`rlcw.rm.render.encode_genrm_example`. They are left-padded (`collate_left`) so every answer
ends at the last column, and `answer_loss` applies the full-vocabulary LM head to the answer span
only (TRL's SFTTrainer runs it on every position: much slower per step on CPU). Checkpoints, resume, DeepSpeed and logging are the Trainer's own.

transformers / peft symbols this module relies on (checked against transformers 5.23.0, peft 0.21;
tests/unit/test_genrm_trainer.py imports each so an upgrade that removes one fails loudly):
- `transformers.Trainer`: constructor keywords `model`, `args`, `train_dataset`, `processing_class`,
  `data_collator`, `callbacks`; the overridden hook `compute_loss(model, inputs, return_outputs,
  num_items_in_batch)`; the class attribute `loss_is_scaled_for_ga` (False: the loss is a
  per-micro-batch mean and the Trainer divides it by gradient_accumulation_steps).
- `transformers.TrainingArguments` (built by the caller, passed as `args`).
- the model's forward keywords `input_ids`, `attention_mask`, `position_ids`, `logits_to_keep`
  (transformers causal LMs, e.g. `LlamaForCausalLM`).
- `peft.get_peft_model` (only when a `peft_config` is given).
No TRL symbol is used.
"""

from __future__ import annotations

import torch
from transformers import Trainer


def collate_left(rows: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Left-pad GenRM examples so every answer ends at the last column; positions count real tokens only."""
    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        ids[i, width - n :], labels[i, width - n :], mask[i, width - n :] = (
            torch.tensor(r["input_ids"]),
            torch.tensor(r["labels"]),
            1,
        )
    return {
        "input_ids": ids,
        "labels": labels,
        "attention_mask": mask,
        "position_ids": (mask.cumsum(1) - 1).clamp(min=0),
    }


def answer_loss(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean next-token NLL over the answer tokens, with the LM head applied to the answer span only.

    Left padding puts every answer at the end, so `logits_to_keep` skips the full-vocabulary head
    on the (long) prompt: TRL's SFT head runs it on every position, several times the cost on CPU."""
    labels = batch["labels"]  # (B, T), -100 outside the answers
    answer_cols = (labels != -100).any(0).nonzero()
    keep = labels.shape[1] - int(answer_cols[0]) + 1  # the answer span plus the position that predicts its first token
    logits = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        logits_to_keep=keep,
    ).logits  # (B, keep, V)
    target = labels[:, -keep + 1 :]  # (B, keep - 1)
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), target.flatten(), ignore_index=-100)


class GenRMTrainer(Trainer):
    """A transformers Trainer whose loss is `answer_loss` on left-padded GenRM examples.

    Args: model (a causal LM; wrapped by peft when `peft_config` is given), args (TrainingArguments,
    with `remove_unused_columns=False` so `labels` reach the collator), train_dataset (rows of
    `input_ids` and `labels`), tokenizer (its `pad_token_id` pads), peft_config (a peft LoraConfig or
    None), callbacks (TrainerCallbacks)."""

    loss_is_scaled_for_ga = False  # a per-micro-batch mean: the Trainer divides by grad_accum

    def __init__(self, model, args, train_dataset, tokenizer, peft_config=None, callbacks=None):
        if peft_config is not None:
            from peft import get_peft_model

            model = get_peft_model(model, peft_config)
        pad_id = tokenizer.pad_token_id
        super().__init__(
            model=model,
            args=args,
            train_dataset=train_dataset,
            processing_class=tokenizer,
            data_collator=lambda rows: collate_left(rows, pad_id),
            callbacks=callbacks,
        )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = answer_loss(model, inputs)
        return (loss, None) if return_outputs else loss
