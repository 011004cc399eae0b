"""quickstart end to end on the tiny model: every stage folder, the report, plots, gates."""

import json
import math

import pytest

from rlcw.config import load_config

TINY = [
    "run_name=qs",
    "train_rm.data.max_train_pairs=16",
    "train_rm.data.max_eval_pairs=8",
    "train_rm.train.max_steps=2",
    "train_rm.train.batch_size=4",
    "train_rm.train.eval_steps=1",
    "train_rm.rm.max_length=48",
    "train_rm.lora.r=4",
    "grpo.train.max_steps=2",
    "grpo.train.batch_size=4",
    "grpo.train.num_generations=2",
    "grpo.train.max_completion_length=6",
    "grpo.eval.every_steps=0",
    "grpo.probe.every_steps=1",
    "grpo.probe.num_texts=2",
    "grpo.lora.r=4",
    "grpo.data.max_train_prompts=4",
    "heldout.fit_to_cap=false",
    "heldout.max_prompts=4",
    "heldout.n_samples=2",
    "heldout.n_resamples=200",
    "gates.heldout=false",
    "gates.min_rm_accuracy=0.0",
    "gates.min_grpo_steps=2",
    "gates.hacking=false",
    # the anchored reward (PAR) on start-model stories this run writes, with KL to the start in the loss
    "grpo.reward.specs.rm.anchor={per_prompt: 2}",
    "grpo.train.beta=0.1",
    # a second look at the same samples: the run's RM again and a scripted rubric judge (always Yes)
    "heldout.score_with={rm_again: {type: bt}, rubric: {type: rubric, verdict: text, "
    "criteria: [{name: ends, question: 'Does it end?'}], client: {kind: scripted, script: ['Answer: Yes']}}}",
]


def run_quickstart(out, model_dir, *more: str) -> dict:
    from rlcw.recipes.quickstart import QuickstartConfig, main

    return main(load_config(QuickstartConfig, None, [f"output_dir={out}", f"model.name={model_dir}", *TINY, *more]))


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("quickstart")
    return out, run_quickstart(out, tiny_model_dir)


