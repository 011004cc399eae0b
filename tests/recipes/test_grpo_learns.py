"""Proof that `rlcw grpo` learns: a dense reward given by import path rises from ~0.5 to >= 0.9 on the
tiny model within a fixed number of steps, and does not with train.learning_rate=0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlcw.config import load_config

pytestmark = pytest.mark.recipe
STEPS = 12


def _run(runs_root, tiny_model_dir, name: str, lr: float) -> list[dict]:
    from rlcw.recipes.grpo import GRPORecipeConfig, main

    cfg = load_config(
        GRPORecipeConfig,
        None,
        [
            f"output_dir={runs_root}",
            f"run_name={name}",
            f"model.name={tiny_model_dir}",
            "reward.specs.rm.weight=0",
            "reward.specs.length_range.weight=0",
            "eval.evaluators.rm.enabled=false",
            "reward.specs.half.type=python",
            "reward.specs.half.target=learning_reward:half_vocab_share",
            f"reward.specs.half.model_dir={tiny_model_dir}",
            f"train.max_steps={STEPS}",
            "train.batch_size=16",
            "train.num_generations=8",
            "train.max_completion_length=8",
            f"train.learning_rate={lr}",
            "train.lr_scheduler_type=constant",
            "train.temperature=1.0",
            "train.log_kl_every=4",
            "eval.every_steps=0",
            "probe.every_steps=4",
            "probe.num_texts=2",
            "lora.enabled=false",
            "data.max_train_prompts=16",
        ],
    )
    summary = main(cfg)
    assert summary["status"] == "completed"
    rows = [json.loads(x) for x in (Path(runs_root) / name / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "rewards/half/mean" in r]


@pytest.fixture
def on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))


def test_grpo_learns_a_dense_reward_given_by_import_path(on_path, runs_root, tiny_model_dir):
    rows = _run(runs_root, tiny_model_dir, "learns", 0.1)
    start = rows[0]["rewards/half/mean"]
    assert 0.3 < start < 0.7, start  # a random policy: about half its tokens fall in the half
    assert max(r["rewards/half/mean"] for r in rows[-3:]) >= 0.9, [round(r["rewards/half/mean"], 2) for r in rows]
    probe = [json.loads(x) for x in (Path(runs_root) / "learns" / "probe.jsonl").read_text().splitlines()]
    assert [p["step"] for p in probe] == [4, 8, 12] and probe[-1]["probe/abs_logp_change"] > 0.01
    # the probe's KL is its own step's (log_kl_every = probe.every_steps), not the one logged a probe before
    kl = {r["step"]: r["monitor/kl_to_start"] for r in rows if "monitor/kl_to_start" in r}
    assert [p["probe/kl_to_start"] for p in probe] == [kl[4], kl[8], kl[12]] and kl[4] != kl[8]


def test_grpo_does_not_learn_with_learning_rate_zero(on_path, runs_root, tiny_model_dir):
    rows = _run(runs_root, tiny_model_dir, "frozen", 0.0)
    assert all(r["rewards/half/mean"] < 0.75 for r in rows), [round(r["rewards/half/mean"], 2) for r in rows]
    probe = [json.loads(x) for x in (Path(runs_root) / "frozen" / "probe.jsonl").read_text().splitlines()]
    assert probe and all(p["probe/abs_logp_change"] == 0.0 for p in probe)
