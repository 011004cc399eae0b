"""An RL run with the judge and the human-study evaluators enabled, end to end.

A scripted judge that always answers "Preferred: A" must give the candidate exactly half the
verdicts (each pair is judged in both orders) and zero order consistency; the study evaluator
must leave a blinded packet per evaluation that `study-ingest` can later read."""

from __future__ import annotations

import json
from pathlib import Path

from rlcw.config import load_config


def test_grpo_with_judge_and_study_evaluators(runs_root, rm_run, tiny_model_dir, tmp_path):
    from rlcw.recipes.grpo import GRPORecipeConfig, main

    script = tmp_path / "always_a.jsonl"
    script.write_text(json.dumps({"reply": "The first is tighter.\nPreferred: A"}) + "\n", encoding="utf-8")
    cfg = load_config(
        GRPORecipeConfig,
        None,
        [
            f"output_dir={runs_root}",
            "run_name=grpo_judge_study",
            f"model.name={tiny_model_dir}",
            f"reward.rm_path={rm_run['artifacts']['model']}",
            "train.max_steps=2",
            "train.batch_size=4",
            "train.num_generations=2",
            "train.max_completion_length=8",
            "lora.r=4",
            "data.max_train_prompts=8",
            "eval.every_steps=2",
            "eval.num_prompts=3",
            "eval.max_new_tokens=8",
            "eval.evaluators.length={}",
            "eval.evaluators.judge.protocol=litbench",
            "eval.evaluators.judge.client.kind=scripted",
            f"eval.evaluators.judge.client.script={script}",
            "eval.evaluators.study.raters_per_item=1",
        ],
    )
    summary = main(cfg)
    assert summary["status"] == "completed", summary.get("error")
    run_dir = Path(summary["artifacts"]["metrics"]).parent
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    judged = [r for r in rows if "eval/judge/win_rate" in r]
    assert [r["step"] for r in judged] == [0, 2]
    for r in judged:
        assert r["eval/judge/judgments"] == 6.0  # 3 prompts x 2 orders
        assert r["eval/judge/invalid"] == 0.0
        assert r["eval/judge/win_rate"] == 0.5  # "A" in both orders: one win and one loss per prompt
        assert r["eval/judge/order_consistency"] == 0.0
        assert r["eval/study/pairs"] == 3.0
    packet = run_dir / "samples" / "study" / "step_000002"
    assert (run_dir / "private" / "study" / "step_000002" / "key.json").is_file()
    assert not list((run_dir / "samples").rglob("key*"))
    assert list(packet.rglob("*.html"))
