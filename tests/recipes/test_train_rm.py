"""train-rm (BT, LoRA) on a tiny model: folder contract, scoring, metrics."""

import json
import math
from pathlib import Path

import pytest

from rlcw.errors import RlcwError
from rlcw.rm.render import load_spec
from rlcw.rm.scoring import load_rm


def test_rm_folder_carries_its_contract(rm_run, tiny_model_dir):
    model_dir = Path(rm_run["artifacts"]["model"])
    spec = load_spec(model_dir)
    assert spec.type == "bt" and spec.base_model == str(tiny_model_dir) and spec.max_length == 64
    assert spec.pad_token == "<|endoftext|>"
    scorer = load_rm(model_dir)
    assert scorer.tokenizer.pad_token == "<|endoftext|>" != scorer.tokenizer.eos_token
    scores = scorer.score(
        ["a prompt", "a prompt"], ["A short story. It ends.", "Another one that is longer. It goes on. Then it ends."]
    )
    assert len(scores) == 2 and all(math.isfinite(s) for s in scores) and scores[0] != scores[1]


def test_scores_do_not_depend_on_batching(rm_run):
    scorer = load_rm(rm_run["artifacts"]["model"], batch_size=1)
    stories = ["One. Two.", "A much longer story about a fox who found a key. The end.", "Mid length story here."]
    one = scorer.score(["p"] * 3, stories)
    scorer.batch_size = 3
    assert scorer.score(["p"] * 3, stories) == pytest.approx(one, abs=1e-4)


def test_scoring_in_bf16_runs_the_forward_under_autocast_close_to_fp32(rm_run, capsys):
    """precision=bf16 scores under bf16 autocast (the linears compute in bf16), fp32 does not; the scores agree to a
    few hundredths; a `type: bt` reward spec reaches it and says so; a bad precision is refused."""
    import torch

    from rlcw.cpu_isa import resolve_cpu_precision
    from rlcw.rewards.factory import build_reward

    model_dir = rm_run["artifacts"]["model"]
    stories = ["One. Two.", "A much longer story about a fox who found a key. The end.", "Mid length story here."]
    seen = {}
    for precision in ("fp32", "bf16"):
        scorer = load_rm(model_dir, precision=precision)
        assert (scorer.precision, scorer.precision_why) == (precision, "set in the config")
        layer = next(m for m in scorer.model.modules() if isinstance(m, torch.nn.Linear))
        hook = layer.register_forward_hook(lambda m, a, out, p=precision: seen.setdefault(p, out.dtype) and None)
        seen[precision + " scores"] = scorer.score(["p"] * 3, stories)
        hook.remove()
    assert seen["fp32"] == torch.float32 and seen["bf16"] == torch.bfloat16
    assert seen["bf16 scores"] == pytest.approx(seen["fp32 scores"], abs=0.05)
    assert seen["bf16 scores"] != seen["fp32 scores"]  # it did run in bf16
    assert load_rm(model_dir, precision="auto").precision == resolve_cpu_precision("auto")[0]
    with pytest.raises(ValueError, match="precision must be one of"):
        load_rm(model_dir, precision="fp16")
    reward = build_reward({"type": "bt", "rm_path": model_dir, "precision": "bf16"})
    assert reward.scorer.precision == "bf16"
    assert "scores in bf16 (set in the config)" in capsys.readouterr().out


def test_rm_metrics_and_summary(rm_run):
    run_dir = Path(rm_run["artifacts"]["model"]).parent
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in r for r in rows) and any("eval_accuracy" in r for r in rows)
    # the reported accuracy is the saved model's on the held-out pairs (a range check would only catch NaN)
    from rlcw.data.preferences import load_preferences
    from rlcw.metrics.pairwise import pairwise_accuracy

    pairs = load_preferences(_eval_file(run_dir))[:16]
    scorer = load_rm(rm_run["artifacts"]["model"])
    prompts = [p["prompt"] for p in pairs]
    expected = pairwise_accuracy(
        scorer.score(prompts, [p["chosen"] for p in pairs]), scorer.score(prompts, [p["rejected"] for p in pairs])
    )
    assert rm_run["metrics"]["eval/accuracy"] == pytest.approx(expected, abs=1e-9)
    assert rm_run["metrics"]["train/steps"] == 4
    assert list((run_dir / "tensorboard").rglob("events.out.tfevents*"))


def test_scorer_rejects_a_folder_that_is_not_an_rm(tiny_model_dir):
    with pytest.raises(RlcwError, match="rlcw_rm.json"):
        load_rm(tiny_model_dir)


# --- BT options: margins, truncation, centering, DeepSpeed, resume ---


def _cfg(*overrides):
    from rlcw.config import load_config
    from rlcw.recipes.train_rm import TrainRMConfig

    return load_config(TrainRMConfig, None, list(overrides))


