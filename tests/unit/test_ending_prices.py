"""What an RM pays for ending, ending short and words (rlcw.metrics.ending) on hand-worked numbers."""

from __future__ import annotations

import math

import pytest

from rlcw.metrics.ending import ending_prices

# story:     0      1      2      3      4
SCORES = [3.0, 1.0, 2.0, -1.0, 0.0]
WORDS = [10, 30, 20, 60, 70]
ENDED = [True, True, True, False, False]
SHORT = [True, False, False, False, False]  # story 0 ended below its range
GROUPS = ["a", "b", "c", "a", "b"]


def test_prices_by_hand():
    p = ending_prices(SCORES, WORDS, ENDED, SHORT, GROUPS, n_resamples=200)
    assert p["ending_gap"] == pytest.approx(2.0 - (-0.5))  # ended mean (3+1+2)/3 = 2, cut mean -0.5
    assert p["short_gap"] == pytest.approx(3.0 - 1.5)  # short ended 3 vs other ended (1+2)/2
    assert p["word_slope"] == pytest.approx(-0.1)  # ended: (10, 3), (20, 2), (30, 1); cut stories do not count
    assert (p["stories"], p["ended"], p["ended_short"]) == (5, 3, 1)


def test_interval_brackets_the_estimate_when_defined():
    scores = [s + 0.1 * i for i, s in enumerate(SCORES * 4)]
    p = ending_prices(scores, WORDS * 4, ENDED * 4, [False] * 20, [g + str(i // 5) for i, g in enumerate(GROUPS * 4)])
    assert p["ending_gap_lo"] <= p["ending_gap"] <= p["ending_gap_hi"]
    assert p["ending_gap_lo"] < p["ending_gap_hi"]
    assert math.isnan(p["short_gap"])  # no story ended short: undefined, never 0


def test_undefined_prices_are_nan():
    p = ending_prices([1.0, 2.0], [10, 20], [True, True], [False, False], n_resamples=20)
    assert math.isnan(p["ending_gap"]) and math.isnan(p["short_gap"])  # nothing was cut / nothing ended short
    assert p["word_slope"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="no stories"):
        ending_prices([], [], [], [])


def test_start_samples_priced_and_reported_in_the_quickstart_table():
    from rlcw.measure.heldout import start_ending_prices
    from rlcw.recipes.quickstart import heldout_table

    start = [
        {"score": s, "words": w, "finished": e, "ended_short": sh, "prompt_id": g}
        for s, w, e, sh, g in zip(SCORES, WORDS, ENDED, SHORT, GROUPS, strict=True)
    ]
    h = start_ending_prices(start, n_resamples=50, seed=0)
    assert h["start_ending_gap"] == pytest.approx(2.5) and h["start_short_gap"] == pytest.approx(1.5)
    base = {
        k: 0.0
        for k in (
            "rm_start rm_final rm_delta win_rate in_range_start in_range_final in_range_delta finished_start "
            "finished_final words_start words_final rep_start rep_final rm_delta_both_finished rm_delta_both_cut "
            "rm_delta_from_ending rm_gap_ended_minus_cut rm_delta_length_controlled rm_delta_prompt_sd "
            "in_range_prompt_sd prompts_needed in_range_prompts_needed n_prompts n_samples"
        ).split()
    }
    text = "\n".join(heldout_table({**base, **h}))
    assert "for ending (ended minus cut) +2.50 [" in text
    assert "for ending below the range (minus ended inside/above) +1.50 [" in text
    assert "per 10 words within ended stories -1.000 [" in text
