"""Train a reward model on preference pairs.

`rm.type=bt`: a Bradley-Terry scalar RM (TRL RewardTrainer, LoRA or full). The text is
rendered and truncated by `rlcw.rewards.render.encode_for_rm` (never dropped for length)
and fed to TRL pre-tokenized, so training and scoring see the same layout. The result is a
merged sequence-classification model with its tokenizer and `rlcw_rm.json` in `<run>/model`.
Not here yet: `rm.type=genrm` (issue 3).

    rlcw train-rm --config configs/train_rm/cpu.yaml data.train_file=runs/pairs/pairs/train.jsonl
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rlcw.data.preferences import load_preferences
from rlcw.errors import RlcwError
from rlcw.metrics.pairwise import length_baseline_accuracy, pairwise_accuracy
from rlcw.models import load_tokenizer, resolve
from rlcw.recipes.common import LoraSection, ModelConfig, lora_config, stage_run, tensorboard_dir
from rlcw.rewards.bt import BTScorer
from rlcw.rewards.render import RMSpec, encode_for_rm, save_spec
from rlcw.rl.callbacks import JsonlMetricsCallback


@dataclass
class RMDataConfig:
    train_file: str = "runs/build_pairs/pairs/train.jsonl"  # local file or hub id
    eval_file: str | None = "runs/build_pairs/pairs/eval.jsonl"
    split: str = "train"  # hub split for train_file
    columns: dict[str, str] = field(default_factory=lambda: {"prompt": "prompt", "chosen": "chosen", "rejected": "rejected"})
    max_train_pairs: int | None = None
    max_eval_pairs: int | None = None


@dataclass
class RMSection:
    type: str = "bt"
    input_template: str = "chat"
    include_prompt: bool = True
    system_prompt: str | None = None
    max_length: int = 512
    truncation_side: str = "left"
    center_rewards_coefficient: float | None = None


@dataclass
class RMTrainSection:
    learning_rate: float = 3e-4
    batch_size: int = 8
    grad_accum: int = 1
    max_steps: int = 60
    warmup_ratio: float = 0.05
    weight_decay: float = 0.0
    logging_steps: int = 5
    eval_steps: int = 20  # 0 = evaluate only at the end
    eval_batch_size: int = 16
    save_steps: int = 0  # 0 = no intermediate checkpoints
    resume: bool = False  # resume from the last checkpoint in <run>/checkpoints


@dataclass
class TrainRMConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: RMDataConfig = field(default_factory=RMDataConfig)
    rm: RMSection = field(default_factory=RMSection)
    lora: LoraSection = field(default_factory=LoraSection)
    train: RMTrainSection = field(default_factory=RMTrainSection)
    output_dir: str = "runs"
    run_name: str = "train_rm"
    seed: int = 0


def build_spec(cfg: TrainRMConfig, tokenizer) -> RMSpec:
    rm = cfg.rm
    return RMSpec(
        type=rm.type, base_model=cfg.model.name, input_template=rm.input_template, include_prompt=rm.include_prompt,
        system_prompt=rm.system_prompt, max_length=rm.max_length, truncation_side=rm.truncation_side,
        pad_token=tokenizer.pad_token,
    ).check()


def build_dataset(pairs: list[dict], spec: RMSpec, tokenizer):
    from datasets import Dataset

    prompts = [p["prompt"] for p in pairs]
    chosen = encode_for_rm(spec, tokenizer, prompts, [p["chosen"] for p in pairs])
    rejected = encode_for_rm(spec, tokenizer, prompts, [p["rejected"] for p in pairs])
    return Dataset.from_dict({"chosen_ids": chosen, "rejected_ids": rejected})


def build_model(cfg: TrainRMConfig, tokenizer):
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(resolve(cfg.model.name), num_labels=1, dtype=torch.float32)
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(len(tokenizer))
    model.config.pad_token_id = tokenizer.pad_token_id
    return model


def build_peft_config(lora: LoraSection, num_layers: int):
    if not lora.enabled:
        return None
    from peft import TaskType

    return lora_config(lora, TaskType.SEQ_CLS, num_layers)


def build_args(cfg: TrainRMConfig, run, has_eval: bool):
    from trl import RewardConfig

    t = cfg.train
    return RewardConfig(
        output_dir=str(run.checkpoints), max_steps=t.max_steps, per_device_train_batch_size=t.batch_size,
        per_device_eval_batch_size=t.eval_batch_size, gradient_accumulation_steps=t.grad_accum,
        learning_rate=t.learning_rate, warmup_steps=t.warmup_ratio, weight_decay=t.weight_decay,
        logging_steps=t.logging_steps, eval_strategy="steps" if has_eval and t.eval_steps else "no",
        eval_steps=t.eval_steps or None, save_strategy="steps" if t.save_steps else "no", save_steps=t.save_steps or 500,
        bf16=False, gradient_checkpointing=False, use_cpu=not torch.cuda.is_available(), max_length=None,
        center_rewards_coefficient=cfg.rm.center_rewards_coefficient, report_to=["tensorboard"], seed=cfg.seed,
        disable_tqdm=False, save_only_model=False,
    )


def evaluate_rm(scorer: BTScorer, pairs: list[dict]) -> dict[str, float]:
    prompts = [p["prompt"] for p in pairs]
    chosen = scorer.score(prompts, [p["chosen"] for p in pairs])
    rejected = scorer.score(prompts, [p["rejected"] for p in pairs])
    return {
        "eval/accuracy": pairwise_accuracy(chosen, rejected),
        "eval/length_baseline_accuracy": length_baseline_accuracy(pairs),
        "eval/mean_margin": sum(c - r for c, r in zip(chosen, rejected)) / len(pairs),
        "eval/pairs": float(len(pairs)),
    }


def main(cfg: TrainRMConfig) -> dict:
    if cfg.rm.type != "bt":
        raise RlcwError(f"rm.type={cfg.rm.type} is not built yet", hint="use rm.type=bt (genrm arrives with the reward-model issue)")
    from trl import RewardTrainer

    with stage_run(cfg, "train-rm") as run:
        train_pairs = load_preferences(cfg.data.train_file, cfg.data.split, cfg.data.columns, cfg.data.max_train_pairs)
        eval_pairs = load_preferences(cfg.data.eval_file, "test", cfg.data.columns, cfg.data.max_eval_pairs) if cfg.data.eval_file else []
        tokenizer = load_tokenizer(cfg.model.name, for_reward_model=True, padding_side="right")
        spec = build_spec(cfg, tokenizer)
        model = build_model(cfg, tokenizer)
        tensorboard_dir(run)
        trainer = RewardTrainer(
            model=model, args=build_args(cfg, run, bool(eval_pairs)), processing_class=tokenizer,
            train_dataset=build_dataset(train_pairs, spec, tokenizer),
            eval_dataset=build_dataset(eval_pairs, spec, tokenizer) if eval_pairs else None,
            peft_config=build_peft_config(cfg.lora, model.config.num_hidden_layers), callbacks=[JsonlMetricsCallback(run)],
        )
        if eval_pairs and cfg.train.eval_steps:
            trainer.evaluate()  # step-0 accuracy for the curve (logged by the trainer)
        trainer.train(resume_from_checkpoint=True if cfg.train.resume else None)
        model_dir = save_rm(trainer.model, tokenizer, spec, run.path / "model")
        metrics = {"train/steps": float(trainer.state.global_step), "train/pairs": float(len(train_pairs))}
        if eval_pairs:
            metrics.update(evaluate_rm(BTScorer(model_dir), eval_pairs))
            run.log(trainer.state.global_step, metrics)
        summary = run.write_summary("completed", metrics, {"model": model_dir, "metrics": run.path / "metrics.jsonl"})
        run.write_report(_report(cfg, metrics, model_dir))
        return summary


def save_rm(model, tokenizer, spec: RMSpec, path):
    """Merge LoRA (if any) and save model + tokenizer + rlcw_rm.json."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    save_spec(spec, path)
    return path


def _report(cfg: TrainRMConfig, metrics: dict, model_dir) -> str:
    lines = [f"# Reward model ({cfg.rm.type})", "", f"- base: `{cfg.model.name}`", f"- model: `{model_dir}`", ""]
    lines += ["| metric | value |", "|---|---|"] + [f"| {k} | {v:.4g} |" for k, v in metrics.items()]
    return "\n".join(lines) + "\n"
