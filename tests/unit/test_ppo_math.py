"""rlcw.rl.ppo.maths with hand-worked numbers (the arithmetic is in the comments)."""

import math

import pytest
import torch

from rlcw.rl.ppo.maths import (
    explained_variance,
    fill_missing_scores,
    gae,
    last_token_index,
    masked_mean,
    policy_loss,
    token_rewards,
    value_loss,
    whiten,
)
from rlcw.sampling import entropy_from_logits, kl_per_token, logprobs_from_logits

T = torch.tensor


def close(a, b, tol=1e-5):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), atol=tol)


def test_masked_mean_ignores_padding():
    # (1 + 2 + 3) / 3 = 2; the 100 is padding
    assert close(masked_mean(T([1.0, 2.0, 3.0, 100.0]), T([1, 1, 1, 0])), 2.0)


def test_whiten_masked():
    # mean 2, unbiased var ((1-2)^2 + 0 + (3-2)^2) / (3-1) = 1 -> (x-2)/1 = [-1, 0, 1]; pad -> 0
    x, m = T([1.0, 2.0, 3.0, 100.0]), T([1, 1, 1, 0])
    assert close(whiten(x, m), [-1.0, 0.0, 1.0, 0.0], 1e-4)
    # shift_mean=False adds the mean back: [1, 2, 3], pad still 0
    assert close(whiten(x, m, shift_mean=False), [1.0, 2.0, 3.0, 0.0], 1e-4)


def test_last_token_index():
    # row 0: real tokens at 0,1 -> 1; row 1: all real -> 2; row 2: only token 0 -> 0
    assert last_token_index(T([[1, 1, 0], [1, 1, 1], [1, 0, 0]])).tolist() == [1, 2, 0]


def test_token_rewards_put_score_on_last_real_token():
    scores = T([2.0, -1.0])
    kl = T([[0.1, 0.2, 0.3], [0.5, -0.5, 0.4]])
    mask = T([[1, 1, 0], [1, 1, 1]])
    # row 0: -0.5*0.1 = -0.05; last real token is t=1: -0.5*0.2 + 2.0 = 1.9; t=2 is padding -> 0
    # row 1: -0.5*0.5 = -0.25; -0.5*(-0.5) = +0.25; last token t=2: -0.5*0.4 - 1.0 = -1.2
    out = token_rewards(scores, kl, mask, kl_coef=0.5)
    assert close(out, [[-0.05, 1.9, 0.0], [-0.25, 0.25, -1.2]])


def test_kl_estimators():
    # p = 0.5, q = 0.25: k1 = ln(0.5/0.25) = ln 2 = 0.693147
    # k3 = (q/p - 1) - ln(q/p) = (0.5 - 1) - ln 0.5 = -0.5 + 0.693147 = 0.193147
    logp, ref = T([math.log(0.5)]), T([math.log(0.25)])
    assert close(kl_per_token(logp, ref, "k1"), [0.693147])
    assert close(kl_per_token(logp, ref, "k3"), [0.193147])
    # identical distributions: both 0
    assert close(kl_per_token(ref, ref, "k3"), [0.0])
    with pytest.raises(ValueError, match="k2"):
        kl_per_token(logp, ref, "k2")


def test_gae_with_padding_and_discount():
    rewards = T([[0.0, 2.0, 7.0]])  # 7.0 sits on padding: ignored
    values = T([[0.5, 1.0, 9.0]])  # 9.0 sits on padding: ignored (V after the end = 0)
    mask = T([[1, 1, 0]])
    # gamma=1, lam=0.5:
    # t=1 (last real): delta = 2 + 1*0 - 1.0 = 1.0; A1 = 1.0
    # t=0: delta = 0 + 1*1.0 - 0.5 = 0.5; A0 = 0.5 + 1*0.5*1.0 = 1.0
    # returns = A + V = [1.5, 2.0, 0]
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=0.5)
    assert close(adv, [[1.0, 1.0, 0.0]]) and close(ret, [[1.5, 2.0, 0.0]])
    # gamma=0.9, lam=0.5:
    # t=1: delta = 2 - 1 = 1.0; A1 = 1.0
    # t=0: delta = 0 + 0.9*1.0 - 0.5 = 0.4; A0 = 0.4 + 0.9*0.5*1.0 = 0.85; returns [1.35, 2.0, 0]
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.5)
    assert close(adv, [[0.85, 1.0, 0.0]]) and close(ret, [[1.35, 2.0, 0.0]])


