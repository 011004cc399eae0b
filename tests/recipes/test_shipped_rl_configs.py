"""Every shipped grpo, ppo, rloo and dpo config runs main() on the tiny model: the YAML users start from,
with overrides only for size (steps, batch, caps, prompt counts) and paths (model, RM, pairs, output).

The CPU configs' inputs exist offline (bundled prompts, the pairs and RM the session fixtures
build), so they run; the cluster configs name hub models, GPUs and LitBench prompt files, so they
are only validated (`validate(cfg)`, no model). A new file under configs/grpo|ppo|rloo|dpo must be added
to SIZE or HUB_ONLY."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlcw.config import load_config

ROOT = Path(__file__).resolve().parents[2]
SIZE = {
    "grpo/cpu.yaml": [
        "train.max_steps=2",
        "train.batch_size=4",
        "train.num_generations=2",
        "data.max_train_prompts=8",
        "eval.every_steps=2",
        "eval.num_prompts=2",
    ],
    "grpo/rubric_cpu.yaml": [
        "train.max_steps=2",
        "train.batch_size=4",
        "train.num_generations=2",
        "data.max_train_prompts=8",
        "eval.every_steps=2",
        "eval.num_prompts=2",
        "reward.specs.rubric.criteria=ttcw:1",  # the embedded judge, one criterion
    ],
    "grpo/agents_room_cpu.yaml": [
        "train.max_steps=2",
        "data.max_train_prompts=8",
        "agents.caps.planning=4",
        "agents.caps.writing=20",  # 5 writers x 20 tokens hold ~71 words: fit_to_cap=filter keeps every bundled prompt
        "agents.context_tokens=1024",
        "eval.every_steps=2",
        "eval.num_prompts=2",
    ],
    "ppo/cpu.yaml": [
        "train.max_steps=2",
        "train.batch_size=4",
        "train.minibatch_size=2",
        "train.micro_batch_size=2",
        "train.max_new_tokens=8",
        "data.max_train_prompts=8",
        "eval.every_steps=2",
        "eval.num_prompts=2",
        "eval.max_new_tokens=8",
    ],
    "rloo/cpu.yaml": [
        "train.max_steps=2",
        "train.batch_size=4",
        "train.num_generations=2",
        "data.max_train_prompts=8",
        "eval.every_steps=2",
        "eval.num_prompts=2",
    ],
    "dpo/cpu.yaml": [
        "train.max_steps=2",
        "train.batch_size=4",
        "train.max_length=64",
        "train.save_steps=2",
        "data.max_pairs=16",
        "data.max_eval_pairs=8",
        "eval.every_steps=2",
        "eval.num_prompts=2",
        "eval.max_new_tokens=8",
    ],
}
CONFIGS = sorted(SIZE)
HUB_ONLY = ["grpo/litbench_1node.yaml", "grpo/litbench_2node.yaml", "ppo/litbench_1node.yaml"]
RECIPE_CLASS = {
    "grpo": "GRPORecipeConfig",
    "ppo": "PPORecipeConfig",
    "dpo": "DPORecipeConfig",
    "rloo": "RLOORecipeConfig",
}


def test_every_shipped_rl_config_is_run_or_validated_here():
    shipped = {
        f"{p.parent.name}/{p.name}"
        for d in ("grpo", "ppo", "dpo", "rloo")
        for p in (ROOT / "configs" / d).glob("*.yaml")
    }
    assert shipped == set(CONFIGS) | set(HUB_ONLY)


@pytest.mark.parametrize("name", HUB_ONLY)
def test_cluster_config_validates(name):
    import importlib

    stage = name.split("/")[0]
    module = importlib.import_module(f"rlcw.recipes.{stage}")
    module.validate(load_config(getattr(module, RECIPE_CLASS[stage]), ROOT / "configs" / name))


def _paths(name: str, root: Path, model: Path, rm: str, pairs: dict) -> list[str]:
    out = [f"output_dir={root}", f"run_name=shipped_{name.replace('/', '_')[:-5]}", f"model.name={model}"]
    if name.startswith("dpo/"):
        return out + [
            f"data.train_file={pairs['train']}",
            f"data.eval_file={pairs['eval']}",
            f"eval.evaluators.rm.rm_path={rm}",
        ]
    return out + [f"reward.rm_path={rm}"]


@pytest.mark.parametrize("name", CONFIGS)
def test_shipped_config_runs(name, runs_root, tiny_model_dir, rm_run, pairs_run):
    import importlib

    stage = name.split("/")[0]
    module = importlib.import_module(f"rlcw.recipes.{stage}")
    cls = getattr(module, RECIPE_CLASS[stage])
    overrides = (
        _paths(name, runs_root, tiny_model_dir, rm_run["artifacts"]["model"], pairs_run["artifacts"]) + SIZE[name]
    )
    summary = module.main(load_config(cls, ROOT / "configs" / name, overrides))
    assert summary["status"] == "completed", summary.get("error")
    assert summary["metrics"]["train/steps"] == 2
    run_dir = Path(summary["artifacts"]["metrics"]).parent
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval/length/mean_words" in r] == [0, 2]  # periodic evaluation ran
    assert [r["step"] for r in rows if "eval/rm/score" in r] == [0, 2]  # the RM evaluator scored them
    if name == "grpo/cpu.yaml":  # reference injection beside the periodic evaluation: both groups of each step
        assert [r["rollout/references"] for r in rows if "rollout/references" in r] == [2.0, 2.0]
    final = Path(summary["artifacts"]["policy"])
    assert (final / "adapter_config.json").is_file()  # every shipped config trains LoRA
