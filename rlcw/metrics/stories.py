"""Statistics of a set of stories for the periodic evaluators (rlcw.measure.evaluation): mean words, the
share inside the prompt's word range, trigram repetition within stories and distinct trigrams across them.

    in_range_share([4, 6], [(3, 5), (10, 20)])          # 0.5
    repetition_stats(["a b c a b c", "x y z"])          # {"intra_trigram_rep": 0.125, "distinct_3": 0.8}

Pure maths: no model code.
"""

from __future__ import annotations

from rlcw.metrics.text import distinct_n, repetition_rate


def mean(xs: list[float]) -> float:
    """Arithmetic mean; NaN for no values."""
    return sum(xs) / len(xs) if xs else float("nan")


def in_range_share(words: list[int], ranges: list[tuple[int, int] | None]) -> float | None:
    """Share of stories whose word count lies in their [min, max] range (inclusive), over stories with a
    range (None entries are skipped); None when no story has one."""
    ranged = [(w, r) for w, r in zip(words, ranges, strict=True) if r is not None]
    if not ranged:
        return None
    return mean([1.0 if lo <= w <= hi else 0.0 for w, (lo, hi) in ranged])


def repetition_stats(texts: list[str], n: int = 3) -> dict[str, float]:
    """Mean within-story n-gram repetition and distinct n-grams across the stories (n = 3 by default)."""
    return {"intra_trigram_rep": mean([repetition_rate(t, n) for t in texts]), "distinct_3": distinct_n(texts, n)}