def test_gae_delayed_reward_reaches_every_token():
    # reward 1 only at the end, V = 0, gamma = lam = 1: every token's advantage is 1 (Monte Carlo)
    adv, ret = gae(T([[0.0, 0.0, 1.0]]), T([[0.0, 0.0, 0.0]]), T([[1, 1, 1]]), gamma=1.0, lam=1.0)
    assert close(adv, [[1.0, 1.0, 1.0]]) and close(ret, [[1.0, 1.0, 1.0]])
    # lam = 0 (one-step TD): only the last token sees the reward, earlier ones see V_{t+1} - V_t = 0
    adv, _ = gae(T([[0.0, 0.0, 1.0]]), T([[0.0, 0.0, 0.0]]), T([[1, 1, 1]]), gamma=1.0, lam=0.0)
    assert close(adv, [[0.0, 0.0, 1.0]])


def _policy_case():
    # 4 real tokens + 1 padding token; clip eps = 0.2
    ratio = T([[1.5, 0.5, 0.5, 1.0, 3.0]])
    adv = T([[1.0, -1.0, 1.0, 2.0, 5.0]])
    mask = T([[1, 1, 1, 1, 0]])
    old = torch.zeros_like(ratio)
    return torch.log(ratio), old, adv, mask


def test_policy_loss_clip_and_stats():
    logp, old, adv, mask = _policy_case()
    loss, stats = policy_loss(logp, old, adv, mask, clip=0.2)
    # t0: A=1,  r=1.5: -1.5 vs -1*1.2 = -1.2 -> max -1.2 (clipped term active)
    # t1: A=-1, r=0.5:  0.5 vs  1*0.8 =  0.8 -> max  0.8 (clipped term active)
    # t2: A=1,  r=0.5: -0.5 vs -1*0.8 = -0.8 -> max -0.5 (not clipped: moving back toward 1)
    # t3: A=2,  r=1.0: -2.0 vs -2.0          -> -2.0   (not clipped)
    # loss = (-1.2 + 0.8 - 0.5 - 2.0) / 4 = -0.725; clipfrac = 2/4
    assert close(loss, -0.725) and close(stats["clipfrac"], 0.5)
    # approx_kl = mean(r - 1 - ln r) = (0.5 - ln1.5 + (-0.5 - ln0.5) + (-0.5 - ln0.5) + 0) / 4
    #           = (0.094535 + 0.193147 + 0.193147 + 0) / 4 = 0.120207
    assert close(stats["approx_kl"], 0.120207)


def test_policy_loss_gradient_is_zero_on_clipped_tokens():
    logp, old, adv, mask = _policy_case()
    logp.requires_grad_(True)
    loss, _ = policy_loss(logp, old, adv, mask, clip=0.2)
    loss.backward()
    # d/dlogp of -A*r/4 is -A*r/4: t2 -> -1*0.5/4 = -0.125, t3 -> -2*1/4 = -0.5; clipped t0, t1 and pad -> 0
    assert close(logp.grad, [[0.0, 0.0, -0.125, -0.5, 0.0]])


def test_value_loss_clipped():
    values = T([1.5, 0.0, 0.9, 10.0])
    old = T([1.0, 1.0, 1.0, 1.0])
    returns = T([2.0, 2.0, 1.0, -10.0])
    mask = T([1, 1, 1, 0])
    # t0: (1.5-2)^2 = 0.25; V_clip = 1 + 0.2 = 1.2 -> (1.2-2)^2 = 0.64 -> 0.64 (clip active)
    # t1: (0-2)^2 = 4.0;    V_clip = 1 - 0.2 = 0.8 -> (0.8-2)^2 = 1.44 -> 4.0
    # t2: (0.9-1)^2 = 0.01; V_clip = 0.9         -> 0.01
    # loss = 0.5 * (0.64 + 4.0 + 0.01) / 3 = 0.775; clipfrac = 1/3
    loss, stats = value_loss(values, old, returns, mask, clip=0.2)
    assert close(loss, 0.775) and close(stats["value_clipfrac"], 1 / 3)


