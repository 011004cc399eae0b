"""Outcome-study analysis by hand: checkpoints found, best-of-n from one pool, RL curves, verdicts, cached steps."""

from __future__ import annotations

import math

import pytest

from rlcw.outcome.analysis import bon_curve, diversity, rl_curve, run_verdict, summarise
from rlcw.outcome.measure import checkpoints_of


def test_checkpoints_of_finds_trl_and_ppo_layouts(tmp_path):
    for name in ("checkpoint-8", "checkpoint-4", "checkpoint-12"):
        (tmp_path / "a" / "checkpoints" / name).mkdir(parents=True)
        (tmp_path / "a" / "checkpoints" / name / "adapter_config.json").write_text("{}")
    (tmp_path / "a" / "checkpoints" / "checkpoint-16").mkdir()  # no adapter: skipped
    (tmp_path / "a" / "checkpoints" / "final").mkdir()
    (tmp_path / "a" / "checkpoints" / "final" / "adapter_config.json").write_text("{}")
    assert [s for s, _ in checkpoints_of(tmp_path / "a")] == [4, 8, 12]
    (tmp_path / "b" / "checkpoints" / "step_000003" / "policy").mkdir(parents=True)
    (tmp_path / "b" / "checkpoints" / "step_000003" / "policy" / "adapter_config.json").write_text("{}")
    (tmp_path / "b" / "checkpoints" / "step_000003.tmp").mkdir()
    found = checkpoints_of(tmp_path / "b")
    assert [s for s, _ in found] == [3] and found[0][1].name == "policy"
    assert checkpoints_of(tmp_path / "missing") == []


def _rec(p, k, gold, proxy, words=10, rep=0.0, story=None, kl=0.0, ended=True):
    return {
        "prompt_id": p,
        "sample_index": k,
        "story": story or f"{p} {k} once upon a time",
        "scores": {"gold": gold, "proxy": proxy},
        "words": words,
        "rep": rep,
        "kl_k3": kl,
        "kl_k1": kl,
        "finished": ended,
    }


def test_best_of_n_from_one_pool_by_hand():
    # prompt a: proxy ranks c0 < c2 < c1; best-of-2 picks c1 w.p. 2/3, c2 w.p. 1/3 (see test_best_of_n)
    pool = [_rec("a", 0, 0.0, 0.3), _rec("a", 1, 3.0, 0.9, words=20), _rec("a", 2, 6.0, 0.5)]
    pool += [_rec("b", k, 1.0, float(k)) for k in range(3)]  # gold flat on b
    c = bon_curve("bon", "proxy", pool, [1, 2, 3])
    one, two, three = c.points
    assert one.values["gold"][("a", 0)] == pytest.approx(3.0) and one.kl == 0.0  # n = 1: the pool mean
    assert two.values["gold"][("a", 0)] == pytest.approx(2 / 3 * 3.0 + 1 / 3 * 6.0)
    assert two.values["words"][("a", 0)] == pytest.approx(2 / 3 * 20 + 1 / 3 * 10)
    assert three.values["gold"][("a", 0)] == 3.0 and three.values["proxy"][("b", 0)] == 2.0
    assert two.d == pytest.approx(math.sqrt(math.log(2) - 0.5))
    with pytest.raises(ValueError, match="pool"):
        bon_curve("bon", "proxy", pool, [1, 4])


def test_diversity_is_per_sample_index_then_averaged():
    # index 0: "x y z" twice -> 1 distinct trigram of 2; index 1: two different -> 2 of 2
    recs = [_rec("a", 0, 0, 0, story="x y z"), _rec("b", 0, 0, 0, story="x y z")]
    recs += [_rec("a", 1, 0, 0, story="x y z"), _rec("b", 1, 0, 0, story="p q r")]
    assert diversity(recs) == pytest.approx((0.5 + 1.0) / 2)


def _rl_points(gold_by_step, kl_by_step, proxy_by_step, words_by_step=None, prompts=8):
    """Every prompt and sample gets the step's value plus a small prompt offset (so CIs have width)."""
    words_by_step = words_by_step or {s: 10 for s in gold_by_step}

    def recs(step):
        return [
            _rec(
                f"p{i}",
                k,
                gold_by_step[step] + 0.01 * i,
                proxy_by_step[step] + 0.01 * i,
                words=words_by_step[step] + i,
                kl=kl_by_step[step],
            )
            for i in range(prompts)
            for k in range(2)
        ]

    return recs(0), [(s, recs(s)) for s in sorted(gold_by_step) if s]


