"""RM-ensemble aggregates on hand-worked numbers (rlcw.rm.aggregate)."""

from __future__ import annotations

import math

import pytest

from rlcw.rm.aggregate import aggregate, agreement, disagreement, member_variance

# 3 members x 2 items. Item 0: scores 1, 2, 6 -> mean 3, population variance (4 + 1 + 9) / 3 = 14/3.
# Item 1: scores 0, 0, 3 -> mean 1, variance (1 + 1 + 4) / 3 = 2.
MEMBERS = [[1.0, 0.0], [2.0, 0.0], [6.0, 3.0]]


def test_mean():
    assert aggregate(MEMBERS, "mean") == pytest.approx([3.0, 1.0])


def test_wco_is_the_minimum_over_members():
    assert aggregate(MEMBERS, "wco") == pytest.approx([1.0, 0.0])


def test_uwo_subtracts_lambda_times_population_variance():
    assert member_variance(MEMBERS) == pytest.approx([14 / 3, 2.0])
    # 3 - 0.5 * 14/3 = 2/3; 1 - 0.5 * 2 = 0
    assert aggregate(MEMBERS, "uwo", lam=0.5) == pytest.approx([2 / 3, 0.0])
    assert aggregate(MEMBERS, "uwo", lam=0.0) == pytest.approx(aggregate(MEMBERS, "mean"))


def test_uwo_can_reorder_items_that_mean_ranks_the_other_way():
    # item 0 has the higher mean (3 vs 1) but much more disagreement: lambda 1 ranks it below item 1
    uwo = aggregate(MEMBERS, "uwo", lam=1.0)
    assert uwo == pytest.approx([3 - 14 / 3, -1.0])
    assert uwo[0] < uwo[1]


def test_disagreement_is_the_population_std():
    assert disagreement(MEMBERS) == pytest.approx([math.sqrt(14 / 3), math.sqrt(2.0)])
    assert disagreement([[5.0], [5.0]]) == [0.0]


def test_one_member_is_itself_under_every_aggregate():
    for how in ("mean", "wco", "uwo"):
        assert aggregate([[0.3, -1.2]], how, lam=2.0) == pytest.approx([0.3, -1.2])


def test_agreement_counts_pairs_where_every_member_gives_the_same_verdict():
    chosen = [[1.0, 1.0, 0.0], [2.0, 0.0, 0.0]]
    rejected = [[0.0, 0.0, 1.0], [1.0, 1.0, 1.0]]
    # pair 0: both prefer chosen; pair 1: member 0 chosen, member 1 rejected; pair 2: both rejected -> 2/3
    assert agreement(chosen, rejected) == pytest.approx(2 / 3)


def test_bad_input_is_an_error():
    with pytest.raises(ValueError, match="unknown ensemble aggregate 'max'"):
        aggregate(MEMBERS, "max")
    with pytest.raises(ValueError, match="lambda must be >= 0"):
        aggregate(MEMBERS, "uwo", lam=-1.0)
    with pytest.raises(ValueError, match="different numbers of items"):
        aggregate([[1.0], [1.0, 2.0]], "mean")
