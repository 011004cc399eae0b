"""GenRMTrainer: the transformers/peft symbols it relies on still exist, and its loss by hand."""

import inspect

import pytest
import torch


def test_every_symbol_the_genrm_trainer_relies_on_exists():
    import peft
    import transformers
    from transformers import Trainer, TrainingArguments  # noqa: F401

    assert transformers.__version__.startswith("5."), "GenRMTrainer was checked against transformers 5.23"
    assert callable(peft.get_peft_model)
    params = inspect.signature(Trainer.__init__).parameters
    for name in ("model", "args", "train_dataset", "processing_class", "data_collator", "callbacks"):
        assert name in params, f"Trainer.__init__ lost '{name}'"
    assert list(inspect.signature(Trainer.compute_loss).parameters) == [
        "self",
        "model",
        "inputs",
        "return_outputs",
        "num_items_in_batch",
    ]
    assert hasattr(Trainer, "loss_is_scaled_for_ga")
    forward = inspect.signature(transformers.LlamaForCausalLM.forward).parameters
    assert {"input_ids", "attention_mask", "position_ids", "logits_to_keep"} <= set(forward)


def test_collate_left_pads_on_the_left_and_counts_positions():
    from rlcw.rm.genrm_trainer import collate_left

    out = collate_left([{"input_ids": [5, 6, 7], "labels": [-100, -100, 7]}, {"input_ids": [8], "labels": [8]}], 0)
    assert out["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
    assert out["labels"].tolist() == [[-100, -100, 7], [-100, -100, 8]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert out["position_ids"].tolist() == [[0, 1, 2], [0, 0, 0]]


class _Uniform(torch.nn.Module):
    """Logits that give every token the same probability over a vocabulary of 4, for any kept span."""

    def forward(self, input_ids, attention_mask, position_ids, logits_to_keep):
        self.kept = logits_to_keep
        return type("Out", (), {"logits": torch.zeros(input_ids.shape[0], logits_to_keep, 4)})()


def test_answer_loss_is_ln_vocab_for_uniform_logits_and_keeps_only_the_answer_span():
    from rlcw.rm.genrm_trainer import answer_loss, collate_left

    model = _Uniform()
    batch = collate_left([{"input_ids": [1, 2, 3, 1], "labels": [-100, -100, 3, 1]}], 0)
    assert answer_loss(model, batch).item() == pytest.approx(torch.log(torch.tensor(4.0)).item())
    assert model.kept == 3  # 2 answer tokens + the position predicting the first
