"""train-rm (BT, LoRA) on a tiny model: folder contract, scoring, metrics."""

import json
import math
from pathlib import Path

import pytest

from rlcw.errors import RlcwError
from rlcw.rewards.bt import BTScorer
from rlcw.rewards.render import load_spec


def test_rm_folder_carries_its_contract(rm_run, tiny_model_dir):
    model_dir = Path(rm_run["artifacts"]["model"])
    spec = load_spec(model_dir)
    assert spec.type == "bt" and spec.base_model == str(tiny_model_dir) and spec.max_length == 64
    assert spec.pad_token == "<|endoftext|>"
    scorer = BTScorer(model_dir)
    assert scorer.tokenizer.pad_token == "<|endoftext|>" != scorer.tokenizer.eos_token
    scores = scorer.score(["a prompt", "a prompt"], ["A short story. It ends.", "Another one that is longer. It goes on. Then it ends."])
    assert len(scores) == 2 and all(math.isfinite(s) for s in scores) and scores[0] != scores[1]


def test_scores_do_not_depend_on_batching(rm_run):
    scorer = BTScorer(rm_run["artifacts"]["model"], batch_size=1)
    stories = ["One. Two.", "A much longer story about a fox who found a key. The end.", "Mid length story here."]
    one = scorer.score(["p"] * 3, stories)
    scorer.batch_size = 3
    assert scorer.score(["p"] * 3, stories) == pytest.approx(one, abs=1e-4)


def test_rm_metrics_and_summary(rm_run):
    run_dir = Path(rm_run["artifacts"]["model"]).parent
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in r for r in rows) and any("eval_accuracy" in r for r in rows)
    assert 0.0 <= rm_run["metrics"]["eval/accuracy"] <= 1.0
    assert rm_run["metrics"]["train/steps"] == 4
    assert list((run_dir / "tensorboard").rglob("events.out.tfevents*"))


def test_scorer_rejects_a_folder_that_is_not_an_rm(tiny_model_dir):
    with pytest.raises(RlcwError, match="rlcw_rm.json"):
        BTScorer(tiny_model_dir)
