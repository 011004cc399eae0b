"""Aggregation and protocol bookkeeping with hand-worked numbers."""

from __future__ import annotations

import math

import pytest

from rlcw.judges.aggregate import (
    invalid_counts,
    length_controlled_win_rate,
    order_consistency,
    oriented,
    summarize_judgments,
    win_rates,
)
from rlcw.judges.clients.base import ClientConfig
from rlcw.judges.clients.factory import make_client
from rlcw.judges.protocols import Pair, judge_side_by_side, judge_ttcw, pair_outcomes, ttcw_story_scores
from rlcw.judges.templates import TTCW_TESTS, load_template


def test_length_controlled_win_rate_hand_worked():
    # X longer by 100 words in 8 judgments (6 wins), shorter by 100 in 2 (1 win). Two points, so the
    # logistic fit is exact: logit(6/8) = ln 3 at d=+1, logit(1/2) = 0 at d=-1 -> intercept ln3/2,
    # win rate at d=0 = sigmoid(ln 3 / 2) = sqrt3 / (1 + sqrt3) = 0.6340 (raw win rate 7/10 = 0.7).
    ys = [1.0] * 6 + [0.0] * 2 + [1.0, 0.0]
    ds = [100.0] * 8 + [-100.0] * 2
    assert length_controlled_win_rate(ys, ds) == pytest.approx(math.sqrt(3) / (1 + math.sqrt(3)), abs=1e-4)


def test_length_controlled_degenerate_cases():
    assert length_controlled_win_rate([1.0, 0.0, 0.5], [0, 0, 0]) == pytest.approx(0.5)  # no length gap: plain rate
    assert math.isnan(length_controlled_win_rate([1.0, 0.0], [50, 50]))  # constant non-zero gap: cannot extrapolate
    assert length_controlled_win_rate([1.0, 1.0], [10, -30]) == 1.0
    assert math.isnan(length_controlled_win_rate([], []))


def test_oriented_and_win_rates():
    js = [("x", "y", 1.0, 120, 100), ("y", "x", 0.5, 90, 100), ("y", "z", 0.0, 10, 20)]
    assert oriented(js, "x") == ([1.0, 0.5], [20.0, 10.0])
    # y: 0, 0.5, 0 -> 1/6; z: 1
    assert win_rates(js) == {"x": 0.75, "y": pytest.approx(1 / 6), "z": 1.0}


def _row(pid, order, a, b, value, dim="preferred"):
    v = {"value": value, "valid": value is not None, "reason": None if value else "hedge: 'a or b'"}
    return {
        "prompt_id": pid,
        "order": order,
        "system_a": a,
        "system_b": b,
        "words_a": 10,
        "words_b": 10,
        "verdicts": {dim: v},
    }


def test_order_consistency_and_invalid_counts():
    rows = [
        _row("p1", 0, "x", "y", "A"),
        _row("p1", 1, "y", "x", "B"),  # x wins twice: consistent
        _row("p2", 0, "x", "y", "A"),
        _row("p2", 1, "y", "x", "A"),  # position A wins twice: inconsistent
        _row("p3", 0, "x", "y", "Same"),
        _row("p3", 1, "y", "x", "Same"),  # tie twice: consistent
        _row("p4", 0, "x", "y", "A"),
        _row("p4", 1, "y", "x", None),  # one order invalid: not counted
    ]
    assert order_consistency(rows, "preferred") == (pytest.approx(2 / 3), 3)
    inv = invalid_counts(rows, "preferred")
    assert inv == {"judgments": 8, "valid": 7, "invalid": 1, "invalid_share": 0.125, "invalid_reasons": {"hedge": 1}}
    outs = pair_outcomes(rows, "preferred")
    assert len(outs) == 7 and ("y", "x", 0.0, 10, 10) in outs  # the invalid one is left out, not a tie


