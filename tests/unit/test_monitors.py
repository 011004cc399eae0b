"""Reward-hacking monitors: hand-worked statistics, rules, and the stopping callback."""

import math
from types import SimpleNamespace

import pytest

from rlcw.errors import RlcwError
from rlcw.measure.monitors import MonitorCallback, check_rules, group_distinct, shared_ngram_share, step_stats
from rlcw.metrics.agreement import spearman


def test_shared_ngram_share_by_hand():
    # A: trigrams {a b c, b c d}; B: {a b c, b c e}; C: {x y z}
    # A shares 1 of 2, B shares 1 of 2, C shares 0 of 1 -> mean(0.5, 0.5, 0) = 1/3
    assert shared_ngram_share(["a b c d", "a b c e", "x y z"], 3) == pytest.approx(1 / 3)
    assert shared_ngram_share(["a b", "c d"], 3) == 0.0  # no trigrams at all


def test_group_distinct_by_hand():
    # group 1: two identical 3-word stories -> 1 distinct trigram of 2 = 0.5; group 2: different -> 1.0
    assert group_distinct(["a b c", "a b c", "d e f", "g h i"], group_size=2) == pytest.approx(0.75)


def test_spearman_perfect_and_degenerate():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # the monitors' reward-length correlation: NaN when a side is constant or there are < 3 stories
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3], undefined=float("nan")))
    two = step_stats(
        ["a b", "a b c"], token_lengths=[2, 3], truncated=[False, False], rewards=[1.0, 2.0], group_size=2
    )
    assert math.isnan(two["reward_length_corr"])
    flat = dict(token_lengths=[2, 3, 4], truncated=[False] * 3, rewards=[1.0, 1.0, 1.0], group_size=3)
    assert math.isnan(step_stats(["a b", "a b c", "a b c d"], **flat)["reward_length_corr"])


def test_step_stats_by_hand():
    texts = ["one two three one two three", "a b c", "x y z w", "x y z w"]
    stats = step_stats(
        texts,
        token_lengths=[8, 4, 5, 5],
        truncated=[True, False, False, False],
        rewards=[4.0, 1.0, 2.0, 3.0],
        group_size=2,
    )
    assert stats["words_mean"] == pytest.approx(4.25)  # (6 + 3 + 4 + 4) / 4
    assert stats["words_std"] == pytest.approx(math.sqrt((1.75**2 + 1.25**2 + 0.25**2 * 2) / 4))
    assert stats["tokens_mean"] == pytest.approx(5.5)
    assert stats["cap_share"] == pytest.approx(0.25)
    # story 1: trigrams (one two three)(two three one)(three one two)(one two three) -> 1 of 4 repeats
    assert stats["rep_intra"] == pytest.approx(0.25 / 4)
    # group 1: 4 + 1 trigrams, 4 distinct -> 0.8; group 2: 2 + 2 trigrams, 2 distinct -> 0.5
    assert stats["distinct_group"] == pytest.approx(0.65)
    assert stats["distinct_batch"] == pytest.approx(6 / 9)
    assert stats["shared_ngrams"] == pytest.approx(0.5)  # stories 3 and 4 share all, 1 and 2 nothing
    # rewards 4,1,2,3 vs words 6,3,4,4: ranks (4,1,2,3) vs (4,1,2.5,2.5) -> rho = 0.9487
    assert stats["reward_length_corr"] == pytest.approx(0.948683, abs=1e-5)


def test_rules_break_on_the_right_side_and_ignore_nan():
    stats = {"cap_share": 0.95, "distinct_batch": 0.2, "reward_length_corr": float("nan")}
    broken = check_rules(
        stats, {"max_cap_share": 0.9, "min_distinct_batch": 0.3, "max_reward_length_corr": 0.1, "max_rep_intra": 0.1}
    )
    assert broken == ["cap_share=0.95 > 0.9 (max_cap_share)", "distinct_batch=0.2 < 0.3 (min_distinct_batch)"]
    assert check_rules({"cap_share": 0.9}, {"max_cap_share": 0.9}) == []  # at the threshold is fine


def test_unknown_rule_is_an_error_listing_the_stats():
    with pytest.raises(RlcwError, match="unknown monitor rule 'max_lenght'") as info:
        MonitorCallback(warn={"max_lenght": 1.0})
    assert "cap_share" in str(info.value)


def _log(cb, step, logs):
    state = SimpleNamespace(global_step=step, is_world_process_zero=True)
    control = SimpleNamespace(should_training_stop=False)
    cb.on_log(None, state, control, logs=logs)
    return control.should_training_stop


def test_callback_stops_after_patience_consecutive_breaks_and_warns(capsys):
    cb = MonitorCallback(warn={"max_cap_share": 0.5}, stop={"max_rep_intra": 0.3}, patience=2)
    assert not _log(cb, 1, {"monitor/cap_share": 0.8, "monitor/rep_intra": 0.5})
    assert "[rlcw] monitor: alert at step 1: cap_share=0.8 > 0.5" in capsys.readouterr().out
    assert not _log(cb, 2, {"monitor/rep_intra": 0.1})  # streak broken
    assert not _log(cb, 3, {"monitor/rep_intra": 0.5})
    assert not _log(cb, 4, {"loss": 1.0})  # a log without monitor keys changes nothing
    assert _log(cb, 5, {"monitor/rep_intra": 0.6})
    assert "step 5" in cb.stop_reason and "rep_intra=0.6 > 0.3" in cb.stop_reason
    assert [a["level"] for a in cb.alerts] == ["warn", "stop"]


def test_callback_respects_min_steps():
    cb = MonitorCallback(stop={"min_distinct_batch": 0.5}, patience=1, min_steps=3)
    assert not _log(cb, 1, {"monitor/distinct_batch": 0.1})
    assert not _log(cb, 2, {"monitor/distinct_batch": 0.1})
    assert _log(cb, 3, {"monitor/distinct_batch": 0.1})


def test_a_statistic_logged_every_few_steps_keeps_its_streak():
    cb = MonitorCallback(stop={"max_kl_to_start": 1.0, "max_rep_intra": 0.3}, patience=2)
    assert not _log(cb, 1, {"monitor/kl_to_start": 1.5, "monitor/rep_intra": 0.1})
    assert not _log(cb, 2, {"monitor/rep_intra": 0.1})  # no KL this step: its streak stays at 1
    assert _log(cb, 3, {"monitor/kl_to_start": 2.0, "monitor/rep_intra": 0.1})
    assert "kl_to_start=2 > 1" in cb.stop_reason or "kl_to_start=2.0 > 1" in cb.stop_reason
