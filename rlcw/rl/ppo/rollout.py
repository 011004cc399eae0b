"""PPO rollouts: sample responses, mask them at EOS, and read log-probs, entropies and values.

Layout (B sequences): queries left-padded to P tokens, responses right-padded to R tokens,
`input_ids = [query | response]` (B, P + R). Position ids come from the attention mask
(cumsum - 1), as `generate` uses them, so the training forward matches sampling. The logits
that predict response token t sit at position P - 1 + t; values are read at the same
positions (the state before token t is emitted). Log-probs use logits / temperature: the
distribution the tokens were sampled from.

    ro = sample_rollout(policy, queries, pad_id=tok.pad_token_id, eos_ids=[tok.eos_token_id], max_new_tokens=64)
    logp, ent = response_logprobs(policy, ro, temperature=0.9)
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from rlcw.rl.ppo.maths import fill_missing_scores
from rlcw.sampling import entropy_from_logits, left_pad, logprobs_from_logits


@dataclass
class Rollout:
    input_ids: torch.Tensor  # (B, P + R)
    attention_mask: torch.Tensor  # (B, P + R)
    position_ids: torch.Tensor  # (B, P + R)
    response: torch.Tensor  # (B, R)
    response_mask: torch.Tensor  # (B, R) float, 1 up to and including the first EOS
    prompt_len: int  # P
    ended: torch.Tensor  # (B,) bool: the response stopped at an EOS (not at the token cap)

    def select(self, idx: torch.Tensor) -> Rollout:
        return Rollout(
            self.input_ids[idx],
            self.attention_mask[idx],
            self.position_ids[idx],
            self.response[idx],
            self.response_mask[idx],
            self.prompt_len,
            self.ended[idx],
        )

    @property
    def lengths(self) -> torch.Tensor:
        return self.response_mask.sum(1)  # (B,)


def response_mask(response: torch.Tensor, eos_ids: list[int]) -> torch.Tensor:
    """1 on tokens up to and including the first EOS, 0 after: (B, R) -> (B, R) float."""
    is_eos = torch.isin(response, torch.tensor(eos_ids, device=response.device))
    after = (is_eos.cumsum(1) - is_eos.long()) > 0  # strictly after the first EOS
    return (~after).float()


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


@torch.no_grad()
def sample_rollout(
    model,
    queries: list[list[int]],
    *,
    pad_id: int,
    eos_ids: list[int],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    device=None,
) -> Rollout:
    """Sample one response per query with the current policy (caller seeds the RNG)."""
    device = device or next(model.parameters()).device
    q_ids, q_mask = left_pad(queries, pad_id)
    q_ids, q_mask = q_ids.to(device), q_mask.to(device)
    out = model.generate(
        input_ids=q_ids,
        attention_mask=q_mask,
        max_new_tokens=max_new_tokens,  # no min_new_tokens: EOS may come first, as response_logprobs assumes
        do_sample=True,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        pad_token_id=pad_id,
        eos_token_id=eos_ids,
    )
    P = q_ids.shape[1]
    response = out[:, P:]  # (B, R), R <= max_new_tokens
    r_mask = response_mask(response, eos_ids)
    response = torch.where(r_mask.bool(), response, torch.full_like(response, pad_id))
    attention = torch.cat([q_mask, r_mask.long()], dim=1)
    input_ids = torch.cat([q_ids, response], dim=1)
    ended = torch.isin(response, torch.tensor(eos_ids, device=response.device)).any(1)
    return Rollout(input_ids, attention, position_ids_from_mask(attention), response, r_mask, P, ended)


def response_logits(model, ro: Rollout, temperature: float = 1.0) -> torch.Tensor:
    """Logits predicting each response token, divided by the sampling temperature: (B, R, V)."""
    logits = model(input_ids=ro.input_ids, attention_mask=ro.attention_mask, position_ids=ro.position_ids).logits
    R = ro.response.shape[1]
    return logits[:, ro.prompt_len - 1 : ro.prompt_len - 1 + R].float() / temperature


def response_logprobs(model, ro: Rollout, temperature: float = 1.0, with_entropy: bool = True):
    """(log p(response token) (B, R), entropy (B, R) or None) under `model`."""
    logits = response_logits(model, ro, temperature)
    logp = logprobs_from_logits(logits, ro.response)
    return logp, (entropy_from_logits(logits) if with_entropy else None)


def response_values(value_model, ro: Rollout) -> torch.Tensor:
    """Value of the state before each response token: (B, R)."""
    values = value_model(input_ids=ro.input_ids, attention_mask=ro.attention_mask, position_ids=ro.position_ids)
    R = ro.response.shape[1]
    return values[:, ro.prompt_len - 1 : ro.prompt_len - 1 + R]


def score_completions(
    reward_funcs: list, weights: list[float], prompts: list, completions: list, **columns
) -> tuple[torch.Tensor, dict[str, float]]:
    """Weighted sum of TRL-signature reward functions: (scores (B,), {"rewards/<name>/mean": ...}); what a
    function logs through TRL's `log_metric(name, value)` keyword (an RM ensemble's members) joins the stats."""
    total = torch.zeros(len(completions))
    stats: dict[str, float] = {}
    for func, weight in zip(reward_funcs, weights, strict=False):
        # log_metric as TRL passes it: a reward's own statistics (e.g. a rubric's per-criterion means) join stats
        values = func(prompts=prompts, completions=completions, log_metric=stats.__setitem__, **columns)
        if len(values) != len(completions) or any(v is None for v in values):
            name = getattr(func, "__name__", type(func).__name__)
            raise ValueError(
                f"reward function {name} returned {len(values)} values (None included?) for {len(completions)} completions"
            )
        t = torch.tensor([float(v) for v in values])
        if torch.isnan(t).any():
            t = _fill_no_verdict(func, t)
        stats[f"rewards/{getattr(func, '__name__', type(func).__name__)}/mean"] = float(t.mean())
        total += weight * t
    return total, stats


def _fill_no_verdict(func, scores: torch.Tensor) -> torch.Tensor:
    """A NaN from a reward that declares `nan_is_no_verdict` (a rubric whose judge gave no valid verdict for
    the story) -> the batch mean of its valid scores, 0 when none, with a warning (the reward logs the count
    itself); a NaN from any other reward is a bug and stops the run."""
    name = getattr(func, "__name__", type(func).__name__)
    if not getattr(func, "nan_is_no_verdict", False):
        raise ValueError(f"reward function {name} returned NaN")
    filled, n = fill_missing_scores(scores)
    client = getattr(getattr(func, "client", None), "cfg", None)
    judge = f"{client.kind} judge {client.model or ''}".strip() if client is not None else "its judge"
    warnings.warn(
        f"reward {name}: {n} of {len(scores)} stories got no valid verdict from the {judge}; they get the "
        f"batch mean of the valid scores ({float(filled[torch.isnan(scores)][0]):.3f}) for this term. "
        "Check the judge's replies, or use verdict=logprobs (P(yes) read from a local or vLLM judge, "
        "no reply to parse).",
        RuntimeWarning,
        stacklevel=2,
    )
    return filled
