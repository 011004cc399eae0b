"""GRPO with learned rewards (TRL GRPOTrainer; LoRA or full), length-bias control, monitors, evaluation.

Reads config -> validate (every config check, before the run folder is written or anything loads) -> build
(prompts mixed from `data.sources` and checked against held-out and RM data; rewards from `reward.specs`,
rlcw.rewards.factory; evaluators, monitors, the learning probe; the policy) -> train (rlcw.rl.grpo.trainer:
TRL's trainer plus KL to the start even at beta = 0, monitor statistics, per-source reward and length, the
prompt order, top/bottom stories; plain, fast or Agents' Room rollouts from the rollout seam, rlcw.rl.grpo.seam)
-> save (`checkpoints/final`, report and plots, rlcw.rl.grpo.report). Build, train and save are the skeleton grpo
shares with rloo (rlcw.recipes.common.trl_stage); this module holds what is GRPO's own. Evaluation
every `eval.every_steps` samples the held-out prompts on every rank (rlcw.measure.periodic). `train.resume`:
false | true (the newest complete checkpoint; an error when there is none) | auto. Metrics reach
`train.report_to` (tensorboard | wandb | trackio | none) through rlcw.tracking; `train.bf16` is the
mixed-precision flag. Agents' Room rollouts cost several plain GRPO steps each (several model calls a story).
Not here: PPO (`rlcw ppo`). Keys: `rlcw grpo --help`.

    rlcw grpo --config configs/grpo/cpu.yaml reward.rm_path=runs/train_rm/model
    rlcw grpo --config configs/grpo/cpu.yaml train.resume=auto      # after a crash or kill
    rlcw grpo --config configs/grpo/agents_room_cpu.yaml            # Agents' Room rollouts
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from rlcw.agents.variants import AgentCaps
from rlcw.config import at_least, one_of
from rlcw.errors import RlcwError
from rlcw.measure.probe import ProbeSection
from rlcw.recipes.common.checks import check_tail_average, validate_rl_sections, validate_train_keys
from rlcw.recipes.common.prompts import held_out_prompts
from rlcw.recipes.common.prompts import train_prompts as mixed_train_prompts
from rlcw.recipes.common.sections import (
    GRPO_MOVED_KEYS,
    GRPO_REMOVED_KEYS,
    EvalSection,
    MonitorSection,
    RewardSection,
    RLRecipeSections,
)
from rlcw.recipes.common.trl_stage import TRLStage, TRLTrainSection, run_stage, trl_args
from rlcw.rl.grpo.seam import AgentsRoomSettings, GRPORolloutSection, PlainRollout, RolloutSettings, build_rollout
from rlcw.runs import resume_mode


@dataclass
class GRPORewardSection(RewardSection):
    aggregation: str = "sum_then_normalize"  # or normalize_then_sum (TRL multi_objective_aggregation)


@dataclass
class GRPOTrainSection(TRLTrainSection):
    """`train.*`: the keys grpo and rloo share (rlcw.recipes.common.trl_stage.TRLTrainSection) and GRPO's own."""

    # completions per prompt (the GRPO group size)
    num_generations: int = at_least(2, 4, "GRPO compares the completions of one prompt")
    loss_type: str = "dapo"  # TRL loss normalization: grpo | dr_grpo | dapo | bnpo | ...
    scale_rewards: str = "group"  # group | batch | none
    # whose LM head the loss's log-prob forward uses: rlcw's keeps what backward needs instead of recomputing the
    # logits (rlcw.rl.fused_logprobs; equal to TRL's to float rounding); auto = rlcw's on CPU, TRL's elsewhere
    lm_head: str = one_of(("auto", "trl", "rlcw"), "auto")
    # reward specs (by name) that judge where a story stopped, e.g. [length_range, overlong]: their advantage goes to
    # each completion's last token only, the other terms' to every token (rlcw.rl.grpo.ending_credit); [] = off
    ending_credit: list[str] = field(default_factory=list)
    # weight of -log(1 - pi(end | prefix)) summed over completion positions whose text holds fewer words than the
    # prompt's min_words, per completion token: teaches the policy itself not to end short (rlcw's LM head, one
    # process); with rollout.block_short_endings the sampler never ends there either. 0 = off
    early_end_unlikelihood: float = at_least(0, 0.0)
    # with early_end_unlikelihood as its weight: the rate at which the policy should end at each position where
    # ending would leave the story inside the prompt's word range (a KL to Bernoulli(rate) there), so pushing the end
    # down before min_words does not push it down inside the range too. 0 = off
    end_rate_in_range: float = 0.0


