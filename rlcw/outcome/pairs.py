"""On-policy preference pairs for the outcome study, labelled by a scorer (Gao et al. 2022), and agreement.

    pairs, info = labelled_pairs(records, "gold", k=8, per_prompt=None, temperature=1.0, seed=0)
    train, held = split_by_prompt(pairs, eval_fraction=0.2, seed=0)
    agree = agreement_with(records, "proxy_large", "gold", k=32, per_prompt=16, seed=0)

`records` are scored samples of the start policy (`rlcw.outcome.measure`): k per prompt, keyed by
(prompt_id, sample_index), each with `scores[name]`. Pairs are named by
`rlcw.metrics.gold_pairs.completion_pairs` and ordered by `label_pairs` (a sampled Bradley-Terry label,
P(a > b) = sigmoid((r_a - r_b) / temperature); temperature 0 = the scorer's own preference), and written
as the preference records `rlcw train-rm` and `rlcw dpo` read (prompt, chosen, rejected, meta). A pair of
two identical texts is not a preference and is dropped (counted).

Agreement of a proxy with the gold: on pairs of start samples for the held-out prompts, the gold's
preferred side is `chosen` (pairs the gold ties are left out); outcome 1 when the proxy prefers the same
side, 0.5 on a proxy tie (`rlcw.metrics.pairwise.pair_outcomes`); CI by resampling prompts
(`grouped_bootstrap_ci`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlcw.data.pairs import is_eval_story
from rlcw.metrics.bootstrap import grouped_bootstrap_ci
from rlcw.metrics.gold_pairs import completion_pairs, label_pairs
from rlcw.metrics.pairwise import pair_outcomes


def by_key(records: list[dict]) -> dict[tuple[str, int], dict]:
    """Records by (prompt_id, sample_index); prompts in first-seen order."""
    return {(r["prompt_id"], r["sample_index"]): r for r in records}


def _prompt_order(records: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["prompt_id"] for r in records))


@dataclass(frozen=True)
class LabelInfo:
    pairs: int  # written
    identical: int  # dropped: both sides the same text
    label_noise: float  # expected share of labels against the scorer's own ranking (mean min(p, 1 - p))
    temperature: float


def labelled_pairs(
    records: list[dict], scorer: str, *, k: int, per_prompt: int | None, temperature: float, seed: int
) -> tuple[list[dict], LabelInfo]:
    """Preference records from pairs of the k samples per prompt, ordered by sampled labels of `scorer`."""
    index = by_key(records)
    names = completion_pairs(_prompt_order(records), k, per_prompt, seed)
    scores = {key: r["scores"][scorer] for key, r in index.items()}
    ordered, noise = label_pairs(names, scores, temperature, seed)
    out, identical = [], 0
    for p, c, r in ordered:
        chosen, rejected = index[(p, c)], index[(p, r)]
        if chosen["story"].strip() == rejected["story"].strip():
            identical += 1
            continue
        out.append(
            {
                "prompt": chosen["prompt"],
                "chosen": chosen["story"],
                "rejected": rejected["story"],
                "source": f"{scorer}_labelled",
                "meta": {
                    "prompt_id": p,
                    "chosen_index": c,
                    "rejected_index": r,
                    "chosen_score": chosen["scores"][scorer],
                    "rejected_score": rejected["scores"][scorer],
                },
            }
        )
    return out, LabelInfo(len(out), identical, noise, temperature)


def split_by_prompt(pairs: list[dict], eval_fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, eval) by a seeded hash of the prompt id, so no prompt has pairs on both sides."""
    held = [is_eval_story(p["meta"]["prompt_id"], eval_fraction, seed) for p in pairs]
    return [p for p, h in zip(pairs, held, strict=True) if not h], [p for p, h in zip(pairs, held, strict=True) if h]


@dataclass(frozen=True)
class Agreement:
    accuracy: float  # share of pairs where the scorer prefers the gold's side (ties 0.5)
    ci_low: float
    ci_high: float
    pairs: int
    prompts: int
    gold_ties: int  # pairs left out: the gold scores both sides the same


def agreement_with(
    records: list[dict],
    scorer: str,
    gold: str,
    *,
    k: int,
    per_prompt: int | None,
    seed: int = 0,
    n_resamples: int = 1000,
) -> Agreement:
    """`scorer`'s agreement with `gold` on pairs of the k samples per prompt, with a prompt-level 95% CI."""
    index = by_key(records)
    chosen, rejected, prompts, ties = [], [], [], 0
    for p, a, b in completion_pairs(_prompt_order(records), k, per_prompt, seed):
        ra, rb = index[(p, a)]["scores"], index[(p, b)]["scores"]
        if ra[gold] == rb[gold]:
            ties += 1
            continue
        win, lose = (ra, rb) if ra[gold] > rb[gold] else (rb, ra)
        chosen.append(win[scorer]), rejected.append(lose[scorer]), prompts.append(p)
    if not chosen:
        raise ValueError(f"every pair is a gold tie: no agreement of {scorer!r} to measure")
    return accuracy_by_prompt(chosen, rejected, prompts, gold_ties=ties, seed=seed, n_resamples=n_resamples)


def accuracy_by_prompt(
    chosen: list[float],
    rejected: list[float],
    prompts: list[str],
    *,
    gold_ties: int = 0,
    seed: int = 0,
    n_resamples: int = 1000,
) -> Agreement:
    """Share of pairs whose chosen side scores higher (ties 0.5), 95% CI from resampling prompts."""
    outcomes = pair_outcomes(chosen, rejected)
    low, high = grouped_bootstrap_ci(outcomes, prompts, n_resamples=n_resamples, seed=seed)
    return Agreement(float(np.mean(outcomes)), low, high, len(outcomes), len(set(prompts)), gold_ties)
