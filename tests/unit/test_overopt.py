"""Over-optimisation statistics with hand-worked numbers: prompt-level bootstrap, split-half peak test,
gold Bradley-Terry labels of on-policy pairs, and Gao et al.'s two functional forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlcw.metrics.bootstrap import bootstrap_ci
from rlcw.metrics.gold_pairs import bt_probabilities, completion_pairs, gold_labels, label_pairs
from rlcw.metrics.overopt import (
    fit_gao_bon,
    fit_gao_ci,
    fit_gao_rl,
    paired_prompt_bootstrap,
    peak_fall,
    split_half_peak,
    split_prompts,
)

# --- prompt-level paired bootstrap ---------------------------------------------------------------


def test_prompt_bootstrap_is_wider_than_story_bootstrap_on_correlated_samples():
    # prompt p0: three samples each +1 better; p1: three samples each 1 worse (perfectly correlated).
    # Prompt level: a resample is {p0,p0}, {p0,p1} or {p1,p1}: mean +1, 0, -1 with prob 1/4, 1/2, 1/4,
    # so the 2.5% and 97.5% quantiles are -1 and +1.
    # Story level: 6 independent +-1 draws, P(all -1) = 1/64 < 2.5%, P(<= one +1) = 7/64 > 2.5%,
    # so the quantiles are (2*1 - 6)/6 = -2/3 and +2/3: too narrow.
    a = {(p, s): (1.0 if p == "p0" else -1.0) for p in ("p0", "p1") for s in range(3)}
    b = dict.fromkeys(a, 0.0)
    diff = paired_prompt_bootstrap(a, b, n_resamples=4000, seed=0)
    assert (diff.delta, diff.ci_low, diff.ci_high) == pytest.approx((0.0, -1.0, 1.0))
    assert (diff.n_prompts, diff.n_stories) == (2, 6)
    story = bootstrap_ci([a[k] - b[k] for k in sorted(a)], n_resamples=4000, seed=0)
    assert story == pytest.approx((-2 / 3, 2 / 3))


def test_prompt_bootstrap_pairs_by_key_and_resamples_configurably():
    a = {("p0", 0): 3.0, ("p0", 1): 5.0, ("p1", 0): 2.0, ("p1", 1): 2.0}
    b = {("p1", 1): 1.0, ("p1", 0): 1.0, ("p0", 1): 4.0, ("p0", 0): 2.0}  # every difference is +1
    diff = paired_prompt_bootstrap(a, b, n_resamples=50, seed=3)
    assert (diff.delta, diff.ci_low, diff.ci_high) == pytest.approx((1.0, 1.0, 1.0))
    wide = {("p0", 0): 1.0, ("p1", 0): 0.0, ("p2", 0): -1.0, ("p3", 0): 2.0}
    zero = dict.fromkeys(wide, 0.0)
    one = paired_prompt_bootstrap(wide, zero, n_resamples=1, seed=1)  # B = 1: one resample, a point "interval"
    assert one.ci_low == one.ci_high
    many = paired_prompt_bootstrap(wide, zero, n_resamples=1000, seed=1)
    # 4 prompts with differences 1, 0, -1, 2: resampled means range over [-1, 2] in steps of 1/4
    assert many.delta == 0.5 and -1 <= many.ci_low < 0.5 < many.ci_high <= 2
    with pytest.raises(ValueError, match="1 keys only in a"):
        paired_prompt_bootstrap({**a, ("p2", 0): 1.0}, b)


# --- split-half peak test ------------------------------------------------------------------------

PROMPTS = ["p0", "p1", "p2", "p3"]


def test_split_is_fixed_by_seed_and_prompt_id():
    select, test = split_prompts(PROMPTS, seed=0)
    assert (select, test) == (["p0", "p2"], ["p1", "p3"])  # sha256("0:<id>") order
    assert split_prompts(list(reversed(PROMPTS)) + ["p1"], seed=0) == (select, test)
    assert split_prompts(PROMPTS, seed=1) == (["p2", "p3"], ["p0", "p1"])
    big = [f"q{i}" for i in range(11)]
    s, t = split_prompts(big, seed=0)
    assert len(s) == 5 and len(t) == 6 and set(s) | set(t) == set(big) and not set(s) & set(t)


def _gold(values: dict[str, dict[str, float]], samples: int = 2) -> dict[str, dict[tuple[str, int], float]]:
    """checkpoint -> prompt -> value, repeated over `samples` identical samples per prompt."""
    return {c: {(p, s): v for p, v in row.items() for s in range(samples)} for c, row in values.items()}


def test_selecting_and_testing_on_the_same_data_claims_a_fall_the_split_test_does_not():
    # selection half (p0, p2): gold 0 -> 1 -> 0, a clean peak at c1 and fall of -1 on every prompt.
    # test half (p1, p3): c1 = 0 on both, final c2 = +1 on p1 and -1 on p3: no fall on average.
    gold = _gold(
        {
            "c0": {"p0": 0.0, "p1": 0.0, "p2": 0.0, "p3": 0.0},
            "c1": {"p0": 1.0, "p1": 0.0, "p2": 1.0, "p3": 0.0},
            "c2": {"p0": 0.0, "p1": 1.0, "p2": 0.0, "p3": -1.0},
        }
    )
    order = ["c0", "c1", "c2"]
    naive = peak_fall(gold, order, select=["p0", "p2"], test=["p0", "p2"], n_resamples=2000)
    assert naive.peak == "c1" and naive.verdict == "fell"
    assert (naive.fall.delta, naive.fall.ci_low, naive.fall.ci_high) == pytest.approx((-1.0, -1.0, -1.0))
    split = split_half_peak(gold, order, seed=0, n_resamples=2000)
    assert split.peak == "c1" and split.final == "c2"
    assert split.select_means == pytest.approx({"c0": 0.0, "c1": 1.0, "c2": 0.0})
    # test-half differences +1 (p1) and -1 (p3): mean 0; two prompts -> CI [-1, +1] (P({p3,p3}) = 1/4)
    assert (split.fall.delta, split.fall.ci_low, split.fall.ci_high) == pytest.approx((0.0, -1.0, 1.0))
    assert (split.fall.n_prompts, split.fall.n_stories) == (2, 4)
    assert split.verdict == "no_fall"


def test_split_test_finds_a_real_fall_and_a_rise_and_a_final_peak():
    order = ["c0", "c1", "c2"]
    fall = _gold(
        {
            "c0": dict.fromkeys(PROMPTS, 0.0),
            "c1": dict.fromkeys(PROMPTS, 1.0),
            "c2": {"p0": 0.5, "p1": 0.5, "p2": 0.5, "p3": 0.5},
        }
    )
    out = split_half_peak(fall, order)
    assert out.peak == "c1" and out.verdict == "fell"
    assert (out.fall.delta, out.fall.ci_low, out.fall.ci_high) == pytest.approx((-0.5, -0.5, -0.5))
    # peak on the selection half at c1, but on the test half the final is higher than c1
    rise = _gold(
        {
            "c0": dict.fromkeys(PROMPTS, 0.0),
            "c1": {"p0": 2, "p2": 2, "p1": 0, "p3": 0},
            "c2": dict.fromkeys(PROMPTS, 1.0),
        }
    )
    assert split_half_peak(rise, order).verdict == "rose"
    rising = _gold({c: dict.fromkeys(PROMPTS, float(i)) for i, c in enumerate(order)})
    out = split_half_peak(rising, order)
    assert (out.peak, out.fall, out.verdict) == ("c2", None, "peak_is_final")
    # ties go to the earliest checkpoint
    flat = _gold({c: dict.fromkeys(PROMPTS, 0.0) for c in order})
    assert split_half_peak(flat, order).peak == "c0"


# --- gold labels of on-policy pairs --------------------------------------------------------------


def test_bradley_terry_probabilities_by_hand():
    ln3 = math.log(3)
    # sigmoid(ln 3) = 3 / (3 + 1) = 0.75
    assert bt_probabilities([ln3, 0.0, 0.0], [0.0, 0.0, ln3]) == pytest.approx([0.75, 0.5, 0.25])
    assert bt_probabilities([2 * ln3], [0.0], temperature=2.0) == pytest.approx([0.75])
    assert bt_probabilities([1.0, 0.0, 0.3], [0.0, 0.0, 0.9], temperature=0) == pytest.approx([1.0, 0.5, 0.0])
    with pytest.raises(ValueError):
        bt_probabilities([1.0], [0.0, 1.0])


def test_gold_labels_are_seeded_bt_draws_with_their_noise():
    ln3 = math.log(3)
    out = gold_labels([ln3, 0.0, 0.0], [0.0, 0.0, ln3])
    assert out.label_noise == pytest.approx((0.25 + 0.5 + 0.25) / 3)
    many = gold_labels([ln3] * 20000, [0.0] * 20000, seed=7)
    assert many.labels.mean() == pytest.approx(0.75, abs=0.015)  # binomial SD 0.003
    assert many.label_noise == pytest.approx(0.25)
    assert np.array_equal(gold_labels([ln3] * 50, [0.0] * 50, seed=7).labels, many.labels[:50])
    assert not np.array_equal(gold_labels([ln3] * 50, [0.0] * 50, seed=8).labels, many.labels[:50])
    sharp = gold_labels([2.0, 0.0, 5.0], [1.0, 3.0, 4.0], temperature=0)
    assert sharp.labels.tolist() == [True, False, True] and sharp.label_noise == 0.0


def test_completion_pairs_all_or_a_fixed_number_per_prompt():
    assert completion_pairs(["a", "b"], k=3) == [
        ("a", 0, 1),
        ("a", 0, 2),
        ("a", 1, 2),
        ("b", 0, 1),
        ("b", 0, 2),
        ("b", 1, 2),
    ]
    some = completion_pairs(["a", "b", "c"], k=4, per_prompt=2, seed=1)
    assert len(some) == 6 and [p for p, _, _ in some] == ["a", "a", "b", "b", "c", "c"]
    assert all(0 <= i < j < 4 for _, i, j in some) and len(set(some)) == 6
    assert completion_pairs(["a", "b", "c"], k=4, per_prompt=2, seed=1) == some
    with pytest.raises(ValueError):
        completion_pairs(["a"], k=3, per_prompt=4)
    with pytest.raises(ValueError):
        completion_pairs(["a"], k=1)


def test_label_pairs_orders_each_pair_by_its_sampled_label():
    gold = {("a", 0): 0.0, ("a", 1): 10.0, ("a", 2): 5.0, ("b", 0): 1.0, ("b", 1): 1.0}
    pairs = [("a", 0, 1), ("a", 1, 2), ("b", 0, 1)]
    # temperature 0: the higher gold wins; the tie in b is a coin flip (p = 0.5, the only noise: 0.5 / 3)
    chosen, noise = label_pairs(pairs, gold, temperature=0, seed=0)
    assert chosen[:2] == [("a", 1, 0), ("a", 1, 2)] and chosen[2] in (("b", 0, 1), ("b", 1, 0))
    assert noise == pytest.approx(0.5 / 3)
    with pytest.raises(ValueError, match="no gold score"):
        label_pairs([("a", 0, 3)], gold)


# --- Gao et al.'s functional forms ----------------------------------------------------------------


def test_best_of_n_form_recovers_known_a_b_and_peak():
    # R(d) = d (1 - 0.5 d): d* = a / 2b = 1, R(d*) = 0.5
    d = np.array([0.0, 0.5, 1.0, 1.5, 2.0])
    fit = fit_gao_bon(d, d * (1 - 0.5 * d))
    assert (fit.a, fit.b, fit.d_star, fit.r_star) == pytest.approx((1.0, 0.5, 1.0, 0.5), abs=1e-6)
    assert fit.peak_in_range and fit.n_points == 4 and fit.reason is None and fit.rmse < 1e-6


def test_rl_form_recovers_known_a_b_and_peak():
    # R(d) = d (1 - 0.5 log d): d* = exp(a/b - 1) = e, R(d*) = e (1 - 0.5) = e / 2
    d = np.array([0.0, 0.5, 1.0, 2.0, 3.0, 4.0])
    r = np.where(d > 0, d * (1 - 0.5 * np.log(np.where(d > 0, d, 1))), 0.0)
    fit = fit_gao_rl(d, r)
    assert (fit.a, fit.b, fit.d_star, fit.r_star) == pytest.approx((1.0, 0.5, math.e, math.e / 2), abs=1e-6)
    assert fit.peak_in_range
    # with noise of +-0.01 on every point the fit stays close
    noisy = fit_gao_rl(d, r + 0.01 * np.array([1, -1, 1, -1, 1, -1]))
    assert noisy.a == pytest.approx(1.0, abs=0.05) and noisy.b == pytest.approx(0.5, abs=0.05)


def test_fits_say_why_there_is_no_fit_or_no_peak():
    few = fit_gao_rl([0.0, 0.5, 1.0, 1.0], [0.0, 0.4, 0.6, 0.6])
    assert few.a is None and few.reason == "2 distinct d > 0, need 3"
    single = fit_gao_bon([1.0, 1.0], [0.3, 0.3], min_points=1)
    assert single.a is None and "degenerate" in single.reason
    d = np.array([0.5, 1.0, 1.5, 2.0])
    rising = fit_gao_bon(d, d * (0.5 + 0.2 * d))  # b = -0.2: never turns down
    assert rising.b == pytest.approx(-0.2) and rising.d_star is None and "never turns down" in rising.reason
    falling = fit_gao_bon(d, d * (-1 - 0.5 * d))  # a = -1: d* = -1 < 0
    assert falling.d_star is None and "falls from the start" in falling.reason
    beyond = fit_gao_bon(d, d * (4 - 0.5 * d))  # d* = 4 lies past the last point
    assert beyond.d_star == pytest.approx(4.0) and not beyond.peak_in_range
    with pytest.raises(ValueError):
        fit_gao_rl([0.0, -1.0, 1.0], [0.0, 0.0, 0.0])


def test_fit_interval_over_prompts_by_hand():
    # best-of-n form is linear in (a, b), so the fit of a mean curve has the mean parameters.
    # Prompt p0 follows a = 1, b = 0.5; p1 follows a = 2, b = 0.5 (two samples each). A resample is
    # {p0,p0}, {p0,p1} or {p1,p1}: a = 1, 1.5 or 2 (prob 1/4, 1/2, 1/4) -> interval [1, 2];
    # b = 0.5 always; d* = a / 2b = 1, 1.5 or 2 -> [1, 2].
    d = [0.0, 0.5, 1.0, 1.5, 2.0]
    start = {(p, s): 3.0 for p in ("p0", "p1") for s in range(2)}
    a_of = {"p0": 1.0, "p1": 2.0}
    gold = [{k: 3.0 + x * (a_of[k[0]] - 0.5 * x) for k in start} for x in d]
    ci = fit_gao_ci("bon", d, gold, start, n_resamples=2000, seed=0)
    assert ci.a == pytest.approx((1.0, 2.0)) and ci.b == pytest.approx((0.5, 0.5))
    assert ci.d_star == pytest.approx((1.0, 2.0)) and (ci.fitted_share, ci.peak_share) == (1.0, 1.0)
    # identical prompts: every resample is the same curve, a point interval at the true values
    same = fit_gao_ci("bon", d, [{k: 3.0 + x * (1 - 0.5 * x) for k in start} for x in d], start, n_resamples=100)
    assert same.a == pytest.approx((1.0, 1.0)) and same.d_star == pytest.approx((1.0, 1.0))
    with pytest.raises(ValueError):
        fit_gao_ci("bon", d, gold[:-1], start)
