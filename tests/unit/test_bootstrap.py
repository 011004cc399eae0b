"""Bootstrap intervals: constant data has a zero-width interval, seeds reproduce, rows stay paired."""

from __future__ import annotations

import numpy as np
import pytest

from rlcw.metrics.bootstrap import bootstrap_ci, bootstrap_indices


def test_constant_values_give_a_point_interval():
    assert bootstrap_ci([0.7] * 10) == pytest.approx((0.7, 0.7))


def test_interval_contains_the_mean_and_is_reproducible():
    values = [1, 0, 1, 1, 0, 1, 1, 1, 0, 1]
    lo, hi = bootstrap_ci(values, n_resamples=500, seed=3)
    assert lo < 0.7 < hi and 0 <= lo and hi <= 1
    assert bootstrap_ci(values, n_resamples=500, seed=3) == (lo, hi)


def test_paired_rows_are_resampled_together():
    pairs = np.array([[1.0, 1.0], [2.0, 2.0], [5.0, 5.0]])
    lo, hi = bootstrap_ci(pairs, statistic=lambda rows: float(np.mean(rows[:, 0] - rows[:, 1])), n_resamples=200)
    assert (lo, hi) == (0.0, 0.0)


def test_indices_shape_and_empty_input():
    assert bootstrap_indices(4, 7).shape == (7, 4)
    with pytest.raises(ValueError):
        bootstrap_indices(0, 3)