def test_entropy_and_logprobs_from_logits():
    logits = T([[[0.0, 0.0], [0.0, math.log(3.0)]]])  # (B=1, T=2, V=2)
    # uniform over 2: H = ln 2 = 0.693147
    # probs [0.25, 0.75]: H = 0.25*ln4 + 0.75*ln(4/3) = 0.346574 + 0.215762 = 0.562335
    assert close(entropy_from_logits(logits), [[0.693147, 0.562335]])
    # log p(label): t0 label 0 -> ln 0.5; t1 label 1 -> ln 0.75 = -0.287682
    assert close(logprobs_from_logits(logits, T([[0, 1]])), [[-0.693147, -0.287682]])


def test_explained_variance():
    ret, mask = T([1.0, 2.0, 3.0, 50.0]), T([1, 1, 1, 0])
    # perfect values: Var(R - V) = 0 -> 1
    assert close(explained_variance(T([1.0, 2.0, 3.0, 0.0]), ret, mask), 1.0)
    # constant V = 2: R - V = [-1, 0, 1], Var = 1 = Var(R) -> 0
    assert close(explained_variance(T([2.0, 2.0, 2.0, 0.0]), ret, mask), 0.0)


def test_response_mask_stops_after_the_first_eos():
    from rlcw.rl.ppo.rollout import response_mask

    # eos = 9: row 0 ends at t=1 (EOS kept, the rest is padding); row 1 never ends; row 2 ends at t=0
    resp = T([[5, 9, 9, 7], [5, 6, 7, 8], [9, 5, 9, 5]])
    assert response_mask(resp, [9]).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]


def test_prompt_batches_cover_each_pass_once_and_split_ranks():
    from rlcw.rl.ppo.trainer import prompt_batch

    # 6 prompts, 2 ranks x 3 per step: steps 0 and 1 of rank 0 and 1 together are one pass (a permutation)
    seen = [i for step in (0, 1) for rank in (0, 1) for i in prompt_batch(6, 3, step, seed=0, rank=rank, world=2)]
    assert len(seen) == 12 and sorted(seen[:6]) == list(range(6)) and sorted(seen[6:]) == list(range(6))
    assert prompt_batch(6, 3, 1, seed=0) == prompt_batch(6, 3, 1, seed=0)  # a function of the step: resumable
    assert prompt_batch(6, 3, 0, seed=0) + prompt_batch(6, 3, 1, seed=0) != prompt_batch(
        6, 3, 0, seed=1
    ) + prompt_batch(6, 3, 1, seed=1)


def test_whiten_with_summed_moments_is_global():
    """Two ranks' halves whitened with their summed moments equal the whole batch whitened in one process,
    and differ from whitening each half alone (the per-rank bug)."""
    from rlcw.rl.ppo.maths import masked_moments, whiten_with_moments

    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 10.0, 0.0], [-2.0, 5.0, 7.0], [0.5, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
    whole = whiten(x, mask)
    moments = masked_moments(x[:2], mask[:2]) + masked_moments(x[2:], mask[2:])  # what the all-reduce adds
    assert close(masked_moments(x[:2], mask[:2]), torch.tensor([20.0, 130.0, 5.0]))  # 1+2+3+4+10; 1+4+9+16+100
    parts = torch.cat([whiten_with_moments(x[:2], mask[:2], moments), whiten_with_moments(x[2:], mask[2:], moments)])
    assert close(parts, whole)
    per_rank = torch.cat([whiten(x[:2], mask[:2]), whiten(x[2:], mask[2:])])
    assert not close(per_rank, whole)


def test_fill_missing_scores_uses_the_batch_mean_of_the_valid_ones():
    filled, n = fill_missing_scores(T([0.2, math.nan, 0.8, math.nan]))
    torch.testing.assert_close(filled, T([0.2, 0.5, 0.8, 0.5]))  # (0.2 + 0.8) / 2
    assert n == 2
    filled, n = fill_missing_scores(T([math.nan, math.nan]))
    torch.testing.assert_close(filled, T([0.0, 0.0]))  # nothing to average: the term is 0 for the batch
    assert n == 2
    same = T([1.0, 2.0])
    assert fill_missing_scores(same) == (same, 0)