@dataclass
class AgentsRLSection:
    variant: str | None = None  # None: plain generation; e2e | plan | write | plan_write: Agents' Room rollouts
    train_agent: str = "climax"  # the agent whose call is the trained sequence; cycle: the variant's writers in turn
    # all: policy = every agent (shared base); train_agent: only that agent uses the LoRA adapter
    policy_plays: str = "all"
    # new-token caps per agent kind (planning, writing, finalizer, e2e)
    caps: AgentCaps = field(default_factory=AgentCaps)
    # prompt + scratchpad + new tokens must fit this (the scratchpad is shortened otherwise)
    context_tokens: int = 2048


@dataclass
class GRPORecipeConfig(RLRecipeSections):
    reward: GRPORewardSection = field(default_factory=GRPORewardSection)
    train: GRPOTrainSection = field(default_factory=GRPOTrainSection)
    rollout: GRPORolloutSection = field(default_factory=GRPORolloutSection)  # how the training stories are written
    eval: EvalSection = field(default_factory=EvalSection)
    monitor: MonitorSection = field(default_factory=MonitorSection)
    agents: AgentsRLSection = field(default_factory=AgentsRLSection)
    probe: ProbeSection = field(default_factory=ProbeSection)  # rlcw.measure.probe: log-prob change on held-out texts
    run_name: str = "grpo"  # name of the run folder under output_dir
    MOVED_KEYS: ClassVar[dict[str, str]] = GRPO_MOVED_KEYS  # old keys a config fails on, with their new place
    REMOVED_KEYS: ClassVar[dict[str, str]] = GRPO_REMOVED_KEYS


# ---------------------------------------------------------------- validate: every config check, before anything loads


def validate(cfg: GRPORecipeConfig) -> PlainRollout:
    """Every check of the config that needs no model, run before the run folder is written (this machine and the
    reward specs are checked by rlcw.recipes.common.trl_stage.run_stage, also before it); returns the run's rollout
    (rlcw.rl.grpo.seam)."""
    t = cfg.train
    if t.batch_size % t.num_generations:
        raise RlcwError(
            f"train.batch_size={t.batch_size} must be a multiple of train.num_generations={t.num_generations}",
            where="train.batch_size",
            hint="GRPO scores each prompt's group of num_generations completions inside one batch",
        )
    resume_mode(t.resume)
    check_ending_credit(cfg)
    if t.early_end_unlikelihood > 0 and (t.lm_head == "trl" or t.deepspeed or cfg.agents.variant):
        raise RlcwError(
            "train.early_end_unlikelihood reads the end's log-probability from rlcw's LM head in one process",
            where="train.early_end_unlikelihood",
            hint="train.lm_head=auto or rlcw, no train.deepspeed and no agents.variant; or early_end_unlikelihood=0",
        )
    if not 0 <= t.end_rate_in_range < 1 or (t.end_rate_in_range > 0 and t.early_end_unlikelihood <= 0):
        raise RlcwError(
            f"train.end_rate_in_range={t.end_rate_in_range} must be in [0, 1) and takes train.early_end_unlikelihood "
            f"(> 0) as its weight",
            where="train.end_rate_in_range",
            hint="e.g. train.early_end_unlikelihood=1.0 train.end_rate_in_range=0.05; 0 turns it off",
        )
    if cfg.rollout.block_short_endings and t.early_end_unlikelihood <= 0:
        raise RlcwError(
            "rollout.block_short_endings alone lets the policy's own probability of ending short grow unchecked "
            "(the sampler never draws it, so no advantage ever lowers it)",
            where="rollout.block_short_endings",
            hint="add train.early_end_unlikelihood (e.g. 1.0), or leave rollout.block_short_endings=false",
        )
    rollout = rollout_seam(cfg)
    validate_rl_sections(cfg.data, cfg.monitor, cfg.eval.evaluators)
    validate_train_keys(t.report_to, t.bf16, (t.adam_beta1, t.adam_beta2))
    check_tail_average(t.tail_average, t.max_steps, t.deepspeed)
    return rollout


