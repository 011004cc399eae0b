"""The PPO value model: a transformer backbone + a linear head giving one value per token.

    value = load_value_model("runs/train_rm/model", lora=LoraConfig(...))   # start from the RM
    value(input_ids, attention_mask, position_ids)                          # (B, T) floats

Both starts load a folder as `AutoModelForSequenceClassification` and split it into the
backbone (`model.<base_model_prefix>`) and the `score` head (hidden -> 1):
- from a BT reward model (`rlcw train-rm`'s `<run>/model`): the head already reads "how good is
  this story" from a hidden state, so per-token values start as the RM's opinion of each prefix
  (its reading at the last token is exactly the RM score). This is the default. A two-head RM
  (`rm.length_head=true`) gives its quality head.
- from the policy's base model: same backbone as the policy, a fresh head (values near 0).

Training the backbone: LoRA (default; `lora=None` freezes it and trains only the head, cheaper
but the RM's features were never asked to predict prefix values). The value model shares no
weights with the policy (a separate model, as in InstructGPT-style PPO); it must share its
vocabulary, since it reads the policy's token ids directly.
Only trainable tensors (LoRA + head) are checkpointed: `save_trainable` / `load_trainable`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from rlcw.errors import RlcwError
from rlcw.training_state import trainable_state


class ValueModel(nn.Module):
    """backbone (B, T) -> hidden (B, T, H) -> head -> values (B, T)."""

    def __init__(self, backbone: nn.Module, head: nn.Linear):
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, input_ids, attention_mask=None, position_ids=None) -> torch.Tensor:
        hidden = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
        ).last_hidden_state
        return self.head(hidden).squeeze(-1).float()  # (B, T)


def load_value_model(
    source: str, *, lora=None, dtype: torch.dtype = torch.float32, vocab_size: int | None = None
) -> ValueModel:
    """A value model from a sequence-classification folder (RM) or a causal LM folder (fresh head).

    `lora`: a peft LoraConfig for the backbone (task type is set here), or None to freeze it."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    labels = list(AutoConfig.from_pretrained(source).id2label.values())
    two_head = "quality" in labels  # a length-disentangled RM: start from its quality head
    seqcls = AutoModelForSequenceClassification.from_pretrained(
        source, dtype=dtype, **({} if two_head else {"num_labels": 1})
    )
    if two_head and isinstance(getattr(seqcls, "score", None), nn.Linear):
        row = seqcls.score.weight.data[labels.index("quality")]  # (hidden,)
        seqcls.score = nn.Linear(row.numel(), 1, bias=False, dtype=row.dtype)
        seqcls.score.weight.data.copy_(row[None])
    head = getattr(seqcls, "score", None)
    if not isinstance(head, nn.Linear) or head.out_features != 1:
        raise RlcwError(
            f"cannot read a value head from {type(seqcls).__name__}: expected a `score` Linear with one output",
            where=source,
            hint="use a decoder reward model (Llama/Qwen/Mistral style) or value.init=policy",
        )
    emb = seqcls.get_input_embeddings().num_embeddings
    if vocab_size is not None and emb < vocab_size:
        raise RlcwError(
            f"value model vocabulary ({emb}) is smaller than the policy's ({vocab_size})",
            where=source,
            hint="start the value model from an RM trained on the policy's base (or value.init=policy)",
        )
    seqcls.requires_grad_(False)
    if lora is not None:  # injected into the whole model: layer indices resolve as `model.layers.N`
        from peft import inject_adapter_in_model

        lora.task_type = None
        inject_adapter_in_model(lora, seqcls)
        for name, param in seqcls.named_parameters():
            param.requires_grad_("lora_" in name)
    head.requires_grad_(True)
    return ValueModel(getattr(seqcls, seqcls.base_model_prefix), head)


def save_trainable(model: nn.Module, path: Path) -> Path:
    """The trainable tensors (LoRA + head) as safetensors."""
    from safetensors.torch import save_file

    save_file(trainable_state(model), str(path))
    return path


def load_trainable(model: nn.Module, path: Path) -> None:
    """Load what `save_trainable` wrote; every trainable tensor must be present."""
    from safetensors.torch import load_file

    state = load_file(str(path))
    expected = {n for n, p in model.named_parameters() if p.requires_grad}
    missing = sorted(expected - set(state))
    if missing:
        raise RlcwError(
            f"value checkpoint lacks {len(missing)} tensors (first: {missing[0]})",
            where=str(path),
            hint="resume with the same value.* and lora settings as the run that wrote it",
        )
    model.load_state_dict(state, strict=False)
