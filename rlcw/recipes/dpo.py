"""Offline DPO on preference pairs (TRL DPOTrainer; LoRA or full fine-tuning).

What it does: trains the policy directly on preference records (`prompt`, `chosen`, `rejected`;
by default the proxy RM's corruption pairs from `rlcw build-pairs`) with the DPO loss, the
baseline "offline DPO on the proxy's preference pairs" of the outcome study. Prompts become chat
conversations (`model.system_prompt` + the user prompt, as in `rlcw grpo`) and both stories are
assistant turns, so TRL renders them with the model's chat template. With LoRA the reference
model is the same network with the adapter disabled (TRL, no second copy); with
`lora.enabled=false` a frozen copy of the starting model is loaded as the reference. Logged per
step: TRL's DPO metrics (`loss`, `rewards/chosen|rejected|accuracies|margins`, `logps/*`,
`logits/*`); with `data.eval_file`, the same on held-out pairs (`eval_*`) every
`eval.every_steps`; every `eval.every_steps` held-out prompts are sampled and scored by the
evaluators (`eval.evaluators`: the proxy RM at `eval.evaluators.rm.rm_path`, length, repetition,
judge, ...), as in grpo; held-out prompts are `eval.prompts` (default: the bundled ones) at
`eval.split`. Every config check runs in `validate` before the run folder is written. Checkpoints `checkpoints/checkpoint-N` every `train.save_steps` (a PEFT adapter that
`load_causal_lm` loads), the final adapter in `checkpoints/final`; `train.resume=true` continues
from the newest complete checkpoint (an error when there is none), `auto` when there is one. What it does not do: sample new pairs from the policy
(online/iterative DPO) or score pairs with an RM: the labels are the file's. Trackers:
`train.report_to` (tensorboard | wandb | trackio | none; default [tensorboard] into `<run>/tensorboard/`)
gets TRL's metrics and the `eval/...` rows through rlcw.tracking (checked for secrets; TRL's own
`report_to` is "none"). Precision: `train.bf16` (default false = fp32) is TRL's bf16 mixed-precision flag
(a GPU without bf16 is an error, a CPU a warning); weights load as `model.dtype`.

    rlcw dpo --config configs/dpo/cpu.yaml data.train_file=runs/build_pairs/pairs/train.jsonl
    rlcw dpo --config configs/dpo/cpu.yaml train.resume=true      # after a crash or kill
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from rlcw.config import at_least
from rlcw.data.preferences import load_preferences
from rlcw.errors import RlcwError
from rlcw.generation import apply_chat_template_file, chat_messages
from rlcw.logs import quiet_progress
from rlcw.measure.callbacks import JsonlMetricsCallback
from rlcw.measure.evaluation import build_evaluators
from rlcw.measure.periodic import PeriodicEvalCallback
from rlcw.models import load_causal_lm, load_tokenizer, save_lora_checkpoint
from rlcw.recipes.common.checks import check_bf16, validate_rl_sections, validate_train_keys
from rlcw.recipes.common.models import lora_config
from rlcw.recipes.common.prompts import eval_prompt_rows, eval_sampler
from rlcw.recipes.common.run import stage_run, stage_tracker, trainer_basics
from rlcw.recipes.common.sections import EvalSection, LoraSection, ModelConfig, RunKeys
from rlcw.runs import done_line, resume_checkpoint, resume_mode


@dataclass
class DPODataConfig:
    train_file: str = "runs/build_pairs/pairs/train.jsonl"  # preference records (local file or hub id)
    eval_file: str | None = None  # held-out pairs: DPO loss and reward accuracy every eval.every_steps
    max_pairs: int | None = None  # first N training pairs (None = all)
    max_eval_pairs: int | None = 64  # first N held-out pairs (None = all)


@dataclass
class DPOTrainSection:
    learning_rate: float = at_least(0, 1e-4)  # peak AdamW learning rate
    beta: float = 0.1  # DPO temperature: higher stays closer to the reference
    loss_type: str = "sigmoid"  # TRL loss_type: sigmoid, ipo, hinge, robust, ... (comma-separated combines)
    max_steps: int = at_least(1, 30)  # optimizer steps of the run
    batch_size: int = 8  # pairs per step per device
    gradient_accumulation_steps: int = 1  # batches accumulated per optimizer step
    max_length: int | None = 320  # prompt + story tokens; longer pairs are cut at the end (TRL keep_start)
    logging_steps: int = 1  # log metrics every N steps
    save_steps: int = 10  # 0 = only the final adapter (then a killed run cannot resume)
    save_total_limit: int | None = None  # None = keep every checkpoint (the study evaluates each)
    resume: str = "false"  # false | true (the last complete checkpoint; error if none) | auto (it if any)
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])  # tensorboard | wandb | trackio | none
    bf16: bool = False  # TRL bf16 mixed precision (GPU); weights load as model.dtype


def dpo_eval_section() -> EvalSection:
    """DPO has no reward: the `rm` evaluator names its RM (the proxy) in its own options."""
    evaluators = {"rm": {"rm_path": "runs/train_rm/model"}, "length": {}, "repetition": {}}
    return EvalSection(evaluators=evaluators)


@dataclass
class DPORecipeConfig(RunKeys):
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DPODataConfig = field(default_factory=DPODataConfig)
    lora: LoraSection = field(default_factory=LoraSection)
    train: DPOTrainSection = field(default_factory=DPOTrainSection)
    eval: EvalSection = field(default_factory=dpo_eval_section)  # eval.prompts None = the bundled prompts
    run_name: str = "dpo"  # name of the run folder under output_dir


# ---------------------------------------------------------------- data


def conversational_pairs(pairs: list[dict], system_prompt: str | None) -> list[dict]:
    """Preference records in TRL's conversational layout: prompt messages, one assistant turn each."""
    return [
        {
            "prompt": chat_messages(system_prompt, p["prompt"]),
            "chosen": [{"role": "assistant", "content": p["chosen"]}],
            "rejected": [{"role": "assistant", "content": p["rejected"]}],
        }
        for p in pairs
    ]


