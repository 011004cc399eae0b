"""RLOO with learned rewards (TRL RLOOTrainer; LoRA or full), monitors, evaluation, resume.

Reads config -> validate (before the run folder is written or anything loads) -> build (prompts mixed from
`data.sources`, checked against held-out and RM data; rewards from `reward.specs`, rlcw.rewards.factory, by
type or by import path; evaluators, monitors, the learning probe; the policy) -> train (rlcw.rl.rloo.trainer:
TRL's RLOOTrainer plus KL to the start even at beta = 0, monitor statistics, per-source reward and length, the
prompt order, top/bottom stories) -> save (`checkpoints/final`, report and plots). Build, train and save are the
skeleton rloo shares with grpo (rlcw.recipes.common.trl_stage), so the checks before the run folder, the shared
`train.*` keys and the run folder's outputs are grpo's. The sections and keys are grpo's (`rlcw grpo`) but for its
rollout keys, plus the RLOO-specific ones: `train.beta` is a KL penalty in the reward (TRL's RLOO, sequence-level,
default 0.05), `train.normalize_advantages`, `train.reward_clip_range`.

The advantage is RLOO's leave-one-out baseline: a completion's reward minus the mean reward of the other
completions of its prompt (Ahmadian et al. 2024), so `train.num_generations` >= 2. Not here, and why:
the fast rollout with its importance-sampling correction and Agents' Room rollouts (TRL's RLOOTrainer has
no `rollout_func` seam, and its loss reads sequence log-prob sums, not the per-token sampler log-probs the
correction reweights): use `rlcw grpo` for those. Keys: `rlcw rloo --help`.

    rlcw rloo --config configs/rloo/cpu.yaml reward.rm_path=runs/train_rm/model
    rlcw rloo --config configs/rloo/cpu.yaml train.resume=auto      # after a crash or kill
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from rlcw.config import at_least
from rlcw.errors import RlcwError
from rlcw.measure.probe import ProbeSection
from rlcw.recipes.common.checks import check_tail_average, validate_rl_sections, validate_train_keys
from rlcw.recipes.common.prompts import eval_sampler, held_out_prompts
from rlcw.recipes.common.prompts import train_prompts as mixed_train_prompts
from rlcw.recipes.common.sections import (
    RL_MOVED_KEYS,
    EvalSection,
    MonitorSection,
    RLRecipeSections,
)
from rlcw.recipes.common.trl_stage import TRLStage, TRLTrainSection, run_stage, trl_args
from rlcw.rl.grpo.seam import TRL_KINDS, RolloutSection, check_rollout, vllm_args
from rlcw.runs import resume_mode


@dataclass
class RLOOTrainSection(TRLTrainSection):
    """`train.*`: the keys rloo and grpo share (rlcw.recipes.common.trl_stage.TRLTrainSection) and RLOO's own."""

    # completions per prompt (the RLOO group size)
    num_generations: int = at_least(2, 4, "the leave-one-out baseline needs another completion of the prompt")
    normalize_advantages: bool = False  # scale advantages to mean 0, std 1 per generation batch
    reward_clip_range: list[float] | None = None  # [min, max] of the total reward; None = no clipping


@dataclass
class RLOORecipeConfig(RLRecipeSections):
    train: RLOOTrainSection = field(default_factory=RLOOTrainSection)
    rollout: RolloutSection = field(default_factory=RolloutSection)  # how the training completions are written
    eval: EvalSection = field(default_factory=EvalSection)
    monitor: MonitorSection = field(default_factory=MonitorSection)
    probe: ProbeSection = field(default_factory=ProbeSection)  # rlcw.measure.probe: log-prob change on held-out texts
    run_name: str = "rloo"  # name of the run folder under output_dir
    MOVED_KEYS: ClassVar[dict[str, str]] = RL_MOVED_KEYS  # old keys a config fails on, with their new place


# ---------------------------------------------------------------- validate: every config check, before anything loads


def validate(cfg: RLOORecipeConfig) -> None:
    t = cfg.train
    if t.num_generations < 2:
        raise RlcwError(
            f"train.num_generations={t.num_generations}: the leave-one-out baseline needs at least 2",
            where="train.num_generations",
            hint="train.num_generations=4",
        )
    if t.batch_size % t.num_generations:
        raise RlcwError(
            f"train.batch_size={t.batch_size} must be a multiple of train.num_generations={t.num_generations}",
            where="train.batch_size",
            hint="RLOO scores each prompt's group of num_generations completions inside one batch",
        )
    if t.reward_clip_range is not None and (
        len(t.reward_clip_range) != 2 or t.reward_clip_range[0] >= t.reward_clip_range[1]
    ):
        raise RlcwError(
            f"train.reward_clip_range={list(t.reward_clip_range)} is not [min, max] with min < max",
            where="train.reward_clip_range",
            hint="e.g. train.reward_clip_range=[-5,5], or null for no clipping",
        )
    resume_mode(t.resume)
    check_rollout(cfg.rollout, TRL_KINDS)
    validate_rl_sections(cfg.data, cfg.monitor, cfg.eval.evaluators)
    validate_train_keys(t.report_to, t.bf16, (t.adam_beta1, t.adam_beta2))
    check_tail_average(t.tail_average, t.max_steps, t.deepspeed)


# ---------------------------------------------------------------- build: TRL args; main


def build_args(cfg: RLOORecipeConfig, run, weights: list[float]):
    from trl import RLOOConfig

    t = cfg.train
    return RLOOConfig(
        **trl_args(t, cfg.seed, str(run.checkpoints), "rloo"),  # the keys grpo sets alike (common.trl_stage)
        max_completion_length=t.max_completion_length,
        normalize_advantages=t.normalize_advantages,
        reward_clip_range=tuple(t.reward_clip_range) if t.reward_clip_range is not None else None,
        reward_weights=weights,
        **vllm_args(cfg.rollout),
    )


def rloo_trainer() -> type:
    from rlcw.rl.rloo.trainer import RlcwRLOOTrainer

    return RlcwRLOOTrainer


def main(cfg: RLOORecipeConfig) -> dict:
    """validate -> the shared skeleton (rlcw.recipes.common.trl_stage.run_stage) with TRL's RLOO generation."""
    validate(cfg)
    t, e = cfg.train, cfg.eval
    stage = TRLStage(
        command="rloo",
        title="RLOO",
        trainer=rloo_trainer,
        args=lambda run, weights: build_args(cfg, run, weights),
        prompts=lambda: (
            mixed_train_prompts(cfg.data, t.max_completion_length, cfg.seed),
            held_out_prompts(cfg.data, e, e.max_new_tokens),
        ),
        eval_sampler=lambda tokenizer, rows: eval_sampler(
            e, tokenizer, rows, system_prompt=cfg.model.system_prompt, run_name=cfg.run_name, seed=cfg.seed
        ),
        max_tokens=t.max_completion_length,
        start_copy=True,  # TRL's RLOO returns no per-token reference log-probs, whatever beta
        loss_line="rloo (leave-one-out baseline, sequence-level clipped ratio)",
        scale_line=f"normalize_advantages={t.normalize_advantages}",
    )
    return run_stage(cfg, stage)
