"""Pairwise evaluation maths with hand-worked numbers; batching of the shared BT scorer."""

from __future__ import annotations

import pytest

from rlcw.metrics import pairwise as pw
from rlcw.rm.scoring import length_batches


def test_outcomes_and_accuracy():
    assert pw.pair_outcomes([2, 0.1, 1], [1, 0.3, 1]) == [1.0, 0.0, 0.5]
    assert pw.pairwise_accuracy([2, 0.1, 1], [1, 0.3, 1]) == pytest.approx(0.5)
    assert (
        pw.length_baseline_accuracy([{"chosen": "a b c", "rejected": "a"}, {"chosen": "a", "rejected": "a b"}]) == 0.5
    )


def test_length_direction_and_means():
    split = pw.length_direction([5, 3, 4], [3, 5, 4])
    assert split == {"chosen_longer": [0], "chosen_shorter": [1], "equal_length": [2]}
    assert pw.mean_of([1.0, 0.0, 0.5], [0, 2]) == 0.75 and pw.mean_of([1.0], []) is None


def test_length_correlation():
    out = pw.length_correlation([1.0, 2.0, 4.0], [10, 20, 30])
    assert out["spearman"] == pytest.approx(1.0) and out["pearson"] == pytest.approx(0.9819805, abs=1e-6)
    assert pw.length_correlation([1.0, 1.0, 1.0], [1, 2, 3]) == {"pearson": None, "spearman": None}


def test_order_consistency_and_averaging():
    fwd, bwd = [0.9, 0.8, 0.5, None], [0.2, 0.7, 0.4, 0.1]
    # pair 1: says chosen in both orders (consistent); pair 2: 'first' both times; pair 3: 0.5 = no verdict; pair 4 invalid
    assert pw.order_consistency(fwd, bwd) == pytest.approx(1 / 3)
    avg = pw.averaged_preference(fwd, bwd)
    assert avg[:3] == pytest.approx([0.85, 0.55, 0.55]) and avg[3] is None
    assert pw.prob_outcomes([0.85, 0.5, 0.2]) == [1.0, 0.5, 0.0]
    # votes for 'first': 0.9, 0.8, 0.5(half), 0.2(no), 0.7, 0.4(no), 0.1(no) -> 3.5 / 7
    assert pw.first_position_rate(fwd, bwd) == pytest.approx(0.5)
    assert pw.order_consistency([None], [None]) is None


def test_length_batches_respect_rows_budget_and_padding():
    lengths = [100, 10, 12, 11, 300, 105]
    assert length_batches(lengths, batch_size=2) == [[1, 3], [2, 0], [5, 4]]
    # budget 250 padded tokens: [10, 11, 12] fits (36), 100 alone would make 4 x 100 = 400
    assert length_batches(lengths, batch_size=8, token_budget=250) == [[1, 3, 2], [0, 5], [4]]
    # at most 5% padding: 10/11/12 -> 3 x 12 = 36 vs 33 real (9%): split
    assert length_batches(lengths, batch_size=8, max_padding=0.05) == [[1, 3], [2], [0, 5], [4]]


def test_consistent_share_counts_same_outcome_for_the_same_story_in_both_orders():
    # win/win, tie/tie, win/loss, one invalid order -> 2 consistent of 3 with both orders
    assert pw.consistent_share([1.0, 0.5, 1.0, None], [1.0, 0.5, 0.0, 1.0]) == (pytest.approx(2 / 3), 3)
    assert pw.consistent_share([None], [1.0]) == (None, 0)
    # probabilities: 0.5 both times is a tie both times (consistent), 0.5 then a verdict is not
    assert pw.order_consistency([0.5, 0.5], [0.5, 0.4]) == pytest.approx(0.5)


def test_two_order_metrics_by_hand():
    fwd, bwd = [0.9, 0.8, 0.3, None], [0.2, 0.7, 0.6, 0.1]
    # averaged: 0.85 (right), 0.55 (right), 0.35 (wrong), None (pair 4 lacks an order)
    m = pw.two_order_metrics(fwd, bwd)
    assert m["accuracy"] == pytest.approx(2 / 3) and m["pairs_scored"] == 3.0
    assert m["order_consistency"] == pytest.approx(2 / 3)  # pair 2 says 'first' both times
    assert m["invalid_chosen_first"] == 1.0 and m["invalid_rejected_first"] == 0.0
    # first-position votes: 0.9, 0.8, 0.3(no) | 0.2(no), 0.7, 0.6, 0.1(no) -> 4 / 7
    assert m["first_position_rate"] == pytest.approx(4 / 7)
    assert pw.two_order_metrics([None], [0.4])["accuracy"] is None