def build_dataset(pairs: list[dict], system_prompt: str | None):
    from datasets import Dataset

    return Dataset.from_list(conversational_pairs(pairs, system_prompt))


# ---------------------------------------------------------------- args, models


def validate(cfg: DPORecipeConfig) -> None:
    """Every check of the config that needs no model or data: run before the run folder is written."""
    t = cfg.train
    for key in ("max_steps", "batch_size", "gradient_accumulation_steps", "logging_steps"):
        if getattr(t, key) < 1:
            raise RlcwError(f"train.{key} must be at least 1, got {getattr(t, key)}", where=f"train.{key}")
    if t.save_steps < 0:
        raise RlcwError(
            f"train.save_steps must be >= 0, got {t.save_steps}",
            where="train.save_steps",
            hint="0 = only the final adapter",
        )
    if t.beta <= 0:
        raise RlcwError(
            f"train.beta must be positive, got {t.beta}", where="train.beta", hint="DPO's usual range is 0.05-0.5"
        )
    resume_mode(t.resume)
    validate_rl_sections(None, None, cfg.eval.evaluators if cfg.eval.every_steps else {})
    validate_train_keys(t.report_to, t.bf16)


def build_args(cfg: DPORecipeConfig, run, has_eval_pairs: bool):
    from trl import DPOConfig

    t = cfg.train
    evaluate = has_eval_pairs and cfg.eval.every_steps > 0
    return DPOConfig(
        output_dir=str(run.checkpoints),
        max_steps=t.max_steps,
        learning_rate=t.learning_rate,
        beta=t.beta,
        loss_type=[x.strip() for x in t.loss_type.split(",")],
        max_length=t.max_length,
        per_device_train_batch_size=t.batch_size,
        per_device_eval_batch_size=t.batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        eval_strategy="steps" if evaluate else "no",
        eval_steps=cfg.eval.every_steps if evaluate else None,
        **trainer_basics(t, cfg.seed),  # logging, saving, precision, seeds, CPU (shared with grpo, rloo)
    )


def load_models(cfg: DPORecipeConfig):
    """(policy, reference): with LoRA the reference is None (TRL disables the adapter instead)."""
    policy = load_causal_lm(cfg.model.name, cfg.model.dtype, merge_lora=True)  # an rlcw LoRA checkpoint starts merged
    if cfg.lora.enabled:
        return policy, None
    ref = load_causal_lm(cfg.model.name, cfg.model.dtype, merge_lora=True).eval()
    ref.requires_grad_(False)
    return policy, ref


# ---------------------------------------------------------------- main