def test_summarize_wins_matrix_and_empty():
    js = [("x", "y", 1.0, 1, 1), ("y", "x", 0.0, 1, 1), ("x", "y", 0.5, 1, 1)]
    s = summarize_judgments(js, n_bootstrap=10)
    assert s["systems"] == ["x", "y"] and s["wins_matrix"] == [[0.0, 2.5], [0.5, 0.0]]
    assert s["bradley_terry"]["x"]["strength"] > 0 > s["bradley_terry"]["y"]["strength"]
    assert s["win_rate"]["x"] == pytest.approx(2.5 / 3)
    assert summarize_judgments([])["bradley_terry"] == {}


def test_side_by_side_judges_both_orders():
    seen = []

    def judge(messages):
        text = messages[-1]["content"]
        seen.append(text)
        return "Preferred: A" if text.index("LONGER STORY") < text.index("SHORT") else "Preferred: B"

    client = make_client(ClientConfig(kind="scripted"), script=judge)
    rows = judge_side_by_side(
        client,
        load_template("litbench_minimal"),
        [Pair("p", "Prompt", "x", "LONGER STORY", "y", "SHORT")],
        progress=False,
    )
    assert [(r["order"], r["system_a"], r["verdicts"]["preferred"]["value"]) for r in rows] == [
        (0, "x", "A"),
        (1, "y", "B"),
    ]
    assert pair_outcomes(rows, "preferred") == [("x", "y", 1.0, 2, 1), ("y", "x", 0.0, 1, 2)]
    assert "Writing prompt:\nPrompt" in seen[0]


def test_ttcw_reference_pass_rule_and_hybrid():
    # per test, orders 0 (candidate = A) and 1 (candidate = B); candidate scores by hand:
    # test 1: [[A>B]] (+1), [[A>B]] (-1) -> mean 0 -> pass;  test 2: [[A=B]] (0), [[A»B]] (-2) -> fail
    # test 9 (hybrid: baseline, no reference): "Answer: Yes" -> pass
    replies = iter(["Answer: Yes", "[[A>B]]", "[[A>B]]", "[[A=B]]", "[[A»B]]"])
    client = make_client(ClientConfig(kind="scripted"), script=lambda m: next(replies))
    story = {"prompt_id": "p", "prompt": "P", "story": "cand", "system": "x"}
    rows = judge_ttcw(client, "ttcw_hybrid", [story], {"p": "ref"}, test_ids=[1, 2, 9], progress=False)
    assert [(r["test"], r["protocol"], r["candidate_score"]) for r in rows] == [
        (9, "ttcw_baseline", 1.0),
        (1, "ttcw_reference", 1.0),
        (1, "ttcw_reference", -1.0),
        (2, "ttcw_reference", 0.0),
        (2, "ttcw_reference", -2.0),
    ]
    [score] = ttcw_story_scores(rows)
    assert score["score"] == 2 and score["tests_run"] == 3 and score["tests"] == {"1": True, "2": False, "9": True}


def test_ttcw_invalid_test_is_counted_not_failed():
    replies = iter(["[[A>B]]", "no label here"])
    client = make_client(ClientConfig(kind="scripted"), script=lambda m: next(replies))
    story = {"prompt_id": "p", "prompt": "P", "story": "cand", "system": "x"}
    [score] = ttcw_story_scores(
        judge_ttcw(client, "ttcw_reference", [story], {"p": "ref"}, test_ids=[5], progress=False)
    )
    assert score == {
        "system": "x",
        "prompt_id": "p",
        "score": 0,
        "tests_run": 1,
        "invalid_tests": 1,
        "tests": {"5": None},
    }


def test_ttcw_has_fourteen_tests_in_four_dimensions():
    assert [t[0] for t in TTCW_TESTS] == list(range(1, 15))
    assert [
        sum(1 for t in TTCW_TESTS if t[1] == d) for d in ("Fluency", "Flexibility", "Originality", "Elaboration")
    ] == [5, 3, 3, 3]
