"""Arms over seeds at matched KL: the non-parametric residual, the interpolation, the seed-then-prompt bootstrap
and the split-half peak, each on numbers worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from rlcw.metrics.overopt import split_prompts
from rlcw.outcome.seeds import Baseline, Cells, SeedReading, arm_seed, cell_sums, crossing


def rec(prompt: str, k: int, gold: float, words: float = 20.0, ended: bool = True) -> dict:
    return {"prompt_id": prompt, "sample_index": k, "scores": {"gold": gold}, "words": words, "finished": ended}


def test_crossing_is_the_first_segment_that_spans_the_target():
    assert crossing((0.0, 1.0, 3.0), 2.0) == (1, 0.5)
    assert crossing((0.0, 1.0, 3.0), 0.0) == (0, 0.0)
    assert crossing((0.0, 3.0, 1.0, 5.0), 2.0) == (0, pytest.approx(2 / 3))  # the first crossing, not a later one
    assert crossing((0.0, 1.0, 3.0), 4.0) is None


def test_cells_bin_words_by_quantiles_and_ending():
    cells = Cells.from_words([10, 20, 30, 40, 50], bins=2)
    assert cells.edges == (10.0, 30.0, 50.0) and cells.n == 4
    got = cells.index([25, 30, 50, 10, 5, 51], [1, 0, 1, 0, 1, 0]).tolist()
    assert got == [1, 2, 3, 0, -1, -1]  # below/above the start stories' words: outside, never extrapolated


def _hand_worked_reading() -> SeedReading:
    cells = Cells((0.0, 50.0, 100.0))  # 2 bins x ended = 4 cells
    prompts = ["A", "B"]
    # the start stories' gold by cell: (bin 0, ended) = mean(1, 3) = 2; (bin 1, not ended) = mean(0, 2) = 1
    slope = [rec("A", 2, 1.0, 10), rec("A", 3, 3.0, 40), rec("B", 2, 0.0, 60, False), rec("B", 3, 2.0, 90, False)]
    base = Baseline.of(*cell_sums(slope, "gold", prompts, cells), min_count=2)
    assert base.usable.tolist() == [False, True, True, False]
    start = [rec("A", 0, 2.5, 20), rec("B", 0, 1.0, 70, False)]  # residuals 0.5 and 0.0
    # residuals 2.0 and 0.5; the 150-word story is outside the start stories' range
    ckpt = [rec("A", 0, 4.0, 30), rec("B", 0, 1.5, 70, False), rec("B", 1, 0.5, 150, False)]
    run = arm_seed("grpo", 0, start, [(2.0, ckpt)], "gold", prompts, cells, base)
    return SeedReading({"grpo": [run]}, base, prompts, n_resamples=200, seed=0)


def test_residual_is_gold_minus_its_cell_mean_and_outside_stories_are_left_out():
    reading = _hand_worked_reading()
    res = reading.at_d("grpo", 2.0, "residual")
    assert res.delta == pytest.approx(1.0)  # A: 2.0 - 0.5, B: 0.5 - 0.0
    assert res.outside == pytest.approx(1 / 3)
    raw = reading.at_d("grpo", 2.0, "raw")
    assert raw.delta == pytest.approx(0.75)  # A: 4.0 - 2.5, B: mean(1.5, 0.5) - 1.0
    half = reading.at_d("grpo", 1.0, "residual")  # halfway to the checkpoint at d = 2
    assert half.delta == pytest.approx(0.5) and half.outside == pytest.approx(1 / 6)
    assert reading.at_d("grpo", 2.5, "raw") is None and reading.reached("grpo", 2.5) == 0


def _constant_seeds(values: list[float], prompts: list[str], d: float = 1.0) -> list:
    cells = Cells((0.0, 100.0))
    slope = [rec(p, 9, 0.0) for p in prompts]
    base = Baseline.of(*cell_sums(slope, "gold", prompts, cells), min_count=1)
    start = [rec(p, 0, 0.0) for p in prompts]
    return base, [
        arm_seed("arm", s, start, [(d, [rec(p, 0, v) for p in prompts])], "gold", prompts, cells, base)
        for s, v in enumerate(values)
    ]


def test_seed_level_interval_spans_the_seeds():
    # seeds whose every prompt changed by 0, 1 and 2: the estimate is 1; all three draws of a replicate pick the
    # lowest seed with probability 1/27 = 3.7% > 2.5%, so the 2.5th percentile is exactly 0 (and the 97.5th is 2)
    prompts = [f"p{i}" for i in range(10)]
    base, runs = _constant_seeds([0.0, 1.0, 2.0], prompts)
    est = SeedReading({"arm": runs}, base, prompts, n_resamples=4000, seed=1).at_d("arm", 1.0, "raw")
    assert est.delta == pytest.approx(1.0)
    assert est.ci_low == pytest.approx(0.0) and est.ci_high == pytest.approx(2.0)
    assert est.seeds == 3 and est.prompts == 10


def test_one_seed_interval_is_the_prompt_interval_and_diff_pairs_the_prompts():
    prompts = [f"p{i}" for i in range(10)]
    base, runs = _constant_seeds([1.0], prompts)
    _, other = _constant_seeds([3.0], prompts)
    other = [type(r)("other", r.seed, r.d, r.tables) for r in other]
    reading = SeedReading({"arm": runs, "other": other}, base, prompts, n_resamples=300, seed=0)
    one = reading.at_d("arm", 1.0, "raw")
    assert (one.delta, one.ci_low, one.ci_high) == pytest.approx((1.0, 1.0, 1.0))  # no spread anywhere
    diff = reading.diff("other", "arm", 0.5, "raw")
    assert (diff.delta, diff.ci_low, diff.ci_high) == pytest.approx((1.0, 1.0, 1.0))  # halfway: 1.5 - 0.5


def test_peak_is_chosen_on_one_half_and_read_on_the_other():
    prompts = [f"p{i}" for i in range(10)]
    select, test = split_prompts(prompts, seed=0)
    cells = Cells((0.0, 100.0))
    base = Baseline.of(*cell_sums([rec(p, 9, 0.0) for p in prompts], "gold", prompts, cells), min_count=1)
    start = [rec(p, 0, 0.0) for p in prompts]
    # checkpoint 1: selection +1, test +5; checkpoint 2: selection +2, test -3. Choosing on all prompts would pick
    # checkpoint 1 (mean 3 against -0.5); the selection half picks 2, and the test half reads -3 there
    one = [rec(p, 0, 1.0 if p in select else 5.0) for p in prompts]
    two = [rec(p, 0, 2.0 if p in select else -3.0) for p in prompts]
    run = arm_seed("arm", 0, start, [(1.0, one), (2.0, two)], "gold", prompts, cells, base)
    reading = SeedReading({"arm": [run]}, base, prompts, n_resamples=100, seed=0)
    assert reading.peaks("arm", "raw") == [2]
    peak = reading.peak("arm", "raw")
    assert peak.delta == pytest.approx(-3.0) and peak.prompts == len(test) and peak.d == 2.0


def test_baseline_refit_inside_the_bootstrap_widens_the_residual_interval():
    # the same per-prompt residual change but a baseline whose cell mean differs by prompt: resampling the
    # prompts moves the cell mean, so the story that changed cell carries that uncertainty into the interval
    prompts = [f"p{i}" for i in range(12)]
    cells = Cells((0.0, 50.0, 100.0))
    slope = [rec(p, 9, float(i % 3), 20) for i, p in enumerate(prompts)] + [rec(p, 8, 0.0, 80) for p in prompts]
    base = Baseline.of(*cell_sums(slope, "gold", prompts, cells), min_count=1)
    start = [rec(p, 0, 0.0, 80) for p in prompts]
    moved = [rec(p, 0, 0.0, 20) for p in prompts]  # every story moved to the short cell, same gold
    run = arm_seed("arm", 0, start, [(1.0, moved)], "gold", prompts, cells, base)
    est = SeedReading({"arm": [run]}, base, prompts, n_resamples=500, seed=0).at_d("arm", 1.0, "residual")
    assert est.delta == pytest.approx(-1.0)  # the short cell's mean is 1: moving there costs 1 of residual
    assert est.ci_high - est.ci_low > 0.2
    assert np.isfinite(est.ci_low)


def test_junk_section_shares_and_first_collapsed_step():
    from rlcw.outcome.arms import junk_section

    prose, junk = {"story": "The lighthouse keeper read the letter twice."}, {"story": "[[[[[[[[[["}
    lines, flat = junk_section(
        {"grpo": [(6, [prose, prose, prose, junk]), (12, [prose, junk, junk, junk])], "grpo_kl": [(6, [prose, prose])]}
    )
    assert flat == {"junk/grpo/step6": 0.25, "junk/grpo/step12": 0.75, "junk/grpo_kl/step6": 0.0}
    assert "| grpo | 6: 0.25, 12: 0.75 | 12 |" in lines
    assert "| grpo_kl | 6: 0.00 | - |" in lines
    assert junk_section({}) == ([], {})
    by_arm = {"grpo": "grpo", "grpo_seed1": "grpo", "grpo_kl": "grpo_kl"}
    runs = {"grpo": [(6, [junk])], "grpo_seed1": [(6, [prose]), (12, [junk, junk])], "grpo_kl": [(6, [prose])]}
    lines, _ = junk_section(runs, by_arm)
    assert (
        lines[-2]
        == "Seeds whose stories turned to junk, by arm (gold readings from that step on score junk): grpo 2 of 2 (from step 6, 12)."
    )
    lines, _ = junk_section({"grpo_kl": [(6, [prose])]}, {"grpo_kl": "grpo_kl"})
    assert lines[-2].endswith("score junk): none.")
    lines, _ = junk_section(runs, by_arm, screened=True)
    assert lines[-2] == (
        "Seeds whose stories turned to junk, by arm (gold readings from that step on score junk as a failure, "
        "each gold's floor): grpo 2 of 2 (from step 6, 12)."
    )