def main(cfg: DPORecipeConfig) -> dict:
    validate(cfg)
    check_bf16(cfg.train.bf16)
    train_pairs = load_preferences(cfg.data.train_file, limit=cfg.data.max_pairs)  # files only: before the run folder
    eval_pairs = (
        load_preferences(cfg.data.eval_file, "test", limit=cfg.data.max_eval_pairs) if cfg.data.eval_file else []
    )
    eval_rows = eval_prompt_rows(cfg.eval, "bundled")[: cfg.eval.num_prompts] if cfg.eval.every_steps else []
    with stage_run(cfg, "dpo") as run, closing(stage_tracker(cfg, run, cfg.train.report_to)) as tracker:
        checkpoint = resume_checkpoint(cfg.train.resume, run.checkpoints)
        tokenizer = load_tokenizer(cfg.model.name, padding_side="left")
        apply_chat_template_file(tokenizer, cfg.model.chat_template)
        evaluators = build_evaluators(
            cfg.eval.evaluators if cfg.eval.every_steps else {},
            {"rm_path": None, "run_dir": run.path, "seed": cfg.seed},
        )
        model, ref = load_models(cfg)
        args = build_args(cfg, run, bool(eval_pairs))
        sampler = eval_sampler(
            cfg.eval, tokenizer, eval_rows, system_prompt=cfg.model.system_prompt, run_name=cfg.run_name, seed=cfg.seed
        )
        periodic = PeriodicEvalCallback(run, sampler, evaluators, cfg.eval.every_steps, tracker)
        from trl import DPOTrainer

        trainer = DPOTrainer(
            model=model,
            ref_model=ref,
            args=args,
            processing_class=tokenizer,
            train_dataset=build_dataset(train_pairs, cfg.model.system_prompt),
            eval_dataset=build_dataset(eval_pairs, cfg.model.system_prompt) if eval_pairs else None,
            peft_config=lora_config(cfg.lora, "CAUSAL_LM", model.config.num_hidden_layers)
            if cfg.lora.enabled
            else None,
            callbacks=[JsonlMetricsCallback(run, tracker), periodic],
        )
        quiet_progress(trainer, "dpo")  # headline numbers per step; every key goes to metrics.jsonl
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        pair_eval = final_pair_eval(trainer) if eval_pairs else {}
        final = run.checkpoints / "final"
        if not trainer.accelerator.is_main_process:
            return run.write_summary("completed", {"train/steps": float(trainer.state.global_step)})
        if cfg.lora.enabled:
            save_lora_checkpoint(trainer.model, tokenizer, final, cfg.model.name)
        else:
            trainer.model.save_pretrained(final)
            tokenizer.save_pretrained(final)
        metrics = summary_metrics(run, trainer.state.global_step, pair_eval, len(train_pairs))
        if periodic.history:
            metrics.update({k: v for k, v in periodic.history[-1].items() if k != "step"})
        plot = _plot(run)
        run.write_report(
            _report(cfg, metrics, periodic.history, plot), done_line(metrics, {"steps": "train/steps"}, more=4)
        )
        return run.write_summary(
            "completed",
            metrics,
            {"policy": final, "samples": run.samples, "metrics": run.path / "metrics.jsonl", plot.stem: plot},
        )


def final_pair_eval(trainer) -> dict[str, float]:
    """Held-out pair metrics at the last step: the periodic evaluation's when it ran there, else one more pass."""
    step = trainer.state.global_step
    done = [h for h in trainer.state.log_history if "eval_loss" in h and h.get("step") == step]
    return done[-1] if done else trainer.evaluate()


def summary_metrics(run, steps: int, pair_eval: dict, n_pairs: int) -> dict[str, float]:
    """Final training loss / reward accuracy / margin (last logged step) and the held-out pair metrics."""
    from rlcw.report import read_metrics

    rows = [r for r in read_metrics(run.path / "metrics.jsonl") if "rewards/accuracies" in r]
    last = rows[-1] if rows else {}
    out = {"train/steps": float(steps), "train/pairs": float(n_pairs)}
    names = {"loss": "loss", "rewards/accuracies": "reward_accuracy", "rewards/margins": "reward_margin"}
    out.update({f"train/{name}": float(last[key]) for key, name in names.items() if key in last})
    evals = {f"eval_{key}": name for key, name in names.items()}  # TRL's names of the held-out pairs' metrics
    out.update({f"eval_pairs/{name}": float(pair_eval[key]) for key, name in evals.items() if key in pair_eval})
    return out


def _plot(run) -> Path:
    from rlcw.report import plot_lines, read_metrics, series

    rows = read_metrics(run.path / "metrics.jsonl")
    return plot_lines(
        [
            ("DPO loss", {"train": series(rows, "loss"), "held-out pairs": series(rows, "eval_loss")}),
            (
                "reward margin (chosen - rejected)",
                {"train": series(rows, "rewards/margins"), "held-out pairs": series(rows, "eval_rewards/margins")},
            ),
            (
                "reward accuracy",
                {
                    "train": series(rows, "rewards/accuracies"),
                    "held-out pairs": series(rows, "eval_rewards/accuracies"),
                },
            ),
        ],
        run.path / "plots" / "dpo.png",
    )


def _report(cfg: DPORecipeConfig, metrics: dict, history: list[dict], plot: Path) -> str:
    from rlcw.report import fmt_value, step_table

    t = cfg.train
    lines = [
        f"# DPO run `{cfg.run_name}`",
        "",
        f"- policy start: `{cfg.model.name}`; pairs: `{cfg.data.train_file}` ({int(metrics['train/pairs'])})",
        f"- steps: {int(metrics['train/steps'])} x {t.batch_size} pairs; beta {t.beta}, loss {t.loss_type}, lr {t.learning_rate}, "
        f"{'LoRA r' + str(cfg.lora.r) if cfg.lora.enabled else 'full fine-tuning'}",
        "",
    ]
    lines += ["| metric | value |", "|---|---|"] + [f"| {k} | {fmt_value(v)} |" for k, v in metrics.items()] + [""]
    lines += ["## Plots", "", f"![{plot.stem}](plots/{plot.name})", ""]
    lines += step_table("Held-out samples", history)
    return "\n".join(lines) + "\n"