def check_ending_credit(cfg: GRPORecipeConfig) -> None:
    """`train.ending_credit` names reward specs, leaves at least one out (the content terms), and goes with TRL's
    sum-then-normalize aggregation and plain rollouts (an Agents' Room story has many calls, not one last token)."""
    names = list(cfg.train.ending_credit)
    if not names:
        return
    specs = list((cfg.reward.specs or {}).keys())
    where = "train.ending_credit"
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise RlcwError(f"{unknown} are not reward specs", where=where, hint=f"the specs: {', '.join(specs)}")
    if set(specs) <= set(names):
        raise RlcwError(
            "every reward spec is an ending term: nothing is left for the content tokens",
            where=where,
            hint="name only the terms that judge where a story stopped (length_range, overlong)",
        )
    if cfg.reward.aggregation != "sum_then_normalize":
        raise RlcwError(
            f"ending credit splits the summed reward; reward.aggregation={cfg.reward.aggregation!r} has no sum",
            where=where,
            hint="use reward.aggregation=sum_then_normalize, or train.ending_credit=[]",
        )
    if cfg.agents.variant:
        raise RlcwError(
            "ending credit needs one completion per story; Agents' Room rewards a story of many calls",
            where=where,
            hint="train.ending_credit=[] with agents.variant",
        )


def rollout_seam(cfg: GRPORecipeConfig) -> PlainRollout:
    """The checked rollout of this config: plain, fast or Agents' Room, with its caps (rlcw.rl.grpo.seam)."""
    t, a = cfg.train, cfg.agents
    settings = RolloutSettings(
        max_completion_length=t.max_completion_length,
        temperature=t.temperature,
        top_p=t.top_p,
        batch_size=t.batch_size,
        seed=cfg.seed,
        system_prompt=cfg.model.system_prompt,
        deepspeed=t.deepspeed,
        lora_enabled=cfg.lora.enabled,
    )
    return build_rollout(
        cfg.rollout, settings, AgentsRoomSettings(a.variant, a.train_agent, a.policy_plays, a.caps, a.context_tokens)
    )


# ---------------------------------------------------------------- prompts


def train_prompts(cfg: GRPORecipeConfig, rollout: PlainRollout) -> list[dict]:
    """The mixed training prompt rows (`source` = the data.sources name), fitted to the rollout's story cap."""
    return mixed_train_prompts(cfg.data, rollout.story_cap, cfg.seed)


def eval_prompts(cfg: GRPORecipeConfig, rollout: PlainRollout) -> list[dict]:
    return held_out_prompts(cfg.data, cfg.eval, rollout.eval_cap(cfg.eval.max_new_tokens))


# ---------------------------------------------------------------- build: TRL args; main


def build_args(cfg: GRPORecipeConfig, run, weights: list[float], rollout: PlainRollout):
    from trl import GRPOConfig

    t = cfg.train
    return GRPOConfig(
        **trl_args(t, cfg.seed, str(run.checkpoints), "grpo"),  # the keys rloo sets alike (common.trl_stage)
        loss_type=t.loss_type,
        scale_rewards=t.scale_rewards,
        reward_weights=weights,
        multi_objective_aggregation=cfg.reward.aggregation,
        **rollout.grpo_args(),  # max_completion_length and TRL's vLLM keys
    )


def grpo_trainer() -> type:
    from rlcw.rl.grpo.trainer import RlcwGRPOTrainer

    return RlcwGRPOTrainer


def main(cfg: GRPORecipeConfig) -> dict:
    """validate -> the shared skeleton (rlcw.recipes.common.trl_stage.run_stage) with GRPO's rollout and trainer."""
    rollout, t = validate(cfg), cfg.train
    stage = TRLStage(
        command="grpo",
        title="GRPO",
        trainer=grpo_trainer,
        args=lambda run, weights: build_args(cfg, run, weights, rollout),
        prompts=lambda: (train_prompts(cfg, rollout), eval_prompts(cfg, rollout)),
        eval_sampler=lambda tokenizer, rows: rollout.eval_sampler(
            tokenizer,
            rows,
            run_name=cfg.run_name,
            max_new_tokens=cfg.eval.max_new_tokens,
            temperature=cfg.eval.temperature,
            batch_size=cfg.eval.batch_size,
        ),
        max_tokens=rollout.completion_cap,
        start_copy=t.beta == 0,  # beta > 0: TRL computes the reference log-probs itself
        loss_line=t.loss_type,
        scale_line=t.scale_rewards,
        rewards=rollout.rewards,  # Agents' Room: the whole story is rewarded
        trainer_kwargs=lambda tokenizer, rows: {
            **rollout.trainer_kwargs(tokenizer, rows),
            "lm_head": t.lm_head,
            "ending_credit": tuple(t.ending_credit),
            "early_end_unlikelihood": t.early_end_unlikelihood,
            "end_rate_in_range": t.end_rate_in_range,
        },
    )
    return run_stage(cfg, stage)
