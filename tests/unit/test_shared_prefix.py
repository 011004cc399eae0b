"""The GRPO loss forward with each group's prompt run once equals TRL's forward of every full row:
log-probs, entropies and the LoRA gradients, on left-padded prompts of different lengths, right-padded
completions, groups interleaved in the batch, and a completion masked whole; through rlcw's LM head
(rlcw.rl.fused_logprobs, the CPU default) and through TRL's fused one."""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

PAD, EOS, VOCAB = 0, 1, 64
TEMP = 0.9  # the temperature of TRL's fused head on the policy, and of the shared-prefix call


def policy(seed: int = 0):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM
    from trl.trainer.grpo_trainer import add_fused_lm_head

    from rlcw.models import tiny_llama_config

    torch.manual_seed(seed)
    cfg = tiny_llama_config(
        VOCAB,
        num_hidden_layers=3,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    model = LlamaForCausalLM(cfg)
    add_fused_lm_head(model, temperature=TEMP, outputs=("log_probs", "entropy"))
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], layers_to_transform=[1, 2])
    model = get_peft_model(model, lora)
    for name, p in model.named_parameters():  # LoRA B starts at zero: give the adapter an effect to differentiate
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    return model


def batch():
    """Two prompts (5 and 3 tokens, left-padded to 5), 3 completions each, interleaved, right-padded to 6;
    row 4's completion masked whole (as TRL's mask_truncated_completions does)."""
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(2, VOCAB, (5,), generator=g), torch.randint(2, VOCAB, (3,), generator=g)]
    lengths = [6, 2, 4, 6, 3, 1]
    rows, masks = [], []
    for i, n in enumerate(lengths):
        p = prompts[i % 2]
        comp = torch.randint(2, VOCAB, (6,), generator=g)
        comp[n:] = PAD
        if n < 6:
            comp[n - 1] = EOS
        rows.append(torch.cat([torch.full((5 - len(p),), PAD), p, comp]))
        masks.append(torch.cat([torch.zeros(5 - len(p)), torch.ones(len(p)), (torch.arange(6) < n).float()]))
    mask = torch.stack(masks).long()
    mask[4, 5:] = 0
    return torch.stack(rows), mask


def trl_path(model, ids, mask, keep):
    from trl import GRPOTrainer

    fake = SimpleNamespace(accelerator=SimpleNamespace(autocast=nullcontext, is_main_process=True))
    return GRPOTrainer._get_per_token_logps_and_entropies(fake, model, ids, mask, keep, compute_entropy=True)[:2]


def lora_grads(model, logps, mask):
    model.zero_grad()
    (logps * mask).sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("own_head", [True, False])
def test_equals_trl_forward_and_gradients(own_head):
    from rlcw.rl.grpo.shared_prefix import shared_prefix_logps

    model, (ids, mask) = policy(), batch()
    cmask = mask[:, 5:].float()
    ref_lp, ref_ent = trl_path(model, ids, mask, 6)
    ref_grads = lora_grads(model, ref_lp, cmask)
    lp, ent = shared_prefix_logps(model, ids, mask, 6, TEMP, compute_entropy=True, own_head=own_head)
    assert lp.shape == ref_lp.shape == (6, 6)
    torch.testing.assert_close(lp * cmask, ref_lp * cmask, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent * cmask, ref_ent * cmask, atol=1e-5, rtol=1e-5)
    assert (lp[cmask == 0] == 0).all()  # TRL's convention: zero where the completion is masked
    grads = lora_grads(model, lp, cmask)
    assert ref_grads.keys() == grads.keys() and ref_grads
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], atol=1e-5, rtol=1e-4, msg=name)
    assert any(g.abs().sum() > 0 for g in grads.values())


