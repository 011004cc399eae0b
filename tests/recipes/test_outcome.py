"""The outcome study end to end on the tiny model: every stage, measurements, judge, report, resume."""

from __future__ import annotations

import json
import math

import pytest

from rlcw.config import load_config

SENTENCES = [
    "The lighthouse keeper counted the ships every night.",
    "One evening a ship came in with no crew at all.",
    "She rowed out with a lantern and a loaf of bread.",
    "On the deck she found a cat asleep on a map.",
    "The map showed her own island with a cross on the lighthouse.",
    "She dug beneath the stairs until dawn.",
    "There was only a letter, written in her mother's hand.",
    "She read it twice and then put out the light.",
]


def _tmas(folder, n=8):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "tell-me-a-story-train.jsonl", "w", encoding="utf-8") as f:
        for i in range(n):
            story = " ".join(SENTENCES[i % 3 :] + SENTENCES[: i % 3]) * 2
            row = {
                "example_id": str(i),
                "inputs": f"Write a story about a lighthouse keeper number {i} and a ship.",
                "targets": story,
            }
            f.write(json.dumps(row) + "\n")
    return folder


TINY = [
    "data.max_eval_prompts=3",
    "data.samples_per_prompt=2",
    "proxy_rm.data.max_train_pairs=32",
    "proxy_rm.data.max_eval_pairs=16",
    "proxy_rm.train.max_steps=2",
    "proxy_rm.train.batch_size=4",
    "proxy_rm.train.eval_steps=2",
    "proxy_rm.rm.max_length=64",
    "proxy_rm.lora.r=4",
    "gold_generate.sampling.max_new_tokens=24",
    "gold_pairs.data.min_words=3",
    "gold_pairs.data.eval_fraction=0.5",
    "gold_rm.train.max_steps=2",
    "gold_rm.train.batch_size=2",
    "gold_rm.train.eval_steps=2",
    "gold_rm.rm.max_length=64",
    "gold_rm.lora.r=4",
    "ppo.train.max_steps=2",
    "ppo.train.save_steps=1",
    "ppo.train.batch_size=4",
    "ppo.train.minibatch_size=2",
    "ppo.train.micro_batch_size=2",
    "ppo.train.max_new_tokens=8",
    "ppo.lora.r=4",
    "ppo.value.lora.r=4",
    "ppo.data.max_train_prompts=8",
    "dpo.train.max_steps=2",
    "dpo.train.save_steps=1",
    "dpo.train.batch_size=4",
    "dpo.train.max_length=64",
    "dpo.lora.r=4",
    "dpo.data.max_pairs=16",
    "grpo_lc.reward.specs.overlong.buffer=4",
    "best_of_n.best_of.n=4",
    "measure.batch_size=8",
    "judge.max_items=2",
] + [
    f"{g}.{k}"
    for g in ("grpo", "grpo_lc")
    for k in (
        "train.max_steps=2",
        "train.save_steps=1",
        "train.batch_size=4",
        "train.num_generations=2",
        "train.max_completion_length=8",
        "lora.r=4",
        "data.max_train_prompts=8",
        "data.fit_to_cap=ignore",
    )
]


@pytest.fixture(scope="module")
def study(tmp_path_factory, tiny_model_dir):
    from rlcw.recipes.outcome import OutcomeConfig, main

    tmp = tmp_path_factory.mktemp("outcome")
    script = tmp / "judge.jsonl"
    script.write_text(
        json.dumps({"reply": "Plot: A\nCreativity: A\nDevelopment: B\nLanguage Use: A\nOverall: A"}) + "\n"
    )
    overrides = [
        f"output_dir={tmp}",
        f"model.name={tiny_model_dir}",
        f"data.tmas={_tmas(tmp / 'tmas')}",
        "judge.client.kind=scripted",
        f"judge.client.script={script}",
        *TINY,
    ]
    cfg = load_config(OutcomeConfig, "configs/outcome/cpu.yaml", overrides)
    return tmp / "outcome", main(cfg), (OutcomeConfig, overrides, main)