def test_rise_peak_and_fall_are_tested_on_the_other_half():
    start, ckpts = _rl_points(
        {0: 0.0, 4: 1.0, 8: 2.0, 12: 0.5}, {0: 0, 4: 0.25, 8: 1.0, 12: 4.0}, {0: 0, 4: 1, 8: 2, 12: 3}
    )
    s = summarise(rl_curve("grpo", "proxy", start, ckpts), n_resamples=200, fit_resamples=20)
    assert [p.d for p in s.curve.points] == [0.0, 0.5, 1.0, 2.0]
    assert s.peak.peak == 8 and s.peak.verdict == "fell"
    assert s.rise.delta == pytest.approx(2.0) and s.peak.fall.delta == pytest.approx(-1.5)
    assert s.deltas[12]["proxy"].delta == pytest.approx(3.0) and s.deltas[12]["proxy"].ci_low == pytest.approx(3.0)
    assert s.fit.a is not None and s.fit.n_points == 3  # d = 0.5, 1, 2: R(d) = d (a - b log d) fitted
    text = " ".join(run_verdict(s))
    assert (
        "the proxy rose" in text
        and "it rose from the start to the peak" in text
        and "After the peak gold fell" in text
    )
    assert "Largest KL 4.00 nats/story (target 2: reached)" in text


def test_null_results_are_stated_as_null_and_length_can_explain_a_gain():
    flat = _rl_points({0: 0.0, 4: 0.0}, {0: 0, 4: 0.1}, {0: 0.0, 4: 0.0})
    s = summarise(rl_curve("dpo", "proxy", *flat), n_resamples=100, fit_resamples=10)
    text = " ".join(run_verdict(s))
    assert "no measurable proxy gain" in text and "gold did not rise (null)" in text
    # start words 10..17 with proxy 0.01 per prompt index = 0.01 per word; the run wrote 100 words more and
    # gained 1.0 proxy: length predicts 100 x 0.01 = 1.0 of it
    start, ckpts = _rl_points({0: 0.0, 4: 0.0}, {0: 0, 4: 0.1}, {0: 0.0, 4: 1.0}, words_by_step={0: 10, 4: 110})
    s = summarise(rl_curve("grpo", "proxy", start, ckpts), n_resamples=100, fit_resamples=10)
    assert (
        s.surface.share == pytest.approx(1.0) and "Length and repetition explain the proxy gain" in run_verdict(s)[0]
    )


def test_after_the_peak_tells_over_optimisation_from_a_collapse():
    # gold peaks at step 8 (2.0); at 12 gold is 0.8 lower while the proxy is 1.0 higher (Gao et al.'s
    # signature); at 16 both are below the peak (a collapse). The prompt offsets cancel in every paired
    # difference, so each CI is its point: -0.8 / +1.0 and -1.7 / -1.5.
    start, ckpts = _rl_points(
        {0: 0.0, 4: 1.0, 8: 2.0, 12: 1.2, 16: 0.3},
        {0: 0, 4: 0.25, 8: 1.0, 12: 2.0, 16: 4.0},
        {0: 0.0, 4: 1.0, 8: 2.0, 12: 3.0, 16: 0.5},
    )
    s = summarise(rl_curve("grpo", "proxy", start, ckpts), n_resamples=200, fit_resamples=10)
    assert s.peak.peak == 8
    assert [(a.x, a.kind) for a in s.after_peak] == [(12, "overoptimised"), (16, "collapsed")]
    twelve, sixteen = s.after_peak
    assert twelve.gold.delta == pytest.approx(-0.8) and twelve.proxy.ci_low == pytest.approx(1.0)
    assert sixteen.gold.ci_high == pytest.approx(-1.7) and sixteen.proxy.delta == pytest.approx(-1.5)
    assert twelve.gold.n_prompts == 4  # the test half of the 8 prompts
    text = " ".join(run_verdict(s))
    assert "Over-optimisation shown: at step 12 gold was below the peak (-0.800" in text
    assert "At step 16 the proxy fell below the peak too" in text


def test_length_can_explain_the_gold_rise_too():
    # start: gold 0.01 per prompt index and 10 + index words, so the gold pays 0.01 per word; a run that
    # wrote 100 words more and rose 1.0 in gold is all length (share 1.0); with words unchanged, none of it
    start, ckpts = _rl_points({0: 0.0, 4: 1.0}, {0: 0, 4: 0.1}, {0: 0.0, 4: 1.0}, words_by_step={0: 10, 4: 110})
    s = summarise(rl_curve("grpo", "proxy", start, ckpts), n_resamples=100, fit_resamples=10)
    assert s.gold_surface.share == pytest.approx(1.0)
    assert "Length and repetition explain the gold rise at the peak" in run_verdict(s)[0]
    start, ckpts = _rl_points({0: 0.0, 4: 1.0}, {0: 0, 4: 0.1}, {0: 0.0, 4: 1.0})
    s = summarise(rl_curve("grpo", "proxy", start, ckpts), n_resamples=100, fit_resamples=10)
    assert s.gold_surface.share == pytest.approx(0.0, abs=1e-9)
    assert "Length and repetition do not explain the gold rise at the peak" in run_verdict(s)[0]
    flat = _rl_points({0: 0.0, 4: 0.0}, {0: 0, 4: 0.1}, {0: 0.0, 4: 0.0})
    assert summarise(rl_curve("dpo", "proxy", *flat), n_resamples=100, fit_resamples=10).gold_surface is None


