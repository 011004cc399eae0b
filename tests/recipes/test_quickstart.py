"""quickstart end to end on the tiny model: every stage folder, the report, plots, gates."""

import json

from rlcw.config import load_config


def test_quickstart_tiny_end_to_end(tmp_path, tiny_model_dir):
    from rlcw.recipes.quickstart import QuickstartConfig, main

    cfg = load_config(
        QuickstartConfig,
        None,
        [
            f"output_dir={tmp_path}",
            "run_name=qs",
            f"model.name={tiny_model_dir}",
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
            "grpo.eval.every_steps=1",
            "grpo.eval.num_prompts=2",
            "grpo.eval.max_new_tokens=6",
            "grpo.lora.r=4",
            "grpo.data.max_train_prompts=4",
            "generate.data.max_prompts=2",
            "generate.sampling.max_new_tokens=6",
            "gates.min_rm_accuracy=0.0",
            "gates.min_grpo_steps=2",
        ],
    )
    summary = main(cfg)
    root = tmp_path / "qs"
    assert summary["status"] == "completed", summary
    for stage in ("prepare_model", "build_pairs", "train_rm", "grpo", "export", "generate_before", "generate_after"):
        assert json.loads((root / stage / "summary.json").read_text())["status"] == "completed", stage
    report = (root / "report.md").read_text()
    assert "PASS: GRPO steps: 2" in report and "## Samples before / after" in report
    assert "PASS: GRPO reward-hacking monitors in range" in report
    assert "| base model | after GRPO (exported) |" in report
    for png in ("rm_accuracy.png", "grpo_reward_length.png"):
        data = (root / "plots" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert {"time/train_rm_s", "time/grpo_s", "rm/accuracy"} <= set(summary["metrics"])


def test_quickstart_gates_fail_the_run(tmp_path, tiny_model_dir):
    from rlcw.recipes.quickstart import Gates, _gate

    results = {
        "train_rm": {"metrics": {"eval/accuracy": 0.7, "eval/length_baseline_accuracy": 0.5}},
        "grpo": {"metrics": {"train/steps": 12.0}},
        "export": {"metrics": {"max_logit_diff": 0.0}},
    }
    cfg = load_config(__import__("rlcw.recipes.quickstart", fromlist=["QuickstartConfig"]).QuickstartConfig, None, [])
    assert cfg.gates == Gates()
    _, checks = _gate(cfg, results)
    assert [ok for _, ok, _ in checks] == [False, True, True]
    results["grpo"]["error"] = "stopped by reward-hacking monitor at step 5: rep_intra=0.6 > 0.4 (max_rep_intra)"
    _, checks = _gate(cfg, results)
    assert [ok for _, ok, _ in checks] == [False, True, False] and "rep_intra" in checks[2][2]