def test_every_stage_and_measurement(study):
    root, summary, _ = study
    assert summary["status"] == "completed"
    for stage in (
        "proxy_pairs",
        "proxy_rm",
        "gold_generate",
        "gold_pairs",
        "gold_rm",
        "grpo",
        "grpo_lc",
        "ppo",
        "dpo",
        "best_of_n",
        "eval_proxy_rm_on_proxy_pairs",
        "eval_gold_rm_on_gold_pairs",
        "eval_proxy_rm_on_gold_pairs",
        "eval_gold_rm_on_proxy_pairs",
    ):
        assert json.loads((root / stage / "summary.json").read_text())["status"] == "completed", stage
    rows = [json.loads(line) for line in (root / "measurements.jsonl").read_text().splitlines()]
    steps = {}
    for r in rows:
        steps.setdefault(r["run"], []).append(r["step"])
    assert (
        steps["grpo"] == [0, 1, 2]
        and steps["grpo_lc"] == [0, 1, 2]
        and steps["ppo"] == [0, 1, 2]
        and steps["dpo"] == [0, 1, 2]
    )
    assert steps["best_of_n"] == [1, 2, 4]
    start = next(r for r in rows if r["step"] == 0)
    assert start["kl_seq"] == 0.0
    trained = [r for r in rows if r["step"] > 0 and r["run"] != "best_of_n"]
    assert all(r["kl_token"] >= -1e-3 for r in trained) and any(
        abs(r["kl_seq"]) > 0 for r in trained
    )  # lr>0 moved the policy
    for r in rows:
        for key in ("proxy", "gold", "words", "rep_intra_3", "distinct_3"):
            assert isinstance(r[key], float) and math.isfinite(r[key]), (r["run"], key)  # NaN is a float too
    judged = [(r["run"], r["step"]) for r in rows if "judge/win_rate" in r]
    assert judged == [
        ("grpo", 1),
        ("grpo", 2),
        ("grpo_lc", 1),
        ("grpo_lc", 2),
        ("ppo", 1),
        ("ppo", 2),
        ("dpo", 1),
        ("dpo", 2),
        ("best_of_n", 2),
        ("best_of_n", 4),
    ]
    # the scripted judge always answers "Overall: A": each order gives one win, so every candidate wins 0.5
    assert all(r["judge/win_rate"] == 0.5 and r["judge/judgments"] == 4 for r in rows if "judge/win_rate" in r)


def test_report_has_every_curve_and_the_table(study):
    root, summary, _ = study
    text = (root / "report.md").read_text()
    for part in (
        "## Conclusion",
        "## Reward models",
        "## Final numbers",
        "## Curves",
        "## Scaling up",
        "| start model |",
    ):
        assert part in text, part
    for run in ("grpo", "grpo_lc", "ppo", "dpo", "best_of_n"):
        assert f"| {run} |" in text and f"**{run}:" in text, run
    for plot in ("proxy_vs_gold", "gold_vs_kl", "length_repetition_diversity", "win_rates"):
        assert (root / "plots" / f"{plot}.png").stat().st_size > 1000, plot
        assert f"plots/{plot}.png" in text
    assert 0.0 <= summary["metrics"]["agreement/proxy_pairs"] <= 1.0 and "final/grpo/delta_gold" in summary["metrics"]


def test_rerun_reuses_completed_stages(study, capsys):
    root, first, (cls, overrides, main) = study
    before = (root / "measurements.jsonl").read_text()
    again = main(load_config(cls, "configs/outcome/cpu.yaml", overrides))
    out = capsys.readouterr().out
    assert again["status"] == "completed" and out.count("completed before, reused") == 15
    assert (
        root / "measurements.jsonl"
    ).read_text() == before  # measurements came from the cache, judge from its cache


def test_unknown_run_is_rejected(tmp_path):
    from rlcw.errors import RlcwError
    from rlcw.recipes.outcome import OutcomeConfig, main

    cfg = load_config(OutcomeConfig, None, [f"output_dir={tmp_path}", "runs=[grpo,rlhf]"])
    with pytest.raises(RlcwError, match="unknown run"):
        main(cfg)