def test_quickstart_tiny_end_to_end(quickstart):
    tmp_path, summary = quickstart
    root = tmp_path / "qs"
    assert summary["status"] == "completed", summary
    for stage in ("prepare_model", "build_pairs", "train_rm", "grpo", "export"):
        assert json.loads((root / stage / "summary.json").read_text())["status"] == "completed", stage
    refs = [json.loads(x) for x in (root / "references" / "stories.jsonl").read_text().splitlines()]
    assert refs and all(r["system"] == "start" for r in refs) and len({r["prompt"] for r in refs}) * 2 == len(refs)
    grpo_cfg = (root / "grpo" / "config.yaml").read_text()
    assert f"references: {root}/references/stories.jsonl" in grpo_cfg and "beta: 0.1" in grpo_cfg
    logged = [json.loads(x) for x in (root / "grpo" / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["rewards/rm/mean"] for r in logged if "rewards/rm/mean" in r]
    assert rewards and all(0 < v < 1 for v in rewards)  # sigmoid(r - r_ref): the anchored reward is bounded
    report = (root / "report.md").read_text()
    assert report.index("## Training reward and learning probe") < report.index("## Held-out measurement")
    assert report.index("## Held-out measurement") < report.index("### Largest RM gains")
    assert "### Largest RM losses" in report and "| start model | after GRPO |" in report
    assert "PASS: GRPO steps: 2" in report and "PASS: GRPO reward-hacking monitors in range" in report
    assert "(gate off: gates.heldout=false)" in report and "Learning probe: mean |log-prob change|" in report
    assert "no rise in stories ending too short (reward hacking, 95%) (reported, not gating" in report
    assert "no rise in slop (reward hacking, 95%) (reported, not gating" in report and m_is_set(
        summary, "gate/hacking"
    )
    assert "Slop (% of words inside phrases over-used against the bundled human stories" in report
    assert "most over-represented in the tuned model's samples:" in report
    for png in ("rm_training.png", "training_reward.png", "probe.png"):
        data = (root / "plots" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    m = summary["metrics"]
    assert {"time/train_rm_s", "time/grpo_s", "time/heldout_s", "rm/accuracy"} <= set(m)
    named = ["rm_delta", "rm_delta_lo", "rm_delta_hi", "win_rate", "win_rate_lo", "win_rate_hi", "in_range_start"]
    named += ["in_range_final", "in_range_delta_lo", "finished_start", "finished_final", "rm_delta_both_finished"]
    named += ["rm_pays_ending", "rm_pays_ending_short", "rm_per_10_words_ended", "rm_words_pearson_start"]
    named += ["slop_start", "slop_final", "slop_delta", "ended_short_delta", "ended_short_delta_hi"]
    assert all(isinstance(m[f"heldout/{k}"], float) for k in named)
    assert {"heldout/short_of_ended_start", "heldout/short_of_ended_delta_hi"} <= set(m)  # NaN where none ended
    assert "| of the stories that ended, the share below the range |" in report
    start = [json.loads(x) for x in (root / "heldout" / "start.jsonl").read_text().splitlines()]
    assert len(start) == 8 and {r["sample_index"] for r in start} == {0, 1}
    # heldout.score_with: the run's RM scored again gives the held-out RM change; the always-Yes judge gives 1 -> 1
    assert m["heldout/score_with/rm_again_delta"] == pytest.approx(m["heldout/rm_delta"], abs=1e-4)
    assert m["heldout/score_with/rubric/ends_start"] == m["heldout/score_with/rubric/ends_final"] == 1.0
    assert m["heldout/score_with/rubric_delta"] == 0.0 and "time/heldout_scores_s" in m
    assert "| `rubric` / ends | 1.000 | 1.000 | +0.000 [+0.000, +0.000] |" in report
    assert json.loads((root / "heldout" / "score_with.json").read_text())["rm_again"]["n_prompts"] == 4
    rows = [json.loads(x) for x in (root / "heldout" / "score_with.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and {r["policy"] for r in rows} == {"start", "tuned"} and rows[0]["rubric/ends"] == 1.0


STAGES = ("prepare_model", "build_pairs", "train_rm", "references", "grpo", "heldout", "heldout_scores", "export")


def _ran(out: str) -> list[str]:
    """The stages a quickstart run started (`[quickstart] <name> ...`), in order."""
    return [line.split()[1] for line in out.splitlines() if line.startswith("[quickstart] ") and line.endswith(" ...")]


def test_quickstart_resumes_per_stage(quickstart, tiny_model_dir, capsys):
    out, first = quickstart
    root = out / "qs"
    capsys.readouterr()
    grpo_started = json.loads((root / "grpo" / "summary.json").read_text())["started_at"]
    again = run_quickstart(out, tiny_model_dir)  # the same settings: every stage cached
    lines = capsys.readouterr().out
    assert _ran(lines) == [] and lines.count(": cached (") == len(STAGES), lines
    assert json.loads((root / "grpo" / "summary.json").read_text())["started_at"] == grpo_started
    assert (
        again["status"] == "completed" and again["metrics"]["heldout/rm_delta"] == first["metrics"]["heldout/rm_delta"]
    )
    took = json.loads((root / "grpo" / "summary.json").read_text())["wall_time_s"]
    assert again["metrics"]["time/grpo_s"] == round(took, 1)  # a cached stage keeps its recorded time
    # a held-out setting changed: the measurement and every stage after it run again, the training stages do not
    changed = run_quickstart(out, tiny_model_dir, "heldout.n_resamples=150")
    assert _ran(capsys.readouterr().out) == ["heldout", "heldout_scores", "export"]
    assert json.loads((root / "grpo" / "summary.json").read_text())["started_at"] == grpo_started
    assert changed["status"] == "completed" and "B = 150" in (root / "report.md").read_text()
    assert [p.name for p in out.iterdir() if p.name.startswith("qs")] == ["qs"]  # stage folders stay inside
    # overwrite=true starts over: every stage runs, each old recipe folder kept aside
    run_quickstart(out, tiny_model_dir, "heldout.n_resamples=150", "overwrite=true")
    assert _ran(capsys.readouterr().out) == list(STAGES)
    assert json.loads((root / "grpo" / "summary.json").read_text())["started_at"] > grpo_started
    assert sorted(p.name.split(".")[0] for p in root.iterdir() if ".replaced-" in p.name) == sorted(
        ["prepare_model", "build_pairs", "train_rm", "grpo", "export", "export"]
    )


def m_is_set(summary: dict, key: str) -> bool:
    return isinstance(summary["metrics"].get(key), float)


SLOP = {"slop_start": 2.0, "slop_final": 2.5, "slop_delta": 0.5, "slop_delta_lo": -0.5, "slop_delta_hi": 1.5}


def test_hacking_checks_read_the_upper_bounds():
    from rlcw.pipelines.quickstart_gates import hacking_checks
    from rlcw.recipes.quickstart import Gates

    h = {"ended_short_start": 0.15, "ended_short_final": 0.2, "ended_short_delta": 0.05}
    h.update(ended_short_delta_lo=0.01, ended_short_delta_hi=0.09)
    short, slop = hacking_checks(Gates(), h, SLOP, "the plain BT RM")
    assert not short.passed and "+0.05 [+0.01, +0.09]" in short.detail and "<= +0.05" in short.detail
    # se = 0.08 / 3.92; an unchanged share clears +0.05 with chance Phi(0.05 / se - 1.96) = Phi(0.49) = 0.69
    assert "a share that did not change would meet the bound 69% of the time" in short.detail
    assert slop.passed and "+0.5 [-0.5, +1.5]" in slop.detail and "the plain BT RM" in slop.detail
    h["ended_short_delta_hi"] = 0.05  # at the bound: passes
    assert hacking_checks(Gates(), h, SLOP, "rm")[0].passed
    assert not hacking_checks(Gates(), h, {**SLOP, "slop_delta_hi": 2.1}, "rm")[1].passed
    assert not hacking_checks(Gates(), {}, SLOP, "rm")[0].passed  # no word ranges measured: nothing shown, not a pass
    off = hacking_checks(Gates(hacking=False), {**h, "ended_short_delta_hi": 0.5}, SLOP, "rm")
    assert all(c.passed for c in off) and "(reported, not gating: gates.hacking=false)" in off[0].name
    assert off[0].detail.startswith("0.15 -> 0.20") and off[1].detail.startswith("2.0 -> 2.5")
    # the report's word: a missed bound that does not gate reads NOT MET, never PASS
    assert [c.label for c in off] == ["NOT MET", "MET"] and [short.label, slop.label] == ["FAIL", "PASS"]


def _heldout(rm_lo: float, range_lo: float) -> dict:
    from rlcw.pipelines.quickstart_gates import SUMMARY_KEYS

    h = dict.fromkeys(SUMMARY_KEYS, 0.1)
    h.update(rm_delta=0.5, rm_delta_lo=rm_lo, rm_delta_hi=0.9, in_range_delta_lo=range_lo, in_range_delta_hi=0.3)
    h.update(rm_delta_from_ending=0.4, rm_start=1.0, rm_final=1.5)
    for k in [k for k in h if k.startswith("short_rise")]:  # as before its interval existed: the gate falls back
        del h[k]  # to the point estimates
    return h


def test_quickstart_gates_fail_the_run(tmp_path, tiny_model_dir):
    from rlcw.pipelines.quickstart_gates import gate
    from rlcw.recipes.quickstart import Gates

    results = {
        "train_rm": {"metrics": {"eval/accuracy": 0.7, "eval/length_baseline_accuracy": 0.5}},
        "grpo": {"metrics": {"train/steps": 12.0}},
        "export": {"metrics": {"max_logit_diff": 0.0}},
        "heldout": _heldout(0.1, 0.05),
    }
    cfg = load_config(__import__("rlcw.recipes.quickstart", fromlist=["QuickstartConfig"]).QuickstartConfig, None, [])
    assert cfg.gates == Gates()
    _, checks, verdict = gate(cfg.gates, results, SLOP, "rm")
    assert [c.passed for c in checks] == [False, True, True, True, False, True] and verdict.startswith("Shown:")
    results["grpo"]["error"] = "stopped by reward-hacking monitor at step 5: rep_intra=0.6 > 0.4 (max_rep_intra)"
    _, checks, _ = gate(cfg.gates, results, SLOP, "rm")
    assert [c.passed for c in checks] == [False, True, False, True, False, True] and "rep_intra" in checks[2].detail
    assert checks[-1].detail.endswith("reward model: rm")  # what the RM is, not its training metrics
    off = Gates(hacking=False)
    metrics, checks, _ = gate(off, results, {**SLOP, "slop_delta_hi": 2.1}, "rm")
    assert metrics["gate/hacking"] == 0.0 and all(c.passed for c in checks[-2:])  # not met, though not gating
    assert gate(off, results, SLOP, "rm")[0]["gate/hacking"] == 0.0  # the short rise's bound (+0.1) is not met
    results["heldout"]["ended_short_delta_hi"] = 0.0
    assert gate(off, results, SLOP, "rm")[0]["gate/hacking"] == 1.0


def test_heldout_gate_needs_both_lower_bounds_above_zero():
    from rlcw.pipelines.quickstart_gates import gate
    from rlcw.recipes.quickstart import QuickstartConfig

    cfg = load_config(QuickstartConfig, None, [])
    base = {
        "train_rm": {"metrics": {"eval/accuracy": 0.9}},
        "grpo": {"metrics": {"train/steps": 12.0}},
        "export": {"metrics": {"max_logit_diff": 0.0}},
    }
    _, checks, verdict = gate(cfg.gates, {**base, "heldout": _heldout(0.1, -0.02)}, SLOP, "rm")
    assert not checks[3].passed and "Not shown: that stories got closer to the asked length" in verdict
    assert "explained by stories ending before the cap" in verdict
    _, checks, verdict = gate(cfg.gates, {**base, "heldout": _heldout(-0.1, 0.05)}, SLOP, "rm")
    assert not checks[3].passed and "Not shown: that the RM score rose" in verdict
    ok = _heldout(0.1, 0.05)  # in-range change 0.1 (from dict.fromkeys): an ended-short rise of 0.1 is allowed
    ok.update(ended_short_start=0.1, ended_short_final=0.2)
    _, checks, verdict = gate(cfg.gates, {**base, "heldout": ok}, SLOP, "rm")
    assert checks[3].passed and verdict.startswith("Shown:")
    ok.update(ended_short_final=0.66)  # seed 0 of this round's quickstart: one-liners 0.12 -> 0.66
    _, checks, verdict = gate(cfg.gates, {**base, "heldout": ok}, SLOP, "rm")
    assert not checks[3].passed and "Not shown: that the gain is not made of stories that end too short" in verdict
    # with the bootstrap interval of the difference, the rule reads its lower bound, not the point estimates:
    # calibration fixrm_c128_s1 (ended short +0.133 against +0.117 inside: point excess +0.016, CI [-0.09, +0.12])
    close = _heldout(0.1, 0.05)
    close.update(ended_short_start=0.117, ended_short_final=0.25, in_range_delta=0.117)
    close.update(short_rise_minus_in_range_rise=0.016, short_rise_minus_in_range_rise_lo=-0.09)
    close["short_rise_minus_in_range_rise_hi"] = 0.12
    _, checks, verdict = gate(cfg.gates, {**base, "heldout": close}, SLOP, "rm")
    assert checks[3].passed and "difference +0.02 [-0.09, +0.12]" in verdict
    close.update(short_rise_minus_in_range_rise=0.14, short_rise_minus_in_range_rise_lo=0.02)
    _, checks, verdict = gate(cfg.gates, {**base, "heldout": close}, SLOP, "rm")
    assert not checks[3].passed and "above 0" in verdict
    off = load_config(QuickstartConfig, None, ["gates.heldout=false"])
    _, checks, _ = gate(off.gates, {**base, "heldout": _heldout(-0.1, -0.1)}, SLOP, "rm")
    assert checks[3].passed


def test_heldout_table_says_when_no_pair_of_a_kind_exists():
    from rlcw.pipelines.quickstart_report import heldout_table

    h = _heldout(0.1, 0.05)  # a policy that stopped ending: no pair where both stories end
    h.update(rm_delta_both_finished=math.nan, rm_delta_both_finished_lo=math.nan, rm_delta_both_finished_hi=math.nan)
    h.update(rm_delta_both_cut=-0.01, rm_delta_both_cut_lo=-0.15, rm_delta_both_cut_hi=0.15)
    text = "\n".join(heldout_table(h))
    assert "both stories end before the cap: no such pair" in text and "nan" not in text
    assert "both are cut at the cap: -0.01 [-0.15, +0.15]" in text


def test_start_prices_are_reported_with_their_intervals():
    from rlcw.pipelines.quickstart_gates import start_prices
    from rlcw.pipelines.quickstart_report import heldout_table

    def rec(p, score, words, finished):
        return {
            "prompt_index": p,
            "score": score,
            "words": words,
            "finished": finished,
            "min_words": 10,
            "max_words": 20,
        }

    # ended 2, 1, 3 | cut 0, -1: ending pays 2.5; short 1 | inside 2, 3: ending short pays -1.5
    recs = [rec(0, 2.0, 15, True), rec(0, 1.0, 5, True), rec(0, 0.0, 30, False), rec(1, 3.0, 12, True)]
    recs.append(rec(1, -1.0, 25, False))
    p = start_prices(recs, n_resamples=200)
    assert p["rm_pays_ending"] == 2.5 and p["rm_pays_ending_short"] == -1.5
    assert p["rm_pays_ending_lo"] <= 2.5 <= p["rm_pays_ending_hi"] and -1 <= p["rm_words_pearson_start"] <= 1
    h = {**_heldout(0.1, 0.05), **p}
    text = "\n".join(heldout_table(h))
    assert f"- for ending (ended minus cut at the cap): +2.50 [{p['rm_pays_ending_lo']:+.2f}," in text
    assert "- for ending short (ended below the range minus ended inside it): -1.50" in text
    assert "per 10 words within ended stories: +1.33" in text


def test_a_slop_rise_is_warned_under_the_verdict():
    from rlcw.metrics.slop import Phrase
    from rlcw.pipelines.quickstart_report import slop_warning

    top = [Phrase("the very", 59.0, 103, 0, 20), Phrase("the the", 62.0, 54, 0, 18)]
    rise = {"slop_delta": 12.7, "slop_delta_lo": 10.9, "slop_delta_hi": 14.7, "top_tuned": top}
    text = " ".join(slop_warning(rise))
    assert "Warning: slop rose +12.7 points [+10.9, +14.7]" in text and "'the very' (59x, 103 uses)" in text
    assert slop_warning({**rise, "slop_delta_lo": 0.9}) == []  # within SLOP_WARN (1 point) of no change
    assert slop_warning({**rise, "slop_delta_lo": float("nan")}) == []


def test_heldout_table_warns_when_a_handful_of_prompts_carries_the_intervals():
    from rlcw.pipelines.quickstart_report import heldout_table

    few = "\n".join(heldout_table({**_heldout(0.1, 0.05), "n_prompts": 8.0}))
    assert "**Warning: only 8 prompts: the interval is wide and the changes may mislead.**" in few
    assert "Warning" not in "\n".join(heldout_table({**_heldout(0.1, 0.05), "n_prompts": 32.0}))
