"""KL per story on sampled ids with EOS: hand-worked estimator sums, and a tiny Llama for the model side."""

from __future__ import annotations

import math

import pytest
import torch

from rlcw.measure.kl import check_full_distribution, cut_after_eos, kl_per_story, kl_to_reference, sampled_logprobs

EOS, PAD = 2, 2  # SmolLM-like: the pad id is the EOS id


def test_kl_per_story_by_hand():
    # row 0: log-ratios r = 0.5, -1, 0; row 1: r = 1 then padding (garbage that the mask must drop)
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, 5.0, 5.0]])
    ref = torch.tensor([[-1.5, -1.0, -0.5], [-2.0, -5.0, -5.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert kl_per_story(logp, ref, mask, "k1").tolist() == pytest.approx([-0.5, 1.0])
    # k3 = exp(-r) - 1 + r: (e^-0.5 - 0.5) + (e - 2) + 0 = 0.10653 + 0.71828 = 0.82481; e^-1 = 0.36788
    k3 = kl_per_story(logp, ref, mask, "k3")
    assert k3.tolist() == pytest.approx([math.exp(-0.5) - 0.5 + math.e - 2, math.exp(-1)])
    assert k3.tolist() == pytest.approx([0.824812, 0.367879], abs=1e-6)
    with pytest.raises(ValueError):
        kl_per_story(logp, ref, mask, "k2")


def test_cut_after_eos_keeps_the_eos_and_drops_padding_that_looks_like_it():
    assert cut_after_eos([7, 8, EOS, PAD, PAD], [EOS]) == [7, 8, EOS]
    assert cut_after_eos([EOS, PAD], [EOS]) == [EOS]
    assert cut_after_eos([7, 8], [EOS]) == [7, 8]


def test_truncated_samplers_are_refused():
    check_full_distribution(1.0, 0, 1.0)
    for bad in ({"top_k": 50}, {"top_k": None}, {"top_p": 0.9}, {"temperature": 0.0}):
        kw = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, **bad}
        with pytest.raises(ValueError):
            check_full_distribution(**kw)


def _tiny(seed: int):
    from transformers import LlamaForCausalLM

    from rlcw.models import tiny_llama_config

    torch.manual_seed(seed)
    cfg = tiny_llama_config(
        16,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def models():
    return _tiny(0), _tiny(1)


def _next_logp(model, prompt: list[int], temperature: float = 1.0) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1] / temperature, -1)


def test_a_story_of_only_eos_has_nonzero_kl(models):
    policy, reference = models
    prompt = [3, 4, 5]
    lp, lq = _next_logp(policy, prompt)[EOS].item(), _next_logp(reference, prompt)[EOS].item()
    assert lp != pytest.approx(lq, abs=1e-3)  # the two tiny models differ at EOS
    k1 = kl_to_reference(policy, reference, [prompt], [[EOS]], pad_id=PAD, estimator="k1")
    k3 = kl_to_reference(policy, reference, [prompt], [[EOS]], pad_id=PAD, estimator="k3")
    r = lp - lq
    assert k1.tolist() == pytest.approx([r], abs=1e-5)
    assert k3.tolist() == pytest.approx([math.exp(-r) - 1 + r], abs=1e-5) and k3.item() > 0
    assert kl_to_reference(policy, policy, [prompt], [[EOS]], pad_id=PAD).tolist() == pytest.approx([0.0], abs=1e-6)


def test_padded_batch_matches_one_story_at_a_time(models):
    policy, _ = models
    prompts, completions = [[3, 4, 5], [6, 7]], [[8, 9, EOS], [EOS]]
    logp, mask = sampled_logprobs(policy, prompts, completions, pad_id=PAD)
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        by_hand = [_next_logp(policy, p + c[:t])[c[t]].item() for t in range(len(c))]
        assert logp[i, : len(c)].tolist() == pytest.approx(by_hand, abs=1e-5)
    assert logp[1, 1:].tolist() == [0.0, 0.0]


def test_temperature_scales_the_logits_the_samples_came_from(models):
    policy, _ = models
    logp, _ = sampled_logprobs(policy, [[3, 4, 5]], [[9]], pad_id=PAD, temperature=2.0)
    assert logp[0, 0].item() == pytest.approx(_next_logp(policy, [3, 4, 5], 2.0)[9].item(), abs=1e-5)
    assert logp[0, 0].item() != pytest.approx(_next_logp(policy, [3, 4, 5])[9].item(), abs=1e-3)
    with pytest.raises(ValueError, match="top_k"):
        sampled_logprobs(policy, [[3]], [[9]], pad_id=PAD, top_k=50)
    with pytest.raises(ValueError, match="empty"):
        sampled_logprobs(policy, [[3]], [[]], pad_id=PAD)
