"""GRPO with a learned reward (TRL GRPOTrainer, LoRA): BT reward model + prompt word-range term.

Prompts are chat conversations (`model.system_prompt` as the system message, the story prompt
as the user message) rendered by the policy's chat template (`model.chat_template` overrides
it). The reward model scores `(prompt, completion)` through its own folder's rendering
(`rlcw.rewards.render`), never through TRL's path-string handling. Every `eval.every_steps`
rank 0 samples held-out prompts and runs the evaluators (RM score, length, repetition);
baseline samples come from the starting model at step 0. The final LoRA adapter is saved in
`<run>/checkpoints/final` (loadable by every command's `model.name`).
Not here yet (RL issue): PPO, reward servers, vLLM, monitors with stopping, KL logging.

    rlcw grpo --config configs/grpo/cpu.yaml reward.rm_path=runs/train_rm/model
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rlcw.data.prompts import load_prompts
from rlcw.errors import RlcwError
from rlcw.generation import apply_chat_template_file, chat_messages, generate_stories
from rlcw.models import load_causal_lm, load_tokenizer, save_lora_checkpoint
from rlcw.recipes.common import LoraSection, ModelConfig, lora_config, stage_run, tensorboard_dir
from rlcw.rewards.bt import BTScorer
from rlcw.rewards.length import LengthReward
from rlcw.rl.callbacks import JsonlMetricsCallback
from rlcw.rl.evaluation import LengthEvaluator, RepetitionEvaluator, RMScoreEvaluator
from rlcw.rl.periodic import PeriodicEvalCallback


@dataclass
class PromptDataConfig:
    prompts: str = "bundled"  # "bundled" or a jsonl/csv/parquet file of prompt rows
    train_split: str | None = "train"
    eval_split: str | None = "eval"
    max_train_prompts: int | None = None


@dataclass
class RewardSection:
    rm_path: str = "runs/train_rm/model"
    rm_weight: float = 1.0
    length_weight: float = 1.0  # 0 disables the word-range term
    length_clip: float = 2.0
    rm_batch_size: int = 16


@dataclass
class GRPOTrainSection:
    learning_rate: float = 1e-5
    max_steps: int = 20
    batch_size: int = 8  # completions per step per device (multiple of num_generations)
    num_generations: int = 4
    max_completion_length: int = 96
    temperature: float = 0.9
    top_p: float = 1.0
    beta: float = 0.0
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    logging_steps: int = 1
    save_steps: int = 0  # 0 = only the final adapter
    resume: bool = False


@dataclass
class EvalSection:
    every_steps: int = 10  # 0 disables periodic evaluation
    num_prompts: int = 8
    max_new_tokens: int = 96
    temperature: float = 0.8
    batch_size: int = 8


@dataclass
class GRPORecipeConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: PromptDataConfig = field(default_factory=PromptDataConfig)
    reward: RewardSection = field(default_factory=RewardSection)
    lora: LoraSection = field(default_factory=LoraSection)
    train: GRPOTrainSection = field(default_factory=GRPOTrainSection)
    eval: EvalSection = field(default_factory=EvalSection)
    output_dir: str = "runs"
    run_name: str = "grpo"
    seed: int = 0


def build_dataset(rows: list[dict], system_prompt: str):
    from datasets import Dataset

    return Dataset.from_list([
        {"prompt": chat_messages(system_prompt, r["prompt"]), "min_words": r["min_words"], "max_words": r["max_words"],
         "prompt_id": r["id"], "source": r["source"]}
        for r in rows
    ])


def build_rewards(cfg: GRPORecipeConfig) -> tuple[list, list[float], BTScorer]:
    scorer = BTScorer(cfg.reward.rm_path, batch_size=cfg.reward.rm_batch_size)
    funcs, weights = [scorer], [cfg.reward.rm_weight]
    if cfg.reward.length_weight:
        funcs.append(LengthReward(cfg.reward.length_clip))
        weights.append(cfg.reward.length_weight)
    return funcs, weights, scorer


def build_args(cfg: GRPORecipeConfig, run):
    from trl import GRPOConfig

    t = cfg.train
    if t.batch_size % t.num_generations:
        raise RlcwError(f"train.batch_size={t.batch_size} must be a multiple of train.num_generations={t.num_generations}")
    return GRPOConfig(
        output_dir=str(run.checkpoints), max_steps=t.max_steps, learning_rate=t.learning_rate,
        per_device_train_batch_size=t.batch_size, num_generations=t.num_generations,
        max_completion_length=t.max_completion_length, temperature=t.temperature, top_p=t.top_p, beta=t.beta,
        loss_type=t.loss_type, scale_rewards=t.scale_rewards, logging_steps=t.logging_steps,
        save_strategy="steps" if t.save_steps else "no", save_steps=t.save_steps or 500,
        bf16=False, gradient_checkpointing=False, use_cpu=not torch.cuda.is_available(), report_to=["tensorboard"],
        seed=cfg.seed, disable_tqdm=False, log_completions=False, remove_unused_columns=False,
    )


def build_sampler(cfg: GRPORecipeConfig, tokenizer, eval_rows: list[dict]):
    e = cfg.eval

    def sample(model, step: int) -> list[dict]:
        return generate_stories(
            model, tokenizer, eval_rows, system_prompt=cfg.model.system_prompt, system_name=f"{cfg.run_name}@{step}",
            max_new_tokens=e.max_new_tokens, temperature=e.temperature, batch_size=e.batch_size, seed=cfg.seed, step=step,
            show_progress=False,
        )

    return sample


def main(cfg: GRPORecipeConfig) -> dict:
    from trl import GRPOTrainer

    with stage_run(cfg, "grpo") as run:
        train_rows = load_prompts(cfg.data.prompts, cfg.data.train_split)[: cfg.data.max_train_prompts or None]
        eval_rows = load_prompts(cfg.data.prompts, cfg.data.eval_split)[: cfg.eval.num_prompts]
        tokenizer = load_tokenizer(cfg.model.name, padding_side="left")
        apply_chat_template_file(tokenizer, cfg.model.chat_template)
        model = load_causal_lm(cfg.model.name, cfg.model.dtype)
        funcs, weights, scorer = build_rewards(cfg)
        args = build_args(cfg, run)
        args.reward_weights = weights
        tensorboard_dir(run)
        periodic = PeriodicEvalCallback(
            run, build_sampler(cfg, tokenizer, eval_rows), [RMScoreEvaluator(scorer), LengthEvaluator(), RepetitionEvaluator()],
            cfg.eval.every_steps,
        )
        trainer = GRPOTrainer(
            model=model, reward_funcs=funcs, args=args, train_dataset=build_dataset(train_rows, cfg.model.system_prompt),
            processing_class=tokenizer, peft_config=lora_config(cfg.lora, "CAUSAL_LM", model.config.num_hidden_layers) if cfg.lora.enabled else None,
            callbacks=[JsonlMetricsCallback(run), periodic],
        )
        trainer.train(resume_from_checkpoint=True if cfg.train.resume else None)
        final = run.checkpoints / "final"
        if cfg.lora.enabled:
            save_lora_checkpoint(trainer.model, tokenizer, final, cfg.model.name)
        else:
            trainer.model.save_pretrained(final)
            tokenizer.save_pretrained(final)
        metrics = {"train/steps": float(trainer.state.global_step)}
        if periodic.history:
            metrics.update({k: v for k, v in periodic.history[-1].items() if k != "step"})
        summary = run.write_summary("completed", metrics, {"policy": final, "samples": run.samples, "metrics": run.path / "metrics.jsonl"})
        run.write_report(_report(cfg, metrics, periodic.history))
        return summary


def _report(cfg: GRPORecipeConfig, metrics: dict, history: list[dict]) -> str:
    lines = [f"# GRPO run `{cfg.run_name}`", "", f"- policy start: `{cfg.model.name}`", f"- reward model: `{cfg.reward.rm_path}` (weight {cfg.reward.rm_weight}), length weight {cfg.reward.length_weight}", ""]
    if history:
        keys = [k for k in history[0] if k != "step"]
        lines += ["| step | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
        lines += ["| " + " | ".join([str(h["step"])] + [f"{h.get(k, float('nan')):.3f}" for k in keys]) + " |" for h in history]
    return "\n".join(lines) + "\n"
