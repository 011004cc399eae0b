"""KL(policy || reference) per story on the SAMPLED token ids, EOS included.

    completion = cut_after_eos(generated_row, eos_ids)                    # keep the EOS, drop what follows
    kl = kl_to_reference(policy, start_model, prompt_ids, completions, pad_id=pad, estimator="k3")  # (B,)
    d = kl.mean().sqrt()                                                  # Gao et al.'s axis

Why these rules: a KL estimate is an average over samples FROM the policy, so
- the samples must come from the distribution whose log-probs are used: sample with `top_k=0,
  top_p=1` (transformers' `generate` applies top_k=50 when top_k is unset), and the log-probs here use
  the same temperature (default 1); `sampled_logprobs` refuses truncated samplers, whose support differs
  from the full softmax (the KL to an untruncated reference can then be infinite);
- the log-probs are of the ids that were sampled, not of re-tokenised decoded text (which can split
  differently and drops special tokens), and the EOS that ended a story is one of them: stopping is a
  choice of the policy, so its log-ratio counts. Note SmolLM's pad id equals its EOS id: cut each
  generated row after its first EOS (`cut_after_eos`) before passing it here.

Estimators (`rlcw.sampling.kl_per_token`, summed over a story's tokens): k1 = sum of log p - log q
(unbiased, can be negative per story); k3 = sum of exp(-r) - 1 + r with r = log p - log q (unbiased,
never negative, lower variance). One forward per model. For a PEFT policy whose reference is the base,
call `sampled_logprobs` twice, the second time inside `with model.disable_adapter():`, then `kl_per_story`.
Tested in tests/unit/test_kl_sampled.py (hand-worked maths; a tiny Llama for the EOS-only story).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlcw.sampling import kl_per_token, left_pad, logprobs_from_logits


def kl_per_story(
    logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, estimator: str = "k3"
) -> torch.Tensor:
    """Sum over each story's real tokens of the per-token estimate: (B, T) x3 -> (B,).

    mask is 1 on every sampled token up to and including EOS, 0 on padding after it."""
    per_token = kl_per_token(logp.float(), ref_logp.float(), estimator)  # (B, T)
    return (per_token * mask.to(per_token.dtype)).sum(-1)


def cut_after_eos(ids: Sequence[int], eos_ids: Sequence[int]) -> list[int]:
    """A generated row up to and including its first EOS (all of it when there is none)."""
    ids = list(ids)
    return next((ids[: i + 1] for i, t in enumerate(ids) if t in eos_ids), ids)


def check_full_distribution(temperature: float, top_k: int, top_p: float) -> None:
    """Raise unless the sampler draws from the full (temperature-scaled) distribution."""
    if top_k != 0:
        raise ValueError(f"top_k={top_k!r}: KL on samples needs top_k=0 (the full distribution; unset means 50)")
    if top_p != 1.0:
        raise ValueError(f"top_p={top_p!r}: KL on samples needs top_p=1 (the full distribution)")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")


@torch.no_grad()
def sampled_logprobs(
    model,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    *,
    pad_id: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(sampled token | prompt, earlier tokens) under `model` at `temperature`: (logp, mask), each (B, T).

    One forward over [left-padded prompt | right-padded completion]; T = the longest completion, mask 1
    on each completion's own tokens (EOS included when it was sampled). The sampler settings must be
    the ones the completions were drawn with (`check_full_distribution`)."""
    check_full_distribution(temperature, top_k, top_p)
    if len(prompt_ids) != len(completion_ids) or not completion_ids:
        raise ValueError(f"{len(prompt_ids)} prompts but {len(completion_ids)} completions")
    if min(len(c) for c in completion_ids) == 0:
        raise ValueError("an empty completion has no sampled token to score")
    p_ids, p_mask = left_pad(prompt_ids, pad_id)  # (B, P)
    t = max(len(c) for c in completion_ids)
    c_ids = torch.full((len(completion_ids), t), pad_id, dtype=torch.long)
    c_mask = torch.zeros((len(completion_ids), t), dtype=torch.long)
    for i, c in enumerate(completion_ids):
        c_ids[i, : len(c)], c_mask[i, : len(c)] = torch.tensor(c, dtype=torch.long), 1
    ids, mask = torch.cat([p_ids, c_ids], 1), torch.cat([p_mask, c_mask], 1)  # (B, P + T)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    # the last T + 1 positions: position P - 1 predicts completion token 0, ..., P + T - 2 predicts T - 1
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=t + 1).logits[:, :-1]
    logp = logprobs_from_logits(logits.float() / temperature, c_ids)  # (B, T)
    return logp * c_mask, c_mask


def kl_to_reference(
    policy,
    reference,
    prompt_ids: list[list[int]],
    completion_ids: list[list[int]],
    *,
    pad_id: int,
    estimator: str = "k3",
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
) -> torch.Tensor:
    """KL(policy || reference) per story (B,) from the policy's sampled completions, one forward per model."""
    kw = {"pad_id": pad_id, "temperature": temperature, "top_k": top_k, "top_p": top_p}
    logp, mask = sampled_logprobs(policy, prompt_ids, completion_ids, **kw)
    ref_logp, _ = sampled_logprobs(reference, prompt_ids, completion_ids, **kw)
    return kl_per_story(logp, ref_logp, mask, estimator)
