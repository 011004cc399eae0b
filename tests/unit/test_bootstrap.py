"""Bootstrap intervals: constant data has a zero-width interval, seeds reproduce, rows stay paired."""

from __future__ import annotations

import numpy as np
import pytest

from rlcw.metrics.bootstrap import bootstrap_ci, bootstrap_indices, grouped_bootstrap_ci


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


def test_grouped_resampling_keeps_groups_whole():
    # groups "a" = {0, 2} and "b" = {4, 6} (interleaved): a resample is aa, ab or bb -> mean 1, 3 or 5
    values, groups = [0.0, 4.0, 2.0, 6.0], ["a", "b", "a", "b"]
    lo, hi = grouped_bootstrap_ci(values, groups, n_resamples=2000, seed=0)
    assert (lo, hi) == pytest.approx((1.0, 5.0))
    # one group: every resample is the whole data
    assert grouped_bootstrap_ci([1.0, 3.0], ["g", "g"], n_resamples=50) == pytest.approx((2.0, 2.0))
    with pytest.raises(ValueError):
        grouped_bootstrap_ci([1.0, 2.0], ["g"])


def test_small_sample_note_speaks_below_twenty_items_only():
    from rlcw.metrics.bootstrap import small_sample_note

    assert small_sample_note(7) == "only 7 pairs: the interval is wide and the accuracy may mislead"
    assert (
        small_sample_note(19, "prompts", "win rate")
        == "only 19 prompts: the interval is wide and the win rate may mislead"
    )
    assert small_sample_note(20) is None
