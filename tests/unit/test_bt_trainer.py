"""rlcw.rm.bt_trainer: a BT batch run in length buckets gives the padded batch's scores and gradients to float
rounding, in batch order; frozen linears held in bf16 give autocast's products and come back as they were."""

from __future__ import annotations

import pytest
import torch

from rlcw.rm.bt_trainer import bf16_frozen_linears, bucketed_logits, right_padded

PAD = 0


@pytest.fixture
def rm():
    """A tiny Llama sequence-classification RM with LoRA on q/v and a trainable score head."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForSequenceClassification

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_labels=1, pad_token_id=PAD,
    )  # fmt: skip
    lora = LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    model = get_peft_model(LlamaForSequenceClassification(config), lora)
    for name, p in model.named_parameters():  # LoRA B starts at zero: make the adapter matter
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)
    return model.train()


def batch(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (B, max) ids and mask, ids drawn from 1.. so no real token is the pad."""
    g = torch.Generator().manual_seed(1)
    ids = torch.full((len(lengths), max(lengths)), PAD)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, :n], mask[i, :n] = torch.randint(1, 64, (n,), generator=g), 1
    return ids, mask


def widths(model) -> list[int]:
    """The widths of the forwards the model runs (filled as it runs)."""
    seen: list[int] = []
    model.get_base_model().register_forward_pre_hook(
        lambda m, a, kw: seen.append(kw["input_ids"].size(1)), with_kwargs=True
    )
    return seen


def bt_loss_and_grads(model, logits) -> tuple[float, dict]:
    chosen, rejected = torch.chunk(logits.squeeze(-1), 2)
    loss = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
    model.zero_grad()
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_buckets_give_the_padded_batch_scores_and_gradients(rm):
    lengths = [5, 30, 7, 28, 6, 31, 29, 8]  # chosen 4, then rejected 4: short and long rows mixed
    ids, mask = batch(lengths)
    seen = widths(rm)
    padded = rm(input_ids=ids, attention_mask=mask).logits
    loss, grads = bt_loss_and_grads(rm, padded)
    bucketed = bucketed_logits(rm, ids, mask, 0.1)
    loss_b, grads_b = bt_loss_and_grads(rm, bucketed)
    assert seen[0] == 31 and sorted(seen[1:]) == [6, 8, 31]  # the short rows ran apart, at their own widths
    assert bucketed.shape == padded.shape == (8, 1)
    torch.testing.assert_close(bucketed, padded, rtol=1e-5, atol=1e-5)  # batch order kept
    assert loss_b == pytest.approx(loss, abs=1e-6)
    assert grads_b.keys() == grads.keys() and any("lora_A" in n for n in grads)
    for name, g in grads.items():
        torch.testing.assert_close(grads_b[name], g, rtol=1e-4, atol=1e-6)


def test_a_batch_that_is_not_right_padded_runs_as_it_is(rm):
    ids, mask = batch([5, 30, 7, 28])
    left_ids, left_mask = ids.flip(1), mask.flip(1)
    assert right_padded(mask) and not right_padded(left_mask)
    seen = widths(rm)
    bucketed_logits(rm, left_ids, left_mask, 0.1)
    ids_even, mask_even = batch([30, 30, 29, 30])  # one bucket of the full width: the plain forward
    bucketed_logits(rm, ids_even, mask_even, 0.1)
    assert seen == [30, 30]


def test_frozen_linears_held_in_bf16_give_autocast_products_and_come_back(rm):
    ids, mask = batch([5, 30, 7, 28])
    frozen = {n: p for n, p in rm.named_parameters() if not p.requires_grad and "_proj" in n and "lora" not in n}
    before = {n: p.detach().clone() for n, p in frozen.items()}
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        autocast = rm(input_ids=ids, attention_mask=mask).logits
        with bf16_frozen_linears(rm) as held:
            assert held == 15  # 7 projections x 2 layers (q/v: LoRA's base layers) + PEFT's unused original score
            assert all(p.dtype == torch.bfloat16 for p in frozen.values())
            assert all(p.dtype == torch.float32 for p in rm.parameters() if p.requires_grad)
            held_out = rm(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(held_out, autocast)
    for name, p in frozen.items():
        assert p.dtype == torch.float32 and torch.equal(p, before[name])
