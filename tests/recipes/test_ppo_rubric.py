"""rlcw ppo with a rubric reward whose scripted judge answers garbage for one story of every batch: the run keeps
training, that story gets the batch mean of the valid rubric scores, and `rubric/<name>/no_verdict` counts it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlcw.config import load_config


def test_ppo_keeps_training_through_a_story_without_verdict(tmp_path, tiny_model_dir):
    from rlcw.recipes.ppo import PPORecipeConfig, main

    script = tmp_path / "judge.jsonl"  # one criterion, 4 stories a step: replies in turn, the third is no verdict
    script.write_text("".join(json.dumps({"reply": r}) + "\n" for r in ("Answer: Yes", "Answer: No", "Hmm.", "Yes.")))
    cfg = load_config(
        PPORecipeConfig,
        None,
        [
            f"output_dir={tmp_path}",
            "run_name=ppo_rubric",
            f"model.name={tiny_model_dir}",
            "value.init=policy",
            "reward.specs.rm.weight=0",
            "reward.specs.length_range.weight=0",
            "reward.specs.rubric={type: rubric, weight: 2.0, criteria: ['Does the story end?'], verdict: text, "
            f"client: {{kind: scripted, script: {script}}}}}",
            "train.max_steps=2",
            "train.batch_size=4",
            "train.minibatch_size=2",
            "train.micro_batch_size=2",
            "train.max_new_tokens=8",
            "train.save_steps=2",
            "eval.every_steps=0",
            "eval.evaluators.rm.enabled=false",
            "lora.r=4",
            "value.lora.r=4",
            "data.max_train_prompts=8",
        ],
    )
    with pytest.warns(RuntimeWarning, match=r"reward rubric: 1 of 4 stories got no valid verdict from the scripted"):
        summary = main(cfg)
    assert summary["status"] == "completed"
    rows = [json.loads(x) for x in Path(summary["artifacts"]["metrics"]).read_text().splitlines()]
    train = [r for r in rows if "reward" in r]
    assert [r["step"] for r in train] == [1, 2]
    for r in train:
        # yes, no, (none -> mean of 1, 0, 1 = 2/3), yes: the term's mean stays 2/3; weight 2 -> reward 4/3
        assert r["rubric/rubric/no_verdict"] == 1.0 and r["rubric/rubric/invalid"] == pytest.approx(0.25)
        assert r["rewards/rubric/mean"] == pytest.approx(2 / 3, abs=1e-6)
        assert r["reward"] == pytest.approx(4 / 3, abs=1e-5)
