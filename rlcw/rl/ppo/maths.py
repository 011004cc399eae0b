"""PPO maths as pure tensor functions: per-token rewards, GAE, whitening, losses (KL per token: rlcw.sampling).

No model code here. Shapes: B = sequences, T = response tokens (right-padded), V = vocabulary.
`mask` is a (B, T) float/bool tensor, 1 on real response tokens (up to and including EOS), 0 on
padding after them. Means over tokens are taken over every real token of the batch (token-level
means, so long answers weigh more, as in OpenRLHF and TRL's old PPOTrainer).

    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=0.95)
    loss, stats = policy_loss(logp, old_logp, whiten(adv, mask), mask, clip=0.2)

Tested with hand-worked numbers in tests/unit/test_ppo_math.py.
"""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over the entries where mask is 1 (a scalar); 0 when the mask is empty."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of x over the masked entries (Bessel-corrected by default, like torch.var)."""
    mask = mask.to(x.dtype)
    mean = masked_mean(x, mask)
    n = mask.sum()
    var = (((x - mean) ** 2) * mask).sum() / n.clamp(min=1.0)
    if unbiased and n > 1:
        var = var * n / (n - 1)
    return var


def whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over masked entries; padding comes back as 0. shift_mean=False keeps the mean."""
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * mask.to(x.dtype)


def masked_moments(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(3,) [sum, sum of squares, count] of x over the masked entries: add them over ranks for global stats."""
    m = mask.to(x.dtype)
    return torch.stack([(x * m).sum(), (x * x * m).sum(), m.sum()])


def whiten_with_moments(
    x: torch.Tensor, mask: torch.Tensor, moments: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """`whiten` with the mean and (Bessel-corrected) variance of `moments` (e.g. summed over every rank's
    masked_moments), so every rank scales its advantages alike; equals `whiten` when moments are x's own."""
    total, total_sq, n = moments.unbind()
    mean = total / n.clamp(min=1.0)
    var = (total_sq - n * mean * mean) / n.clamp(min=1.0)
    var = torch.where(n > 1, var * n / (n - 1).clamp(min=1.0), var)
    out = (x - mean) * torch.rsqrt(var.clamp(min=0.0) + eps)
    if not shift_mean:
        out = out + mean
    return out * mask.to(x.dtype)


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last real token per row: (B, T) -> (B,) long (0 for an empty row)."""
    t = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), t, torch.zeros_like(t)).max(dim=1).values


def token_rewards(scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, kl_coef: float) -> torch.Tensor:
    """Per-token rewards: -kl_coef * kl on every real token, plus the sequence score on the last one.

    scores (B,), kl (B, T), mask (B, T) -> (B, T); padding gets 0."""
    mask = mask.to(kl.dtype)
    rewards = -kl_coef * kl * mask
    last = last_token_index(mask)  # (B,)
    rows = torch.arange(rewards.shape[0], device=rewards.device)
    return rewards.index_put((rows, last), rewards[rows, last] + scores.to(rewards.dtype))


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 0.95
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over right-padded responses.

    rewards, values, mask: (B, T) -> (advantages, returns), each (B, T), 0 on padding.
    delta_t = r_t + gamma * V_{t+1} - V_t, A_t = delta_t + gamma * lam * A_{t+1}, with V and A
    after the last real token taken as 0 (the episode ends there); returns = A + V."""
    mask = mask.to(values.dtype)
    rewards, values = rewards * mask, values * mask
    T = rewards.shape[1]
    adv = torch.zeros_like(rewards)
    next_value = torch.zeros_like(rewards[:, 0])  # (B,)
    next_adv = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(T)):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        next_adv = (delta + gamma * lam * next_adv) * mask[:, t]
        next_value = values[:, t]
        adv[:, t] = next_adv
    return adv, (adv + values) * mask


def policy_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, clip: float = 0.2
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clip surrogate: masked mean of max(-A * r, -A * clip(r, 1-eps, 1+eps)), r = p/p_old.

    All (B, T). Stats (detached scalars): clipfrac = share of tokens where the clipped term is
    the larger (active), approx_kl = mean((r - 1) - log r) (k3 of old vs new)."""
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        stats = {
            "clipfrac": masked_mean((clipped > unclipped).float(), mask),
            "approx_kl": masked_mean(ratio - 1.0 - log_ratio, mask),
            "ratio_mean": masked_mean(ratio, mask),
        }
    return loss, stats


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, clip: float = 0.2
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss: 0.5 * masked mean of max((V - R)^2, (V_clip - R)^2),
    V_clip = V_old + clamp(V - V_old, -clip, clip). All (B, T). Stats: value clipfrac."""
    v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    err, err_clipped = (values - returns) ** 2, (v_clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(err, err_clipped), mask)
    with torch.no_grad():
        stats = {"value_clipfrac": masked_mean((err_clipped > err).float(), mask)}
    return loss, stats


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """1 - Var(R - V) / Var(R) over masked tokens: 1 = perfect value, 0 = no better than a constant."""
    var_r = masked_var(returns, mask)
    return 1.0 - masked_var(returns - values, mask) / var_r.clamp(min=1e-8)


def fill_missing_scores(scores: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(scores (B,) with each NaN replaced by the mean of the batch's other scores, or 0 when every one is NaN;
    the number replaced). A filled story gets this reward term's batch mean, so the term moves no advantage."""
    missing = torch.isnan(scores)
    n = int(missing.sum())
    if n == 0:
        return scores, 0
    fill = scores[~missing].mean() if n < len(scores) else torch.tensor(0.0, dtype=scores.dtype)
    return torch.where(missing, fill, scores), n
