"""Percentile bootstrap confidence intervals (pure numpy; the one owner of resampling).

from rlcw.metrics.bootstrap import bootstrap_ci
lo, hi = bootstrap_ci([1, 0, 1, 1], n_resamples=1000, seed=0)   # CI of the mean
lo, hi = grouped_bootstrap_ci([1, 1, 0, 0], groups=["p1", "p1", "p2", "p2"])   # resample whole groups

`small_sample_note(n, "pairs")` is the one wording every report and log uses for an interval over
fewer than `SMALL_SAMPLE` items.

Use the grouped (cluster) form whenever items share a source, e.g. several stories sampled for one
prompt: resampling stories as if independent gives intervals that are too narrow.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np

SMALL_SAMPLE = 20  # below this many items an interval is reported with a warning beside it


def small_sample_note(
    n: int, what: str = "pairs", measure: str = "accuracy", at_least: int = SMALL_SAMPLE
) -> str | None:
    """The warning for a figure over only `n` `what` (pairs, prompts): None at `at_least` or more."""
    if n >= at_least:
        return None
    return f"only {n} {what}: the interval is wide and the {measure} may mislead"


def bootstrap_indices(n: int, n_resamples: int, seed: int = 0) -> np.ndarray:
    """(n_resamples, n) row indices drawn with replacement; the same seed gives the same draws."""
    if n <= 0:
        raise ValueError("bootstrap needs at least one item")
    return np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))


def bootstrap_ci(
    values: Sequence[float],
    statistic: Callable[[np.ndarray], float] = np.mean,
    n_resamples: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float]:
    """(low, high) percentile interval of `statistic` over resamples of `values`.

    `values` may be 2-D (items x columns) when the statistic needs paired columns; rows are
    resampled together."""
    data = np.asarray(values, dtype=float)
    idx = bootstrap_indices(len(data), n_resamples, seed)
    stats = np.array([statistic(data[row]) for row in idx], dtype=float)
    return float(np.quantile(stats, alpha / 2)), float(np.quantile(stats, 1 - alpha / 2))


def grouped_bootstrap_ci(
    values: Sequence[float],
    groups: Sequence[Hashable],
    statistic: Callable[[np.ndarray], float] = np.mean,
    n_resamples: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[float, float]:
    """(low, high) percentile interval of `statistic` when whole GROUPS are resampled (cluster bootstrap).

    Each resample draws len(unique groups) groups with replacement (`bootstrap_indices` over the
    groups in first-seen order) and applies `statistic` to every item of the drawn groups together;
    a group drawn twice counts twice. `values` may be 2-D (items x columns) like `bootstrap_ci`."""
    data = np.asarray(values, dtype=float)
    if len(data) != len(groups):
        raise ValueError(f"{len(data)} values but {len(groups)} group labels")
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    rows = [np.asarray(m) for m in members.values()]
    stats = np.array(
        [
            statistic(data[np.concatenate([rows[j] for j in draw])])
            for draw in bootstrap_indices(len(rows), n_resamples, seed)
        ],
        dtype=float,
    )
    return float(np.quantile(stats, alpha / 2)), float(np.quantile(stats, 1 - alpha / 2))
