"""rlcw.metrics.stories and metrics.pairwise.side_agreement: hand-worked numbers."""

import math

import pytest

from rlcw.metrics.pairwise import side_agreement
from rlcw.metrics.stories import in_range_share, mean, repetition_stats


def test_in_range_share_is_inclusive_and_skips_stories_without_a_range():
    assert in_range_share([3, 5, 6, 9], [(3, 5), (3, 5), (3, 5), None]) == pytest.approx(2 / 3)
    assert in_range_share([4], [None]) is None


def test_repetition_stats_by_hand():
    # story 1 trigrams: abc, bca, cab, abc -> 1 repeat of 4 = 0.25; story 2: xyz -> 0; mean 0.125
    # across: 5 trigrams, 4 distinct -> 0.8
    assert repetition_stats(["a b c a b c", "x y z"]) == {
        "intra_trigram_rep": pytest.approx(0.125),
        "distinct_3": pytest.approx(0.8),
    }
    assert math.isnan(mean([]))


def test_side_agreement_with_and_without_ties():
    dx, dy = [1.0, -2.0, 0.0, 3.0], [0.5, 1.0, -1.0, 0.0]
    # same side: pair 1 yes, pair 2 no, pair 3 (0 = 'not first' vs 'second') yes, pair 4 no -> 2 / 4
    assert side_agreement(dx, dy, skip_ties=False) == (pytest.approx(0.5), 4)
    assert side_agreement(dx, dy, skip_ties=True) == (pytest.approx(0.5), 2)  # pairs 3 and 4 left out
    share, n = side_agreement([0.0], [1.0], skip_ties=True)
    assert math.isnan(share) and n == 0
