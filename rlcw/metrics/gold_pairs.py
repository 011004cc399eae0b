"""Gold-labelled on-policy preference pairs, as in Gao et al. (2022) (pure maths, no model code).

k completions per prompt are sampled from the start policy and scored by the gold; pairs of them are
labelled by a draw from the gold's Bradley-Terry model, P(a preferred) = sigmoid((r_a - r_b) / T):

    pairs = completion_pairs(["p1", "p2"], k=4)                 # all 6 pairs per prompt
    out = gold_labels([1.2, 0.3], [0.1, 0.3], temperature=1.0, seed=0)
    out.labels, out.probs, out.label_noise                       # a preferred?, P(a > b), mean min(p, 1-p)
    chosen, noise = label_pairs(pairs, gold, temperature=1.0, seed=0)   # [(prompt_id, chosen, rejected)]

`label_noise` is the expected share of labels that disagree with the gold's own ranking; the report
states it. temperature=0 gives the noiseless labels (the higher gold wins; a tie is a coin flip).
Tests with hand-worked numbers: tests/unit/test_overopt.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
from scipy.special import expit


def bt_probabilities(r_a: Sequence[float], r_b: Sequence[float], temperature: float = 1.0) -> np.ndarray:
    """P(a preferred over b) = sigmoid((r_a - r_b) / temperature) per pair; temperature 0: 1, 0 or 0.5 on a tie."""
    a, b = np.asarray(r_a, dtype=float), np.asarray(r_b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"{a.size} gold scores for side a but {b.size} for side b")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return 0.5 + 0.5 * np.sign(a - b)
    return expit((a - b) / temperature)


@dataclass(frozen=True)
class GoldLabels:
    """labels[i]: True when a is preferred; probs[i] = P(a preferred); label_noise = mean min(p, 1 - p)."""

    labels: np.ndarray
    probs: np.ndarray
    label_noise: float


def gold_labels(r_a: Sequence[float], r_b: Sequence[float], temperature: float = 1.0, seed: int = 0) -> GoldLabels:
    """Sampled Bradley-Terry labels from gold scores (one uniform draw per pair, numpy's seeded generator)."""
    probs = bt_probabilities(r_a, r_b, temperature)
    labels = np.random.default_rng(seed).random(probs.size) < probs
    noise = float(np.minimum(probs, 1 - probs).mean()) if probs.size else float("nan")
    return GoldLabels(labels, probs, noise)


def completion_pairs(
    prompt_ids: Sequence[str], k: int, per_prompt: int | None = None, seed: int = 0
) -> list[tuple[str, int, int]]:
    """(prompt_id, i, j) pairs of completion indices i < j among k per prompt, prompts in the given order.

    per_prompt=None: all k (k - 1) / 2 pairs; otherwise that many distinct pairs per prompt, drawn
    without replacement by one seeded generator (so the same seed gives the same pairs)."""
    if k < 2:
        raise ValueError(f"pairs need k >= 2 completions per prompt, got {k}")
    every = list(combinations(range(k), 2))
    if per_prompt is not None and not 1 <= per_prompt <= len(every):
        raise ValueError(f"per_prompt={per_prompt} must be in 1..{len(every)} for k={k}")
    rng = np.random.default_rng(seed)
    out = []
    for p in prompt_ids:
        chosen = (
            every
            if per_prompt is None
            else [every[i] for i in sorted(rng.choice(len(every), per_prompt, replace=False))]
        )
        out.extend((p, i, j) for i, j in chosen)
    return out


def label_pairs(
    pairs: Sequence[tuple[str, int, int]],
    gold: Mapping[tuple[str, int], float],
    temperature: float = 1.0,
    seed: int = 0,
) -> tuple[list[tuple[str, int, int]], float]:
    """(prompt_id, chosen_index, rejected_index) per pair from sampled gold labels, and the label noise.

    `gold[(prompt_id, completion_index)]` is the gold score of that completion; pairs come from
    `completion_pairs`."""
    missing = [(p, i) for p, a, b in pairs for i in (a, b) if (p, i) not in gold]
    if missing:
        raise ValueError(f"{len(missing)} completions have no gold score, e.g. {missing[0]}")
    out = gold_labels([gold[(p, a)] for p, a, _ in pairs], [gold[(p, b)] for p, _, b in pairs], temperature, seed)
    chosen = [(p, a, b) if win else (p, b, a) for (p, a, b), win in zip(pairs, out.labels, strict=True)]
    return chosen, out.label_noise