def test_adapter_disabled_is_the_start_model():
    """The KL to the start runs the same path with the LoRA adapter off."""
    from rlcw.rl.grpo.shared_prefix import shared_prefix_logps

    model, (ids, mask) = policy(), batch()
    cmask = mask[:, 5:].float()
    with torch.no_grad(), model.disable_adapter():
        ref_lp, _ = trl_path(model, ids, mask, 6)
        lp, ent = shared_prefix_logps(model, ids, mask, 6, TEMP)
        assert ent is None
        torch.testing.assert_close(lp * cmask, ref_lp * cmask, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        on, _ = trl_path(model, ids, mask, 6)
    assert (on - ref_lp).abs().max() > 1e-3  # the adapter does change the log-probs: the comparison has teeth


@pytest.mark.parametrize("case", ["unique", "empty_prompt"])
def test_falls_back_where_nothing_is_shared(case):
    from rlcw.rl.grpo.shared_prefix import shared_prefix_logps

    model, (ids, mask) = policy(), batch()
    if case == "unique":
        ids, mask = ids[:2], mask[:2]  # one row per prompt
    else:
        mask = mask.clone()
        mask[:, :5] = 0
    with torch.no_grad():
        assert shared_prefix_logps(model, ids, mask, 6, TEMP) is None


def test_lm_head_choice_auto_takes_rlcws_head_on_cpu_for_a_plain_head():
    from rlcw.rl.grpo.shared_prefix import resolve_lm_head

    model = policy()
    cpu = torch.device("cpu")
    assert resolve_lm_head("auto", model, cpu)[0]
    assert not resolve_lm_head("auto", model, torch.device("cuda"))[0]  # TRL's Triton kernels there
    assert not resolve_lm_head("trl", model, cpu)[0]
    assert resolve_lm_head("rlcw", model, torch.device("cuda"))[0]  # asked for: taken
    model.get_base_model().config.final_logit_softcapping = 30.0  # a transform only TRL's head applies
    own, why = resolve_lm_head("auto", model, cpu)
    assert not own and "logit transform" in why


def test_groups_keep_first_seen_order():
    from rlcw.rl.grpo.shared_prefix import prompt_groups

    ids = torch.tensor([[0, 7, 8], [5, 7, 8], [0, 7, 8], [5, 7, 8]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1]])
    groups = prompt_groups(ids, mask)
    assert [rows for rows, _ in groups] == [[0, 2], [1, 3]]
    assert [p.tolist() for _, p in groups] == [[7, 8], [5, 7, 8]]


def test_end_logprobs_equal_a_plain_forward_with_their_gradients():
    """`end_ids`: the third output is log sum_e p(e) at every completion position, as log_softmax of the full
    rows' logits reads it, and its LoRA gradients match; the log-probs stay what they were."""
    from rlcw.rl.grpo.shared_prefix import shared_prefix_logps

    model, (ids, mask) = policy(), batch()
    cmask = mask[:, 5:].float()
    ends = [EOS, 7]
    base = model.get_base_model()
    hidden = base.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, 4:-1]  # positions predicting 5..
    logp = torch.log_softmax(hidden @ base.lm_head.weight.T / TEMP, -1)  # (B, 6, V)
    want = torch.logsumexp(logp[..., ends], -1)
    ref_grads = lora_grads(model, want, cmask)
    lp, _, end = shared_prefix_logps(model, ids, mask, 6, TEMP, own_head=True, end_ids=ends)
    torch.testing.assert_close(end * cmask, want.detach() * cmask, atol=1e-5, rtol=1e-5)
    assert (end[cmask == 0] == 0).all()
    grads = lora_grads(model, end, cmask)
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], atol=1e-5, rtol=1e-4, msg=name)
    plain, _ = shared_prefix_logps(model, ids, mask, 6, TEMP, own_head=True)
    torch.testing.assert_close(lp.detach(), plain.detach())
    with pytest.raises(ValueError, match="rlcw's LM head"):
        shared_prefix_logps(model, ids, mask, 6, TEMP, own_head=False, end_ids=ends)
