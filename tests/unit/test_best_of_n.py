"""Best-of-n selection on hand-made scores; the analytic KL bound by hand."""

from __future__ import annotations

import math

import pytest

from rlcw.errors import RlcwError
from rlcw.rewards.best_of_n import (
    best_index,
    best_of_weights,
    check_sizes,
    default_sizes,
    kl_best_of,
    select_best_of,
)


def test_best_index_among_first_k_ties_to_lowest():
    scores = [0.1, 0.7, 0.7, 0.2, 0.9]
    assert [best_index(scores, k) for k in (1, 2, 3, 4, 5)] == [0, 1, 1, 1, 4]
    assert best_index([-2.0, -1.0, -1.0], 3) == 1
    assert best_index([0.5, 0.5, 0.5], 3) == 0
    with pytest.raises(ValueError):
        best_index([0.1, 0.2], 3)


def test_select_best_of_per_prompt():
    pools = [[0.3, 0.1, 0.9, 0.2], [1.0, 2.0, 0.0, 2.0], [0.0, -1.0, -2.0, 5.0]]
    assert select_best_of(pools, 1) == [0, 0, 0]
    assert select_best_of(pools, 2) == [0, 1, 0]
    assert select_best_of(pools, 4) == [2, 1, 3]


def test_kl_bound_hand_computed():
    assert kl_best_of(1) == 0.0
    assert kl_best_of(2) == pytest.approx(0.693147 - 0.5, abs=1e-6)  # log 2 - 1/2 = 0.193147
    assert kl_best_of(4) == pytest.approx(1.386294 - 0.75, abs=1e-6)  # 0.636294
    assert kl_best_of(8) == pytest.approx(2.079442 - 0.875, abs=1e-6)  # 1.204442
    assert kl_best_of(16) == pytest.approx(math.log(16) - 15 / 16)
    with pytest.raises(ValueError):
        kl_best_of(0)


def test_sizes():
    assert default_sizes(1) == [1]
    assert default_sizes(8) == [1, 2, 4, 8]
    assert default_sizes(6) == [1, 2, 4, 6]
    assert check_sizes([4, 1, 4], 4) == [1, 4]
    with pytest.raises(RlcwError, match="best_of.sizes"):
        check_sizes([1, 5], 4)


def test_best_of_weights_by_hand():
    # ranks by score: 0.1 (index 2) = 1, 0.3 (index 0) = 2, 0.9 (index 1) = 3; C(3, 2) = 3 subsets of 2:
    # {0,1} -> 1, {0,2} -> 0, {1,2} -> 1: index 1 wins 2 of 3, index 0 wins 1 of 3, index 2 never
    assert best_of_weights([0.3, 0.9, 0.1], 2) == pytest.approx([1 / 3, 2 / 3, 0.0])
    assert best_of_weights([0.3, 0.9, 0.1], 1) == pytest.approx([1 / 3] * 3)
    assert best_of_weights([0.3, 0.9, 0.1], 3) == [0.0, 1.0, 0.0]
    # a tie ranks the lower index higher, as best_index picks it: {0,1} -> 0, {0,2} -> 2, {1,2} -> 2
    assert best_of_weights([0.5, 0.5, 0.7], 2) == pytest.approx([1 / 3, 0.0, 2 / 3])
    with pytest.raises(ValueError):
        best_of_weights([0.1, 0.2], 3)


def test_best_of_weights_match_every_subset_enumerated():
    from itertools import combinations

    scores = [0.4, -1.0, 2.0, 0.4, 1.5]
    for n in range(1, 6):
        wins = [0] * 5
        subsets = list(combinations(range(5), n))
        for sub in subsets:
            wins[sub[best_index([scores[i] for i in sub], n)]] += 1
        assert best_of_weights(scores, n) == pytest.approx([w / len(subsets) for w in wins])


def test_a_nan_score_never_wins():
    nan = math.nan
    assert best_index([nan, 0.2, 0.1], 3) == 1  # a rubric story with no valid verdict has no score
    assert best_index([0.1, nan, 0.3], 3) == 2 and best_index([0.1, nan, 0.3], 2) == 0
    assert best_index([nan, nan], 2) == 0  # nothing scored: the first, as with ties
