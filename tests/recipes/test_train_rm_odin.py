"""train-rm with rm.length_head=true (ODIN) on a tiny model: the two-head folder, scoring by head through
BTScorer and a reward spec, the per-head held-out accuracies and the logged loss parts."""

import json
from pathlib import Path

import pytest

from rlcw.rewards.bt import BTScorer
from rlcw.rewards.factory import build_rewards
from rlcw.rewards.render import load_spec

STORIES = ["A short story. It ends.", "Another one that is longer. It goes on and on. Then, at last, it ends."]


@pytest.fixture(scope="module")
def odin_run(runs_root, pairs_run, tiny_model_dir):
    from rlcw.config import load_config
    from rlcw.recipes.train_rm import TrainRMConfig, main

    cfg = load_config(
        TrainRMConfig,
        None,
        [
            f"output_dir={runs_root}",
            "run_name=rm_odin",
            f"model.name={tiny_model_dir}",
            f"data.train_file={pairs_run['artifacts']['train']}",
            f"data.eval_file={pairs_run['artifacts']['eval']}",
            "data.max_train_pairs=32",
            "data.max_eval_pairs=16",
            "train.max_steps=4",
            "train.batch_size=4",
            "train.eval_steps=2",
            "train.logging_steps=1",
            "rm.max_length=64",
            "rm.length_head=true",
            "rm.odin.orthogonality=0.5",
            "lora.r=4",
        ],
    )
    return main(cfg)


def test_folder_names_its_heads_and_loads_in_transformers(odin_run):
    from transformers import AutoModelForSequenceClassification

    model_dir = Path(odin_run["artifacts"]["model"])
    assert load_spec(model_dir).extra["heads"] == ["quality", "length"]
    model = AutoModelForSequenceClassification.from_pretrained(model_dir)
    assert model.config.num_labels == 2 and model.config.id2label == {0: "quality", 1: "length"}


def test_scorers_and_reward_specs_use_the_quality_head_unless_told(odin_run):
    model_dir = odin_run["artifacts"]["model"]
    heads = BTScorer(model_dir).score_heads(["p", "p"], STORIES)
    assert heads["sum"] == pytest.approx([q + n for q, n in zip(heads["quality"], heads["length"], strict=True)])
    assert heads["quality"] != pytest.approx(heads["length"], abs=1e-6)
    assert BTScorer(model_dir).score(["p", "p"], STORIES) == pytest.approx(heads["quality"], abs=1e-5)
    (default, length, summed), _ = build_rewards(
        {
            "q": {"type": "bt", "rm_path": model_dir},
            "n": {"type": "bt", "rm_path": model_dir, "head": "length"},
            "s": {"type": "bt", "rm_path": model_dir, "head": "sum"},
        }
    )
    prompts = [[{"role": "user", "content": "p"}]] * 2
    completions = [[{"role": "assistant", "content": s}] for s in STORIES]
    assert default(prompts, completions) == pytest.approx(heads["quality"], abs=1e-5)
    assert length(prompts, completions) == pytest.approx(heads["length"], abs=1e-5)
    assert summed(prompts, completions) == pytest.approx(heads["sum"], abs=1e-5)


def test_metrics_hold_every_head_and_the_loss_parts(odin_run):
    m = odin_run["metrics"]
    for head in ("quality", "length", "sum"):
        assert 0.0 <= m[f"eval/{head}/accuracy"] <= 1.0
    assert m["eval/accuracy"] == m["eval/quality/accuracy"]
    rows = [
        json.loads(x) for x in (Path(odin_run["artifacts"]["model"]).parent / "metrics.jsonl").read_text().splitlines()
    ]
    train = [r for r in rows if "odin/rho_length" in r]
    assert train and all(-1.0 <= r["odin/rho_length"] <= 1.0 and "odin/head_dot" in r for r in train)
    assert any("eval_odin/bt_loss" in r for r in rows)


def test_length_head_only_for_bt_and_without_centering():
    from rlcw.config import load_config
    from rlcw.errors import RlcwError
    from rlcw.recipes.train_rm import TrainRMConfig, validate

    with pytest.raises(RlcwError, match="rm.type=bt"):
        validate(load_config(TrainRMConfig, None, ["rm.type=genrm", "rm.length_head=true"]))
    with pytest.raises(RlcwError, match="center_rewards_coefficient"):
        validate(load_config(TrainRMConfig, None, ["rm.length_head=true", "rm.center_rewards_coefficient=0.01"]))
