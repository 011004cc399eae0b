"""rlcw.metrics.heldout on hand-worked numbers."""

import math

import numpy as np
import pytest

from rlcw.metrics.heldout import length_slope, paired_bootstrap, paired_stats


def _pair():
    # 2 prompts x 2 samples. start: scores 1,3 | 2,2 ; tuned: 2,3 | 1,4
    s = {
        "score": [[1.0, 3.0], [2.0, 2.0]],
        "words": [[10, 20], [10, 20]],
        "finished": [[0, 1], [0, 0]],
        "in_range": [[0, 1], [0, 0]],
        "rep": [[0.0, 0.0], [0.0, 0.1]],
    }
    f = {
        "score": [[2.0, 3.0], [1.0, 4.0]],
        "words": [[10, 20], [10, 20]],
        "finished": [[1, 1], [0, 1]],
        "in_range": [[1, 1], [0, 1]],
        "rep": [[0.0, 0.0], [0.0, 0.0]],
    }
    return s, f


def test_paired_stats_by_hand():
    st = paired_stats(*_pair())
    # deltas: +1, 0, -1, +2 -> mean 0.5; wins 1 + 0.5 + 0 + 1 = 2.5 / 4
    assert st["rm_delta"] == pytest.approx(0.5) and st["win_rate"] == pytest.approx(0.625)
    assert st["in_range_start"] == 0.25 and st["in_range_final"] == 0.75 and st["in_range_delta"] == 0.5
    assert st["finished_start"] == 0.25 and st["finished_final"] == 0.75
    # both finished: pair (0,1) delta 0; both cut: pair (1,0) delta -1
    assert st["rm_delta_both_finished"] == 0.0 and st["rm_delta_both_cut"] == -1.0
    # start: finished score 3, cut scores 1,2,2 -> mean 5/3; gap 4/3; explained = 0.5 * 4/3
    assert st["rm_gap_ended_minus_cut"] == pytest.approx(4 / 3)
    assert st["rm_delta_from_ending"] == pytest.approx(2 / 3)
    # same words for both policies: length control changes nothing
    assert st["rm_delta_length_controlled"] == pytest.approx(0.5)


def test_length_controlled_change_removes_the_length_slope():
    # score = 2 * log1p(words) exactly; the tuned policy only writes longer: its whole gain is length
    s = {"score": 2 * np.log1p([[10.0, 30.0]]), "words": [[10, 30]], "finished": [[0, 0]], "in_range": [[0, 0]]}
    s["rep"] = [[0, 0]]
    f = dict(s, score=2 * np.log1p([[20.0, 40.0]]), words=[[20, 40]])
    assert length_slope(s["score"], s["words"]) == pytest.approx(2.0)
    st = paired_stats(s, f)
    assert st["rm_delta"] > 0.5 and st["rm_delta_length_controlled"] == pytest.approx(0.0, abs=1e-9)
    assert math.isnan(st["rm_delta_both_finished"]) and math.isnan(st["rm_gap_ended_minus_cut"])


def test_bootstrap_intervals_cover_the_estimate_and_a_constant_change_has_no_width():
    s, f = _pair()
    out = paired_bootstrap(s, f, n_resamples=500, seed=1)
    assert out["rm_delta_lo"] <= out["rm_delta"] <= out["rm_delta_hi"]
    const = dict(s, score=np.asarray(s["score"]) + 0.3)
    out2 = paired_bootstrap(s, const, n_resamples=200)
    assert out2["rm_delta_lo"] == pytest.approx(0.3) and out2["rm_delta_hi"] == pytest.approx(0.3)
    assert out2["prompts_needed"] <= 1.0 and out2["n_prompts"] == 2.0


def test_shapes_are_checked():
    s, f = _pair()
    with pytest.raises(ValueError, match="missing 'rep'"):
        paired_stats({k: v for k, v in s.items() if k != "rep"}, f)
    with pytest.raises(ValueError, match="shape"):
        paired_stats(s, dict(f, words=[[1, 2, 3], [1, 2, 3]]))