def test_residual_gold_removes_what_words_and_ending_buy():
    # slope stories (other start samples): gold = 0.1 x words + 2 x ended exactly, so b_words 0.1, b_ended 2.
    fit = [
        _rec(f"q{i}", k, 0.1 * (10 + i) + 2.0 * (k % 2), 0.0, words=10 + i, ended=bool(k % 2))
        for i in range(6)
        for k in range(4)
    ]
    # start: 10 + i words, none ended, gold 0.1 x words; checkpoint 4: 10 words more, all ended, gold +1 + 2 + 0.5:
    # words explain 1.0, ending 2.0, and 0.5 is left (the same on every prompt, so the CI is the point)
    start = [_rec(f"p{i}", k, 0.1 * (10 + i), 0.0, words=10 + i, ended=False) for i in range(8) for k in range(2)]
    ckpt = [_rec(f"p{i}", k, 0.1 * (20 + i) + 2.5, 1.0, words=20 + i, kl=0.5) for i in range(8) for k in range(2)]
    s = summarise(rl_curve("grpo", "proxy", start, [(4, ckpt)], slope_records=fit), n_resamples=100, fit_resamples=5)
    assert s.curve.gold_slopes == pytest.approx({"words": 0.1, "ended": 2.0})
    assert s.deltas[4]["gold"].delta == pytest.approx(3.5) and s.deltas[4]["ended"].delta == pytest.approx(1.0)
    assert s.explained[4] == pytest.approx(3.0)
    assert s.residual[4].delta == pytest.approx(0.5) and s.residual[4].ci_low == pytest.approx(0.5)
    assert s.residual_rise.delta == pytest.approx(0.5) and s.residual_rise.n_prompts == 4  # the test half
    assert "Free of length and ending (the gold pays +0.1000 per word and +2.000 for ending" in run_verdict(s)[0]
    assert "the gold rose from the start to the peak (+0.500" in run_verdict(s)[0]
    # a run whose whole gold gain is the ending price: residual 0, said as no change
    ckpt = [_rec(f"p{i}", k, 0.1 * (10 + i) + 2.0, 1.0, words=10 + i, kl=0.5) for i in range(8) for k in range(2)]
    s = summarise(rl_curve("grpo", "proxy", start, [(4, ckpt)], slope_records=fit), n_resamples=100, fit_resamples=5)
    assert s.explained[4] == pytest.approx(2.0) and s.residual[4].delta == pytest.approx(0.0, abs=1e-9)
    assert "the gold did not change measurably from the start to the peak" in run_verdict(s)[0]


def test_best_of_n_residual_uses_the_pool_for_slopes_and_weights_ending():
    # prompt a: c1 (the proxy's pick at n = 3) ended, the others not; gold pays 1 per ending and nothing per word
    pool = [_rec("a", 0, 0.0, 0.3, ended=False), _rec("a", 1, 1.0, 0.9), _rec("a", 2, 0.0, 0.5, ended=False)]
    pool += [_rec("b", 0, 1.0, 0.2), _rec("b", 1, 0.0, 0.1, ended=False), _rec("b", 2, 0.0, 0.0, ended=False)]
    c = bon_curve("bon", "proxy", pool, [1, 3])
    assert c.gold_slopes["ended"] == pytest.approx(1.0) and c.gold_slopes["words"] == 0.0  # words constant
    s = summarise(c, n_resamples=50, fit_resamples=5)
    assert c.points[1].values["ended"][("a", 0)] == 1.0 and c.points[0].values["ended"][("a", 0)] == pytest.approx(
        1 / 3
    )
    assert s.explained[3] == pytest.approx(s.deltas[3]["gold"].delta) and s.residual[3].delta == pytest.approx(0.0)


def test_an_aggregate_is_chosen_on_one_half_of_the_prompts_and_tested_on_the_other():
    from rlcw.metrics.overopt import split_prompts
    from rlcw.outcome.analysis import choose_aggregate

    # 8 prompts x 3 candidates; gold of candidate k is k on every prompt. Proxy "a" ranks candidates by gold
    # (best-of-3 picks gold 2), proxy "b" ranks them backwards (picks gold 0): "a" is chosen, and on the test half
    # its gold rises from the pool mean 1.0 to 2.0 on every prompt
    pool = []
    for i in range(8):
        for k in range(3):
            r = _rec(f"p{i}", k, float(k), 0.0)
            r["scores"].update(a=float(k), b=float(-k))
            pool.append(r)
    curves = {name: bon_curve(f"bon_{name}", name, pool, [1, 3]) for name in ("b", "a")}
    choice = choose_aggregate(curves, n_resamples=100, seed=0)
    assert choice.chosen == "a" and choice.selection_gold == pytest.approx({"a": 2.0, "b": 0.0})
    assert choice.test.delta == pytest.approx(1.0) and choice.test.ci_low == pytest.approx(1.0)
    _, test = split_prompts([f"p{i}" for i in range(8)], seed=0)
    assert choice.test.n_prompts == len(test) == 4
