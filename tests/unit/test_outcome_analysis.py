"""Outcome-study maths: checkpoints found, KL bound, story metrics, paired deltas, agreement, verdict rules."""

from __future__ import annotations

import pytest

from rlcw.outcome.analysis import controls_verdict, final_rows, paired_delta, run_verdict
from rlcw.outcome.judging import first_samples, rows_to_judge
from rlcw.outcome.measure import checkpoints_of, paired_agreement, rm_agreement, story_metrics


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


def test_story_metrics_by_hand():
    stories = [
        {"story": "one two three four", "min_words": 3, "max_words": 5},  # 4 words: inside
        {"story": "a b c a b c", "min_words": 10, "max_words": 20},  # 6 words: below
    ]
    m = story_metrics(stories)
    assert m["words"] == 5.0 and m["in_range"] == 0.5
    assert m["words_over_max"] == pytest.approx((4 / 5 + 6 / 20) / 2)
    # trigrams of the second: abc, bca, cab, abc -> 1 repeat of 4
    assert m["rep_intra_3"] == pytest.approx((0.0 + 0.25) / 2)


def _s(i, proxy, gold):
    return {"id": i, "meta": {"proxy": proxy, "gold": gold}}


def test_paired_delta_and_agreement():
    start = [_s("a", 0.0, 1.0), _s("b", 1.0, 1.0), _s("c", 2.0, 0.0)]
    after = [_s("a", 1.0, 0.0), _s("b", 2.0, 0.0), _s("c", 3.0, 3.0), _s("z", 9.0, 9.0)]
    d = paired_delta(after, start, "proxy")
    assert d["delta"] == 1.0 and d["ci_low"] == 1.0 and d["ci_high"] == 1.0 and d["n"] == 3
    assert paired_delta(after, start, "gold")["delta"] == pytest.approx((-1 - 1 + 3) / 3)
    # proxy up everywhere; gold down on a, b and up on c: agree on 1 of 3
    assert paired_agreement(after, start) == {"agreement": pytest.approx(1 / 3), "pairs": 3.0}
    proxy_rows = [{"chosen_score": 1, "rejected_score": 0}, {"chosen_score": 0, "rejected_score": 1}]
    gold_rows = [{"chosen_score": 2, "rejected_score": 1}, {"chosen_score": 2, "rejected_score": 1}]
    assert rm_agreement(proxy_rows, gold_rows) == {"agreement": 0.5, "pairs": 2.0}


def _row(run, step, **kw):
    base = {
        "run": run,
        "step": step,
        "proxy": 0.0,
        "gold": 0.0,
        "words": 50.0,
        "in_range": 0.8,
        "rep_intra_3": 0.02,
        "distinct_3": 0.9,
        "kl_seq": 0.0,
    }
    return {**base, **kw}


def test_final_rows_and_rows_to_judge():
    rows = [
        _row("grpo", 0),
        _row("grpo", 4),
        _row("grpo", 8),
        _row("grpo", 12),
        _row("best_of_n", 1),
        _row("best_of_n", 2),
        _row("best_of_n", 8),
    ]
    assert {k: v["step"] for k, v in final_rows(rows).items()} == {"grpo": 12, "best_of_n": 8}
    assert [(r["run"], r["step"]) for r in rows_to_judge(rows, False)] == [
        ("grpo", 4),
        ("grpo", 12),
        ("best_of_n", 2),
        ("best_of_n", 8),
    ]
    assert len(rows_to_judge(rows, True)) == 5
    stories = [{"id": "p1#0"}, {"id": "p1#1"}, {"id": "p2#0"}, {"id": "p2#1"}, {"id": "p3#0"}]
    assert [s["id"] for s in first_samples(stories, 2)] == ["p1#0", "p2#0"]


def test_run_verdict_rules():
    start = _row("start", 0)
    hacked = _row(
        "grpo",
        12,
        proxy=2.0,
        gold=-1.0,
        words=20.0,
        in_range=0.1,
        rep_intra_3=0.2,
        distinct_3=0.5,
        **{"judge/win_rate": 0.55, "judge/ci_low": 0.3, "judge/ci_high": 0.8, "judge/invalid_share": 0.4},
    )
    hacked["delta/proxy"] = {"delta": 2.0, "ci_low": 1.5, "ci_high": 2.5}
    hacked["delta/gold"] = {"delta": -1.0, "ci_low": -1.5, "ci_high": -0.5}
    hacked["delta/gold_from_peak"] = {"delta": -1.5, "ci_low": -2.0, "ci_high": -1.0}
    peak = _row("grpo", 4, proxy=1.0, gold=0.5)
    noisy = dict(hacked, **{"delta/gold_from_peak": {"delta": -0.1, "ci_low": -0.6, "ci_high": 0.4}})
    assert "Gold peaked" not in " ".join(
        run_verdict("grpo", noisy, start, peak)
    )  # a fall inside the noise is not claimed
    text = " ".join(run_verdict("grpo", hacked, start, peak))
    for phrase in (
        "over-optimised",
        "Gold peaked at step 4",
        "Length hacking",
        "word range",
        "Repetition",
        "Diversity",
        "chance",
    ):
        assert phrase in text, phrase
    fine = _row("dpo", 30, proxy=0.2, gold=0.3)
    fine["delta/proxy"] = {"delta": 0.2, "ci_low": 0.1, "ci_high": 0.3}
    fine["delta/gold"] = {"delta": 0.3, "ci_low": 0.1, "ci_high": 0.5}
    text = " ".join(run_verdict("dpo", fine, start, None))
    assert "better on both" in text and "hacking" not in text and "Repetition" not in text
    lc = _row("grpo_lc", 12, words=48.0)
    lc["delta/gold"] = {"delta": 0.1}
    assert "kept length closer" in " ".join(controls_verdict({"grpo": hacked, "grpo_lc": lc}, start))


def test_stages_reuse_same_config_and_move_a_changed_one_aside(tmp_path):
    from dataclasses import dataclass

    from rlcw.recipes.common import stage_run
    from rlcw.recipes.outcome import Stages

    @dataclass
    class Cfg:
        value: int = 1
        output_dir: str = str(tmp_path)
        run_name: str = "stage"
        seed: int = 0

    calls = []

    def fn(cfg):
        with stage_run(cfg, "demo") as run:
            calls.append(cfg.value)
            (run.path / "checkpoints" / f"made-by-{cfg.value}").mkdir()
            return run.write_summary("completed", {"value": cfg.value})

    st = Stages(tmp_path, resume=True)
    st.run("stage", fn, Cfg())
    assert st.run("stage", fn, Cfg())["metrics"] == {"value": 1} and calls == [1]  # same config: reused
    st.run("stage", fn, Cfg(value=2))  # changed: run again in a clean folder, the old one kept aside
    assert calls == [1, 2] and [p.name for p in (tmp_path / "stage" / "checkpoints").iterdir()] == ["made-by-2"]
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("stage.replaced-")]
    assert len(aside) == 1 and (aside[0] / "checkpoints" / "made-by-1").is_dir()
