"""Ending credit: the reward terms that judge where a story stopped credit only the token where it stopped.

    content, ending = split_advantages(rewards_per_func, weights, is_ending=[False, True, True], num_generations=8,
                                       scale="group")
    per_token = token_advantages(content, ending, completion_mask)   # (B, T) advantages for TRL's loss

GRPO gives every token of a completion the same advantage. A story that ended short of its asked range then pays the
range term's price on every token it wrote, and a cut story pays the overlong price on every token: the content
tokens learn "write like the stories that ended in range", which in 24 steps mostly teaches the policy to end
sooner everywhere, short stories included. With ending credit the weighted reward terms are split in two
(`train.ending_credit`: the names of the terms that judge the stop, e.g. `length_range` and `overlong`): the rest
(the RM) is normalised into a content advantage carried by every completion token; the stopping terms are
normalised on their own, the same way (TRL's `scale_rewards`: group mean subtracted, divided by the group's or the
batch's SD, or not at all), into an ending advantage added on the row's last completion token only: the end of
sequence for a story that ended (the stop was that token), the last token for one cut at the cap (where it did not
stop). The last token carries both (its choice decided what the RM read as well as where the story stopped); every
other token the content advantage only. With the ending advantage alone on the last token the quickstart's policy
stopped ending (the RM's pay for an ending no longer reached the stop). TRL's loss accepts (B, T) advantages; rlcw's
importance weights scale them per token (rlcw.rl.grpo.trainer).

A row every term left NaN (unscorable) gets 0 in both, as TRL does. TRL's `normalize_then_sum` aggregation has no
such split (the recipe refuses the pair).
"""

from __future__ import annotations

import torch


def _advantage(rewards: torch.Tensor, num_generations: int, scale: str) -> torch.Tensor:
    """TRL's sum-then-normalize advantage of one summed reward (N,): minus the group mean, divided by the group's
    SD (`group`), the batch's SD (`batch`) or nothing (`none`), each plus 1e-4 (TRL's nanstd); NaN rows -> 0."""
    from trl.trainer.utils import nanstd

    grouped = rewards.view(-1, num_generations)
    adv = rewards - torch.nanmean(grouped, dim=1).repeat_interleave(num_generations)
    if scale == "group":
        adv = adv / (nanstd(grouped, dim=1).repeat_interleave(num_generations) + 1e-4)
    elif scale == "batch":
        adv = adv / (nanstd(rewards) + 1e-4)
    elif scale != "none":
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale!r}")
    return torch.nan_to_num(adv, nan=0.0)


def split_advantages(
    rewards_per_func: torch.Tensor, weights: torch.Tensor, is_ending: list[bool], num_generations: int, scale: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(content advantage, ending advantage), each (N,): the weighted sum of the non-ending terms and of the ending
    terms, each normalised on its own as TRL normalises the whole sum (`_advantage`). A row whose terms of one kind
    are all NaN is NaN in that sum (nansum would make it 0 and bias the group mean), so it gets 0 advantage there."""
    if len(is_ending) != rewards_per_func.shape[1] or all(is_ending) or not any(is_ending):
        raise ValueError(f"ending credit needs both kinds of terms among the {rewards_per_func.shape[1]}: {is_ending}")
    kinds = torch.tensor(is_ending, device=rewards_per_func.device)
    weighted = rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)
    out = []
    for mask in (~kinds, kinds):
        part = weighted[:, mask]
        total = part.nansum(dim=1)
        total[torch.isnan(part).all(dim=1)] = torch.nan
        out.append(_advantage(total, num_generations, scale))
    return out[0], out[1]


def token_advantages(content: torch.Tensor, ending: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) advantages: `content` on every completion token, plus `ending` on each row's last (its highest masked
    position); rows without completion tokens are all content (nothing to credit)."""
    adv = content.unsqueeze(1).expand_as(completion_mask).to(torch.float32).clone()
    mask = completion_mask.bool()
    has = mask.any(dim=1)
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).max(dim=1).values
    rows = torch.nonzero(has, as_tuple=True)[0]
    adv[rows, last[rows]] += ending[rows].to(adv.dtype)
    return adv
