"""Pairwise accuracy of a scorer, and the length-only baseline (longer wins)."""

from __future__ import annotations

from rlcw.metrics.text import count_words


def pairwise_accuracy(chosen_scores: list[float], rejected_scores: list[float]) -> float:
    """Share of pairs where chosen scores higher; a tie counts as half."""
    if len(chosen_scores) != len(rejected_scores) or not chosen_scores:
        raise ValueError("need two equally long, non-empty score lists")
    wins = sum(1.0 if c > r else 0.5 if c == r else 0.0 for c, r in zip(chosen_scores, rejected_scores))
    return wins / len(chosen_scores)


def length_baseline_accuracy(pairs: list[dict]) -> float:
    """Accuracy of 'the longer story wins' (ties = half) on preference records."""
    return pairwise_accuracy(
        [float(count_words(p["chosen"])) for p in pairs], [float(count_words(p["rejected"])) for p in pairs]
    )
