"""Bradley-Terry: wins matrix and fits checked against hand-solved likelihood equations."""

from __future__ import annotations

import math

import pytest

from rlcw.metrics.bradley_terry import bt_strengths, win_probability, wins_matrix


def test_wins_matrix_counts_ties_as_half_each():
    systems, W = wins_matrix([("A", "B", 1.0), ("B", "A", 0.5), ("A", "C", 0.0)])
    assert systems == ["A", "B", "C"]
    # A-B: A won once, then a tie -> A 1.5, B 0.5; A-C: C won once.
    assert W.tolist() == [[0.0, 1.5, 0.0], [0.5, 0.0, 0.0], [1.0, 0.0, 0.0]]


def test_three_wins_to_one_is_log_three_apart():
    comps = [("A", "B", 1.0)] * 3 + [("B", "A", 1.0)]
    s = bt_strengths(comps, n_bootstrap=0, l2=0.0)
    # MLE: sigmoid(sA - sB) = 3/4 -> sA - sB = log 3, centred to +-log(3)/2.
    assert s["A"]["strength"] == pytest.approx(math.log(3) / 2, abs=1e-6)
    assert s["B"]["strength"] == pytest.approx(-math.log(3) / 2, abs=1e-6)
    assert s["A"]["ci_low"] == s["A"]["strength"] == s["A"]["ci_high"]


def test_ties_are_half_a_win():
    # one win + two ties for A -> 2 wins to 1 -> log 2 apart
    s = bt_strengths([("A", "B", 1.0), ("A", "B", 0.5), ("B", "A", 0.5)], n_bootstrap=0, l2=0.0)
    assert s["A"]["strength"] - s["B"]["strength"] == pytest.approx(math.log(2), abs=1e-6)


def test_three_systems_consistent_with_the_model_recover_it():
    # counts drawn exactly from sA=log2, sB=0, sC=-log2: A-B 2:1, B-C 2:1, A-C 4:1
    comps = (
        [("A", "B", 1.0)] * 2
        + [("B", "A", 1.0)]
        + [("B", "C", 1.0)] * 2
        + [("C", "B", 1.0)]
        + [("A", "C", 1.0)] * 4
        + [("C", "A", 1.0)]
    )
    s = bt_strengths(comps, n_bootstrap=0, l2=0.0)
    assert [s[k]["strength"] for k in "ABC"] == pytest.approx([math.log(2), 0.0, -math.log(2)], abs=1e-6)
    assert win_probability(s, "A", "C") == pytest.approx(0.8, abs=1e-6)


def test_prior_keeps_an_unbeaten_system_finite():
    l2 = 0.01
    s = bt_strengths([("A", "B", 1.0)], n_bootstrap=0, l2=l2)
    d = s["A"]["strength"] - s["B"]["strength"]
    # stationarity for A (sA = d/2): 1 - sigmoid(d) = l2 * d / 2
    assert 0 < d < 20
    assert 1 - 1 / (1 + math.exp(-d)) == pytest.approx(l2 * d / 2, rel=1e-4)


def test_bootstrap_interval_contains_point_and_is_reproducible():
    comps = [("A", "B", 1.0)] * 6 + [("B", "A", 1.0)] * 2 + [("A", "B", 0.5)] * 2
    s1 = bt_strengths(comps, n_bootstrap=100, seed=1)
    s2 = bt_strengths(comps, n_bootstrap=100, seed=1)
    assert s1 == s2
    a = s1["A"]
    assert a["ci_low"] < a["strength"] < a["ci_high"]
    assert a["strength"] == pytest.approx(-s1["B"]["strength"])


def test_balanced_results_give_zero_strengths():
    s = bt_strengths([("A", "B", 1.0), ("B", "A", 1.0), ("A", "B", 0.5)], n_bootstrap=0)
    assert s["A"]["strength"] == pytest.approx(0.0, abs=1e-8)


@pytest.mark.parametrize("bad", [[], [("A", "A", 1.0)], [("A", "B", 1.5)], [("A", "B", -0.1)]])
def test_bad_comparisons_are_rejected(bad):
    with pytest.raises(ValueError):
        wins_matrix(bad)
