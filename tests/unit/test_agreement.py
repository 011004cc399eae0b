"""Agreement metrics and `rlcw agreement`, checked against numbers worked by hand."""

from __future__ import annotations

import json
import math

import pytest

from rlcw.cli import run as rlcw_run
from rlcw.errors import RlcwError
from rlcw.metrics.agreement import fleiss_kappa, group_agreement, kendall_tau_b, pairwise_accuracy, spearman

SQRT3_2 = math.sqrt(3) / 2  # 1.5 / sqrt(1.5 * 2): one tie among three items
TAU_B_ONE_TIE = 2 / math.sqrt(6)  # nc=2, nd=0, n0=3, one tied pair in one variable


def test_no_ties():
    # ranks [1,2,3] vs [1,3,2]: sum d^2 = 2 -> 1 - 6*2/(3*8) = 0.5; one discordant pair of 3
    assert spearman([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert kendall_tau_b([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    assert pairwise_accuracy([1, 2, 3], [1, 3, 2]) == pytest.approx(2 / 3)


def test_human_tie_uses_average_ranks_and_tau_b():
    human, judge = [1, 1, 2], [1, 2, 3]
    assert spearman(human, judge) == pytest.approx(SQRT3_2)
    assert kendall_tau_b(human, judge) == pytest.approx(TAU_B_ONE_TIE)
    assert pairwise_accuracy(human, judge, "half") == 1.0  # tied pair skipped, 2/2
    assert pairwise_accuracy(human, judge, "strict") == 1.0
    assert pairwise_accuracy(human, judge, "exact") == pytest.approx(2 / 3)


def test_judge_tie_under_each_rule():
    human, judge = [1, 2, 3], [5, 5, 6]
    assert pairwise_accuracy(human, judge, "half") == pytest.approx(2.5 / 3)
    assert pairwise_accuracy(human, judge, "strict") == pytest.approx(2 / 3)
    assert pairwise_accuracy(human, judge, "exact") == pytest.approx(2 / 3)
    assert spearman(human, judge) == pytest.approx(SQRT3_2)


def test_constant_group_counts_as_zero_and_has_no_accuracy():
    assert spearman([2, 2, 2], [1, 2, 3]) == 0.0
    assert kendall_tau_b([1, 2, 3], [4, 4, 4]) == 0.0
    assert spearman([1], [1]) == 0.0
    assert pairwise_accuracy([2, 2, 2], [1, 2, 3], "half") is None
    assert pairwise_accuracy([2, 2, 2], [1, 2, 3], "exact") == 0.0
    with pytest.raises(ValueError):
        pairwise_accuracy([1, 2], [1, 2], "lenient")


ROWS = [
    ("g1", "X", 1, 1),
    ("g1", "Y", 2, 3),
    ("g1", "Z", 3, 2),
    ("g2", "X", 1, 1),
    ("g2", "Y", 1, 2),
    ("g2", "Z", 2, 3),
    ("g3", "X", 2, 1),
    ("g3", "Y", 2, 2),
    ("g3", "Z", 2, 3),
]


def test_group_means_are_unweighted_and_constant_group_counts_as_zero():
    r = group_agreement(ROWS)
    assert r["mean_spearman"] == pytest.approx((0.5 + SQRT3_2 + 0.0) / 3)
    assert r["mean_kendall"] == pytest.approx((1 / 3 + TAU_B_ONE_TIE + 0.0) / 3)
    assert r["mean_pairwise_accuracy"] == pytest.approx((2 / 3 + 1.0) / 2)  # g3 has no countable pair
    assert r["groups"]["g3"]["pairwise_accuracy"] is None


def test_system_and_item_level_correlations():
    rows = ROWS[:6]
    r = group_agreement(rows)
    # per-system means: human X 1, Y 1.5, Z 2.5; judge X 1, Y 2.5, Z 2.5 -> 1.5 / sqrt(2 * 1.5)
    assert r["system_level"]["spearman"] == pytest.approx(SQRT3_2)
    assert r["system_level"]["n"] == 3
    # pooled ranks: human [2,4.5,6,2,2,4.5], judge [1.5,5.5,3.5,1.5,3.5,5.5]: cov 10, var 15 and 16
    assert r["item_level"]["spearman"] == pytest.approx(10 / math.sqrt(240))
    assert r["item_level"]["n"] == 6


def test_fleiss_kappa_by_hand():
    # P_i = 1, 1, 0 -> P = 2/3; p_A = p_B = 1/2 -> Pe = 1/2; kappa = (2/3 - 1/2) / (1/2) = 1/3
    assert fleiss_kappa([["A", "A"], ["B", "B"], ["A", "B"]]) == pytest.approx(1 / 3)
    assert fleiss_kappa([["A", "A"], ["A", "A"]]) == 1.0
    with pytest.raises(ValueError):
        fleiss_kappa([["A", "A"], ["A"]])


def _csv(tmp_path, text):
    path = tmp_path / "scores.csv"
    path.write_text(text)
    return path


def test_cli_json(tmp_path, capsys):
    body = "group,item,human_score,judge_score\n" + "".join(f"{g},{i},{h},{j}\n" for g, i, h, j in ROWS)
    assert rlcw_run(["agreement", str(_csv(tmp_path, body)), "--json", "--tie-rule", "strict"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mean_spearman"] == pytest.approx((0.5 + SQRT3_2) / 3)
    assert out["mean_pairwise_accuracy"] == pytest.approx((2 / 3 + 1.0) / 2)
    assert out["groups"]["g2"]["kendall"] == pytest.approx(TAU_B_ONE_TIE)
    assert rlcw_run(["agreement", str(_csv(tmp_path, body))]) == 0
    table = capsys.readouterr().out
    assert "mean (unweighted)" in table and "system-level" in table and "tie rule: half" in table


@pytest.mark.parametrize(
    "body, where",
    [
        ("group,item,human\n", "scores.csv:1"),
        ("group,item,human_score,judge_score\ng,a,1,2\ng,b,high,2\n", "scores.csv:3 field 'human_score'"),
        ("group,item,human_score,judge_score\ng,a,1,\n", "scores.csv:2 field 'judge_score'"),
        ("group,item,human_score,judge_score\n,a,1,2\n", "scores.csv:2 field 'group'"),
        ("group,item,human_score,judge_score\ng,a,1,2\ng,a,2,2\n", "scores.csv:3 field 'item'"),
        ("group,item,human_score,judge_score\ng,a,1,2,9\n", "scores.csv:2"),
        ("group,item,human_score,judge_score\ng,a,nan,2\n", "scores.csv:2 field 'human_score'"),
    ],
)
def test_cli_bad_rows_name_line_and_column(tmp_path, body, where):
    with pytest.raises(RlcwError) as err:
        rlcw_run(["agreement", str(_csv(tmp_path, body))])
    assert where in str(err.value)


def test_the_one_spearman_says_what_undefined_is():
    assert spearman([1, 1, 1], [1, 2, 3]) == 0.0  # agreement: a constant group counts 0
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3], undefined=float("nan")))  # monitors: undefined stays NaN
    assert spearman([1, 2, 3], [3, 2, 1], undefined=float("nan")) == pytest.approx(-1.0)


def test_a_handful_of_rated_items_is_warned_under_the_table(tmp_path, capsys):
    body = "group,item,human_score,judge_score\n" + "".join(f"{g},{i},{h},{j}\n" for g, i, h, j in ROWS)
    assert rlcw_run(["agreement", str(_csv(tmp_path, body))]) == 0
    assert f"warning: only {len(ROWS)} rated items: the interval is wide" in capsys.readouterr().out
