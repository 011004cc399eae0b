"""Percentile bootstrap confidence intervals (pure numpy; the one owner of resampling).

from rlcw.metrics.bootstrap import bootstrap_ci
lo, hi = bootstrap_ci([1, 0, 1, 1], n_resamples=1000, seed=0)   # CI of the mean
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


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
