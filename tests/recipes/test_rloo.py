"""rloo on the tiny policy with the shipped config: rm + slop (shipped) + a rubric judged by the tiny model;
the adapter moves, every reward and monitor series is logged, and a resumed run repeats an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlcw.config import load_config
from rlcw.errors import RlcwError
from rlcw.models import load_causal_lm

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "rloo" / "cpu.yaml"


def _overrides(root: Path, name: str, model: Path, rm: str, steps: int) -> list[str]:
    return [
        f"output_dir={root}",
        f"run_name={name}",
        f"model.name={model}",
        f"reward.rm_path={rm}",
        f"train.max_steps={steps}",
        "train.save_steps=1",
        "train.save_total_limit=null",
        "train.batch_size=4",
        "train.num_generations=2",
        "train.max_completion_length=8",
        "train.learning_rate=1e-2",
        "train.log_kl_every=1",
        "lora.r=4",
        "data.max_train_prompts=8",
        "data.fit_to_cap=ignore",  # 8 tokens hold no prompt's range
        "eval.every_steps=0",
        "probe.every_steps=0",
        "reward.specs.judge.type=rubric",
        "reward.specs.judge.weight=0.5",
        "reward.specs.judge.client.kind=local",
        f"reward.specs.judge.client.model={model}",
        "reward.specs.judge.criteria=[Does the story end?,Is the story vivid?]",
    ]


def _rows(run: dict) -> dict[int, dict]:
    path = Path(run["artifacts"]["metrics"])
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return {r["step"]: r for r in rows if "loss" in r}


@pytest.fixture(scope="module")
def rloo_full(runs_root, rm_run, tiny_model_dir):
    from rlcw.recipes.rloo import RLOORecipeConfig, main

    args = _overrides(runs_root, "rloo_full", tiny_model_dir, rm_run["artifacts"]["model"], 3)
    return main(load_config(RLOORecipeConfig, CONFIG, args))


def test_rloo_trains_a_loadable_adapter_that_changed(rloo_full, tiny_model_dir):
    assert rloo_full["status"] == "completed" and rloo_full["metrics"]["train/steps"] == 3
    final = Path(rloo_full["artifacts"]["policy"])
    tuned, base = load_causal_lm(str(final), merge_lora=True), load_causal_lm(str(tiny_model_dir))
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert not torch.allclose(tuned(input_ids=ids).logits, base(input_ids=ids).logits)
    report = (final.parents[2] / "rloo_full" / "report.md").read_text()
    assert report.startswith("# DONE: steps 3") and "\n# RLOO run `rloo_full`" in report and "GRPO" not in report
    assert (final.parents[2] / "rloo_full" / "plots" / "rubric.png").read_bytes()[:4] == b"\x89PNG"


def test_rloo_logs_rewards_rubric_slop_and_monitors(rloo_full):
    rows = _rows(rloo_full)
    assert sorted(rows) == [1, 2, 3]
    row = rows[3]
    for key in ("rewards/rm/mean", "rewards/slop/mean", "rewards/judge/mean", "slop/score", "slop/phrases"):
        assert key in row, key
    assert 0.0 <= row["rubric/judge/c1"] <= 1.0 and 0.0 <= row["rubric/judge/c2"] <= 1.0  # mean P(yes) per criterion
    assert row["rubric/judge/invalid"] == 0.0  # a logprob verdict is never invalid on a real model
    assert row["monitor/kl_to_start"] > 0.0 and "monitor/distinct_batch" in row
    assert 0.0 <= row["monitor/slop"] <= 100.0
    run_dir = Path(rloo_full["artifacts"]["metrics"]).parent
    assert (run_dir / "samples" / "train_step_000003.jsonl").is_file()
    order = [json.loads(x) for x in (run_dir / "samples" / "data_order.jsonl").read_text().splitlines()]
    assert [o["step"] for o in order] == [1, 2, 3]


def test_rloo_summary_has_the_share_of_rm_inputs_cut(rloo_full):
    assert 0.0 <= rloo_full["metrics"]["rm/truncated_share"] <= 1.0


def test_rloo_checks_rewards_before_the_run_folder(tmp_path):
    """A bad reward spec stops `rlcw rloo --check` (and a run) before the run folder would be written."""
    from rlcw.recipes.common.run import check_only
    from rlcw.recipes.rloo import RLOORecipeConfig, main

    cfg = load_config(
        RLOORecipeConfig, CONFIG, [f"output_dir={tmp_path}", "run_name=bad", "reward.specs.rm.type=bleu"]
    )
    with check_only(), pytest.raises(RlcwError, match="bleu"):
        main(cfg)
    assert not (tmp_path / "bad").exists()


def test_rloo_resumes_like_an_uninterrupted_run(rloo_full, runs_root, rm_run, tiny_model_dir):
    from rlcw.recipes.rloo import RLOORecipeConfig, main

    rm = rm_run["artifacts"]["model"]
    first = main(load_config(RLOORecipeConfig, CONFIG, _overrides(runs_root, "rloo_resumed", tiny_model_dir, rm, 2)))
    assert first["status"] == "completed"
    args = _overrides(runs_root, "rloo_resumed", tiny_model_dir, rm, 3) + ["train.resume=true"]
    resumed = main(load_config(RLOORecipeConfig, CONFIG, args))
    assert resumed["metrics"]["train/steps"] == 3
    full, again = _rows(rloo_full)[3], _rows(resumed)[3]
    for key in ("loss", "reward", "rewards/rm/mean", "monitor/kl_to_start"):
        assert again[key] == pytest.approx(full[key], rel=1e-4, abs=1e-6), key


def test_rloo_config_errors_name_the_key():
    from rlcw.recipes.rloo import RLOORecipeConfig, validate

    with pytest.raises(RlcwError, match="leave-one-out"):
        validate(load_config(RLOORecipeConfig, CONFIG, ["train.num_generations=1", "train.batch_size=4"]))
    with pytest.raises(RlcwError, match="reward_clip_range"):
        validate(load_config(RLOORecipeConfig, CONFIG, ["train.reward_clip_range=[5,-5]"]))
    with pytest.raises(RlcwError, match="unknown rollout.kind 'fast'"):  # TRL's RLOOTrainer has no rollout_func
        validate(load_config(RLOORecipeConfig, CONFIG, ["rollout.kind=fast"]))
    with pytest.raises(RlcwError, match="config key 'train.use_vllm' moved: use rollout.kind=vllm"):
        load_config(RLOORecipeConfig, CONFIG, ["train.use_vllm=true"])


def test_rloo_rollout_kind_vllm_reaches_trl(tmp_path):
    from types import SimpleNamespace

    from rlcw.recipes.rloo import RLOORecipeConfig, build_args, validate

    run = SimpleNamespace(checkpoints=tmp_path)
    assert build_args(load_config(RLOORecipeConfig, CONFIG), run, [1.0]).use_vllm is False
    cfg = load_config(RLOORecipeConfig, CONFIG, ["rollout.kind=vllm", "rollout.vllm.mode=server"])
    validate(cfg)
    args = build_args(cfg, run, [1.0])
    assert (args.use_vllm, args.vllm_mode) == (True, "server")