def test_margins_from_meta_and_upvotes():
    from rlcw.rm.train_data import pair_margins, upvote_margin

    pairs = [
        {
            "prompt": "",
            "chosen": "a",
            "rejected": "b",
            "meta": {"margin": 0.5, "chosen_upvotes": 99, "rejected_upvotes": 9},
        }
    ]
    assert pair_margins(pairs, "none", "f.jsonl") is None
    assert pair_margins(pairs, "column", "f.jsonl") == [0.5]
    assert pair_margins(pairs, "upvotes", "f.jsonl", scale=2) == pytest.approx([2 * math.log(10)])
    assert upvote_margin(9, 9) == 0.0
    bad = pairs + [
        {"prompt": "", "chosen": "a", "rejected": "b", "meta": {"chosen_upvotes": "many", "rejected_upvotes": 1}}
    ]
    with pytest.raises(RlcwError, match=r"f.jsonl:2 field 'meta.chosen_upvotes'"):
        pair_margins(bad, "upvotes", "f.jsonl")


def test_long_pairs_are_truncated_not_dropped(tokenizer):
    from rlcw.rm.render import RMSpec
    from rlcw.rm.train_data import build_bt_dataset

    long = " ".join(["word"] * 300)
    pairs = [
        {"prompt": "P", "chosen": long + " end.", "rejected": "short."},
        {"prompt": "P", "chosen": "tiny.", "rejected": long},
    ]
    ds = build_bt_dataset(pairs, RMSpec(max_length=32), tokenizer, margins=[1.0, 0.0])
    assert len(ds) == 2 and max(len(x) for x in list(ds["chosen_ids"]) + list(ds["rejected_ids"])) == 32
    assert list(ds["margin"]) == [1.0, 0.0]


def test_centering_and_deepspeed_reach_the_trainer_args(tmp_path):
    from types import SimpleNamespace

    from rlcw.recipes.train_rm import build_args, common_args

    run = SimpleNamespace(checkpoints=tmp_path)
    args = build_args(_cfg("rm.center_rewards_coefficient=0.05", "train.save_steps=3"), run, has_eval=False)
    assert args.center_rewards_coefficient == 0.05 and args.max_length is None and args.save_steps == 3
    with pytest.raises(RlcwError, match="DeepSpeed config not found"):
        common_args(_cfg("train.deepspeed=configs/deepspeed/nope.json"), run)


def test_bt_resume_continues_from_the_last_checkpoint(runs_root, pairs_run, tiny_model_dir):
    from rlcw.recipes.train_rm import main

    base = [
        f"output_dir={runs_root}",
        "run_name=bt_resume",
        f"model.name={tiny_model_dir}",
        "data.eval_file=null",
        f"data.train_file={pairs_run['artifacts']['train']}",
        "data.max_train_pairs=16",
        "train.batch_size=4",
        "train.logging_steps=1",
        "train.save_steps=2",
        "rm.max_length=48",
        "lora.r=4",
    ]
    main(_cfg(*base, "train.max_steps=2"))
    summary = main(_cfg(*base, "train.max_steps=4", "train.resume=true"))
    run_dir = runs_root / "bt_resume"
    assert summary["metrics"]["train/steps"] == 4
    assert {p.name for p in (run_dir / "checkpoints").iterdir()} >= {"checkpoint-2", "checkpoint-4"}
    loss_steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert loss_steps == [1, 2, 3, 4]  # the second run trained steps 3-4 only


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_cpu_precision_sets_the_step_says_so_and_saves_fp32(
    runs_root, pairs_run, tiny_model_dir, precision, monkeypatch
):
    """train.cpu_precision=bf16: the BT step runs under bf16 autocast with the frozen linears held in bf16
    (rlcw.rm.bt_trainer), fp32 runs neither; both log the path taken, run in length buckets, save fp32 weights."""
    import contextlib
    import io

    import torch
    from safetensors.torch import load_file

    import rlcw.rm.bt_trainer as bt
    from rlcw.recipes.train_rm import main

    seen = []  # (autocast on, weight dtype, output dtype) of a frozen linear, inside the prepared model's forward

    def spy(model, *args, **kwargs):
        layer = next(m for n, m in model.named_modules() if n.endswith("base_layer"))
        hook = layer.register_forward_hook(
            lambda m, a, out: seen.append((torch.is_autocast_enabled("cpu"), m.weight.dtype, out.dtype))
        )
        try:
            return real(model, *args, **kwargs)
        finally:
            hook.remove()

    real = bt.bucketed_logits
    monkeypatch.setattr(bt, "bucketed_logits", spy)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        summary = main(
            _cfg(
                f"output_dir={runs_root}", f"run_name=bt_cpu_{precision}", f"model.name={tiny_model_dir}",
                "data.eval_file=null", f"data.train_file={pairs_run['artifacts']['train']}", "data.max_train_pairs=8",
                "train.batch_size=4", "train.max_steps=2", "rm.max_length=48", "lora.r=4",
                f"train.cpu_precision={precision}",
            )
        )  # fmt: skip
    bf16 = precision == "bf16"
    dtype = torch.bfloat16 if bf16 else torch.float32
    assert len(seen) >= 2 and set(seen) == {(bf16, dtype, dtype)}
    assert (
        f"training step in {precision} on the CPU (set in the config), batches run in length buckets" in out.getvalue()
    )
    weights = load_file(Path(summary["artifacts"]["model"]) / "model.safetensors")
    assert {t.dtype for t in weights.values()} == {torch.float32}


