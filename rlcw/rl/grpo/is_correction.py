"""Truncated importance sampling for rollouts drawn by a sampler that is not the trained policy.

The fast bf16 rollout (rlcw.rl.grpo.rollout) samples from a bf16 copy mu of the fp32 policy pi, so the GRPO
gradient estimated on its samples is slightly off-policy. Each completion token t is reweighted by

    w_t = min(exp(log pi(y_t) - log mu(y_t)), C)        (Ionides 2008; TRL's "token_truncate" vLLM mode)

with log pi detached (the weight is a constant in the gradient) and C the cap (`rollout.is_cap`).
Pure tensor maths, no model code; used by the GRPO trainer's loss hook. Shapes: B completions,
T completion tokens (right-padded), mask 1 on real tokens.

    w, sums = truncated_is_weights(logp, sampler_logp, mask, cap=2.0)
    stats = is_stats(sums)      # {"mean_abs_gap", "mean_weight", "clipped_share"}

Tested with hand-worked numbers in tests/unit/test_rollout_is.py.
"""

from __future__ import annotations

import torch

from rlcw.errors import RlcwError


def truncated_is_weights(
    logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights (B, T), sums (4,)): w = min(exp(logp - sampler_logp), cap), 1 on padding.

    sums = [sum |gap|, sum w, tokens clipped (ratio > cap), tokens] over the masked entries, so ranks can
    add them before dividing (see is_stats). Neither output carries gradient.
    """
    if cap <= 0:
        raise RlcwError(f"the importance-sampling cap must be > 0, got {cap}", where="rollout.is_cap")
    if logp.shape != sampler_logp.shape or logp.shape != mask.shape:
        raise RlcwError(
            f"shapes differ: logp {tuple(logp.shape)}, sampler_logp {tuple(sampler_logp.shape)}, mask {tuple(mask.shape)}"
        )
    m = mask.bool()
    gap = (logp.detach().float() - sampler_logp.float()).masked_fill(~m, 0.0)  # (B, T)
    ratio = torch.exp(gap)  # (B, T)
    weights = ratio.clamp(max=cap).masked_fill(~m, 1.0)  # (B, T)
    mf = m.float()
    sums = torch.stack(
        [(gap.abs() * mf).sum(), (weights * mf).sum(), ((ratio > cap).float() * mf).sum(), mf.sum()]
    )  # (4,)
    return weights, sums


def is_stats(sums: torch.Tensor) -> dict[str, float]:
    """Means from (summed over ranks) truncated_is_weights sums: mean |gap| (nats/token), mean weight, clipped share."""
    n = float(sums[3].clamp(min=1.0))
    return {
        "mean_abs_gap": float(sums[0]) / n,
        "mean_weight": float(sums[1]) / n,
        "clipped_share": float(sums[2]) / n,
    }