def test_in_range_counts_only_stories_that_ended():
    from rlcw.measure.heldout import add_scores, as_arrays

    class Scorer:
        def score(self, prompts, stories):
            return [float(len(s.split())) for s in stories]

    recs = [  # range 3-5 words: ended inside, cut with 4 words, ended with 2 words (short), ended with 7
        {"prompt": "p", "story": "a b c d", "finished": True, "min_words": 3, "max_words": 5},
        {"prompt": "p", "story": "a b c d", "finished": False, "min_words": 3, "max_words": 5},
        {"prompt": "p", "story": "a b", "finished": True, "min_words": 3, "max_words": 5},
        {"prompt": "p", "story": "a b c d e f g", "finished": True, "min_words": 3, "max_words": 5},
    ]
    for i, r in enumerate(recs):
        r.update(prompt_index=i // 2, sample_index=i % 2)
    out = add_scores(recs, Scorer())
    assert [r["in_range"] for r in out] == [True, False, False, False]
    assert [r["in_range_words"] for r in out] == [True, True, False, False]
    assert [r["ended_short"] for r in out] == [False, False, True, False]
    a = as_arrays(out, 2, 2)
    assert a["in_range"].tolist() == [[1, 0], [0, 0]] and a["ended_short"].tolist() == [[0, 0], [1, 0]]
    st = paired_stats(a, a)
    assert st["in_range_start"] == 0.25 and st["in_range_words_start"] == 0.5 and st["ended_short_final"] == 0.25


def test_short_rise_minus_in_range_rise_is_a_paired_statistic_with_an_interval():
    from rlcw.metrics.heldout import paired_bootstrap, paired_stats

    z = np.zeros((4, 2))
    s = {"score": z, "words": z + 40, "finished": z, "in_range": z, "rep": z, "ended_short": z}
    f = dict(s, finished=z + 1)
    # 8 pairs: 4 new endings below the range, 2 inside it -> 0.5 - 0.25
    f["ended_short"] = np.array([[1, 1], [1, 1], [0, 0], [0, 0]], dtype=float)
    f["in_range"] = np.array([[0, 0], [0, 0], [1, 1], [0, 0]], dtype=float)
    assert paired_stats(s, f)["short_rise_minus_in_range_rise"] == 0.25
    b = paired_bootstrap(s, f, n_resamples=200)
    assert b["short_rise_minus_in_range_rise_lo"] <= 0.25 <= b["short_rise_minus_in_range_rise_hi"]
    assert "short_rise_minus_in_range_rise" not in paired_stats({k: v for k, v in s.items() if k != "ended_short"}, f)


def test_short_of_ended_is_the_share_of_endings_below_the_range():
    from rlcw.metrics.heldout import paired_bootstrap, paired_stats

    # start: 2 of 8 ended, 1 of them short -> 0.5; tuned: 6 of 8 ended, 2 of them short -> 1/3. The share ending too
    # short rose 1/8 -> 2/8 while the share of endings below the range fell.
    s = {
        "score": np.zeros((4, 2)),
        "words": np.full((4, 2), 40.0),
        "finished": np.array([[1, 1], [0, 0], [0, 0], [0, 0]], dtype=float),
        "in_range": np.array([[1, 0], [0, 0], [0, 0], [0, 0]], dtype=float),
        "rep": np.zeros((4, 2)),
        "ended_short": np.array([[0, 1], [0, 0], [0, 0], [0, 0]], dtype=float),
    }
    f = dict(s)
    f["finished"] = np.array([[1, 1], [1, 1], [1, 1], [0, 0]], dtype=float)
    f["ended_short"] = np.array([[0, 1], [1, 0], [0, 0], [0, 0]], dtype=float)
    st = paired_stats(s, f)
    assert st["short_of_ended_start"] == 0.5 and st["short_of_ended_final"] == pytest.approx(1 / 3)
    assert st["short_of_ended_delta"] == pytest.approx(-1 / 6)
    assert st["ended_short_delta"] == 0.125
    b = paired_bootstrap(s, f, n_resamples=300)
    assert b["short_of_ended_delta_lo"] <= -1 / 6 <= b["short_of_ended_delta_hi"]
    none_ended = dict(f, finished=np.zeros((4, 2)), ended_short=np.zeros((4, 2)))
    assert np.isnan(paired_stats(s, none_ended)["short_of_ended_final"])


def test_prompts_needed_is_the_80_percent_power_count_for_rm_and_in_range():
    # per-prompt mean changes 0.1 and 0.3: mean 0.2, SD 0.1414; ((1.96 + 0.84) x 0.1414 / 0.2)^2 = 3.92 -> 4
    s = {"score": [[0.0, 0.0], [0.0, 0.0]], "words": [[40, 40]] * 2, "finished": [[1, 1]] * 2, "rep": [[0, 0]] * 2}
    s["in_range"] = [[0, 0], [0, 0]]
    f = dict(s, score=[[0.1, 0.1], [0.3, 0.3]], in_range=[[0, 0], [1, 0]])  # in-range change per prompt 0 and 0.5
    out = paired_bootstrap(s, f, n_resamples=50)
    assert out["rm_delta_prompt_sd"] == pytest.approx(0.1 * math.sqrt(2))
    assert out["prompts_needed"] == 4.0
    # in range: mean 0.25, SD 0.3536: ((2.8 x 0.3536 / 0.25)^2 = 15.68 -> 16
    assert out["in_range_prompt_sd"] == pytest.approx(0.5 / math.sqrt(2))
    assert out["in_range_prompts_needed"] == 16.0
    assert paired_bootstrap(s, s, n_resamples=20)["in_range_prompts_needed"] == math.inf


def test_variance_components_and_the_chance_a_bound_holds_hand_worked():
    from rlcw.metrics.heldout import bound_pass_chance, design_se, variance_components

    # prompt means 1 and 3 (variance 2); each prompt's two samples differ by 2 (variance 2): within 2, between 2 - 2/2
    assert variance_components(np.array([[0.0, 2.0], [2.0, 4.0]])) == pytest.approx((1.0, 2.0))
    assert variance_components(np.array([[0.0, 2.0], [0.0, 2.0]])) == pytest.approx((0.0, 2.0))  # floored at 0
    assert design_se(1.0, 2.0, prompts=4, samples=2) == pytest.approx(math.sqrt(0.5))
    # se 0.04: the upper end is the mean + 0.0784; a true change of 0 clears +0.05 when the mean <= -0.0284
    assert bound_pass_chance(0.0, 0.04, 0.05) == pytest.approx(0.2389, abs=1e-4)
    assert bound_pass_chance(-0.0284, 0.04, 0.05) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="2 prompts"):
        variance_components(np.zeros((5, 1)))