def test_resume_auto_without_checkpoint_starts_at_zero_and_true_is_an_error(tmp_path):
    from rlcw.recipes.train_rm import resume_point

    assert resume_point("auto", tmp_path) is None
    with pytest.raises(RlcwError, match="no complete checkpoint"):
        resume_point("true", tmp_path)
    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "checkpoint-3" / "trainer_state.json").write_text("{}")
    assert resume_point(_cfg("train.resume=true").train.resume, tmp_path) == str(tmp_path / "checkpoint-3")
    assert resume_point("auto", tmp_path) == str(tmp_path / "checkpoint-3")
    assert resume_point(_cfg().train.resume, tmp_path) is None


def _eval_file(run_dir: Path) -> str:
    """data.eval_file from the run's resolved config.yaml."""
    from omegaconf import OmegaConf

    return OmegaConf.load(run_dir / "config.yaml").data.eval_file


def _absurd_lr_args(runs_root, name, pairs_run, tiny_model_dir, lr, steps):
    return [
        f"output_dir={runs_root}",
        f"run_name={name}",
        f"model.name={tiny_model_dir}",
        f"data.train_file={pairs_run['artifacts']['train']}",
        f"data.eval_file={pairs_run['artifacts']['eval']}",
        "data.max_train_pairs=16",
        "data.max_eval_pairs=8",
        f"train.max_steps={steps}",
        "train.batch_size=4",
        "train.logging_steps=1",
        "rm.max_length=48",
        "lora.r=4",
        f"train.learning_rate={lr}",
        "train.cpu_precision=fp32",  # on every CPU: under bf16 autocast lr 1e8 leaves a dead RM, not nan weights
    ]


def test_an_rm_whose_weights_diverged_ends_failed_not_done(runs_root, pairs_run, tiny_model_dir):
    """lr 1e8: the loss is still finite after 3 steps, the weights are not; the run must not read as DONE."""
    from rlcw.errors import RunFailed
    from rlcw.recipes.train_rm import main

    with pytest.raises(RunFailed, match="training diverged: .* weight tensor.* hold nan or inf") as e:
        main(_cfg(*_absurd_lr_args(runs_root, "rm_diverged", pairs_run, tiny_model_dir, "1e8", 3)))
    assert "lower train.learning_rate (now 1e+08)" in str(e.value)
    summary = json.loads((runs_root / "rm_diverged" / "summary.json").read_text())
    assert summary["status"] == "failed" and "weight tensor" in summary["error"]
    assert summary["metrics"]["train/steps"] == 3
    assert not (runs_root / "rm_diverged" / "model").exists()


@pytest.mark.parametrize(
    "mean,std,why",
    [
        (0.0, 0.0, "every held-out story gets the same reward (0)"),
        (-250.0, 1e-5, "every held-out story gets the same reward (-250)"),
        (float("nan"), float("nan"), "not finite"),
        (0.1, 0.02, None),
    ],
)
def test_dead_rm_names_constant_or_non_finite_rewards(mean, std, why):
    from rlcw.rm.pair_eval import dead_rm

    got = dead_rm({"eval/reward_mean": mean, "eval/reward_std": std})
    assert (got is None) if why is None else (why in got)
    assert dead_rm({"eval/accuracy": 0.5}) is None  # no rewards measured: nothing to judge


def test_a_loss_that_becomes_nan_ends_the_run_failed_with_exit_1(runs_root, pairs_run, tiny_model_dir, capsys):
    from rlcw import cli

    args = _absurd_lr_args(runs_root, "rm_nan", pairs_run, tiny_model_dir, "1e30", 6)
    with pytest.raises(SystemExit) as e:
        cli.main(["train-rm", *args])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert "rlcw: failed: " in err and "training diverged: loss became nan at step 3" in err
    summary = json.loads((runs_root / "rm_nan" / "summary.json").read_text())
    assert summary["status"] == "failed" and "loss became nan" in summary["error"]
