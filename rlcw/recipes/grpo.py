"""GRPO with learned rewards (TRL GRPOTrainer; LoRA or full), length-bias control, monitors, evaluation.

Reads config -> validate (every config check, before the run folder is written or anything loads) -> build
(prompts mixed from `data.sources` and checked against held-out and RM data; rewards from `reward.specs`,
rlcw.rewards.factory; evaluators, monitors, the learning probe; the policy) -> train (rlcw.rl.grpo.trainer:
TRL's trainer plus KL to the start even at beta = 0, monitor statistics, per-source reward and length, the
prompt order, top/bottom stories; plain, fast or Agents' Room rollouts from the rollout seam, rlcw.rl.grpo.seam)
-> save (`checkpoints/final`, report and plots, rlcw.rl.grpo.report). Evaluation
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

from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rlcw.agents.variants import AgentCaps
from rlcw.config import at_least
from rlcw.errors import RlcwError
from rlcw.generation import apply_chat_template_file
from rlcw.io import atomic_write_json
from rlcw.logs import quiet_progress
from rlcw.measure.callbacks import JsonlMetricsCallback
from rlcw.measure.evaluation import build_evaluators
from rlcw.measure.monitors import MonitorCallback
from rlcw.measure.periodic import PeriodicEvalCallback
from rlcw.measure.probe import LearningProbe, ProbeSection, probe_texts
from rlcw.models import BASE_FILE, load_causal_lm, load_tokenizer, save_lora_checkpoint
from rlcw.recipes.common.checks import check_bf16, validate_rl_sections, validate_train_keys
from rlcw.recipes.common.models import lora_config
from rlcw.recipes.common.prompts import check_overlap, held_out_prompts, prompt_messages
from rlcw.recipes.common.prompts import train_prompts as mixed_train_prompts
from rlcw.recipes.common.run import stage_run, stage_tracker, trainer_basics
from rlcw.recipes.common.sections import (
    GRPO_MOVED_KEYS,
    GRPO_REMOVED_KEYS,
    EvalSection,
    LoraSection,
    ModelConfig,
    MonitorSection,
    PromptSection,
    RewardSection,
)
from rlcw.rewards.factory import RewardSet, build_reward_set, check_rewards
from rlcw.rewards.slop import human_baseline
from rlcw.rl.aux_state import AuxStateCallback, load_aux_state
from rlcw.rl.grpo.report import grpo_plots, grpo_report, length_control_lines, reward_summary
from rlcw.rl.grpo.seam import (
    AgentsRoomSettings,
    GRPORolloutSection,
    PlainRollout,
    RolloutSettings,
    build_rollout,
    check_vllm_installed,
)
from rlcw.runs import done_line, resume_checkpoint, resume_mode


@dataclass
class GRPORewardSection(RewardSection):
    aggregation: str = "sum_then_normalize"  # or normalize_then_sum (TRL multi_objective_aggregation)


@dataclass
class GRPOTrainSection:
    learning_rate: float = 1e-5  # peak AdamW learning rate
    lr_scheduler_type: str = "linear"  # any transformers SchedulerType: constant_with_warmup, cosine, ...
    # the scheduler's own arguments (transformers `lr_scheduler_kwargs`), e.g. warmup_stable_decay's
    # {num_decay_steps: 8} (hold the peak, then decay to 0 over the last 8 steps)
    lr_scheduler_kwargs: dict[str, Any] = field(default_factory=dict)
    warmup_steps: float = 0.0  # steps; a value below 1 is a ratio of max_steps (transformers 5)
    max_grad_norm: float = 1.0  # gradient-norm clipping threshold
    weight_decay: float = 0.0  # AdamW weight decay
    epsilon: float = 0.2  # PPO-style clip range of the importance ratio (TRL `epsilon`)
    epsilon_high: float | None = None  # upper clip (DAPO: 0.28); None = epsilon
    max_steps: int = at_least(1, 20)  # optimizer steps of the run
    batch_size: int = 8  # completions per step per device (multiple of num_generations)
    gradient_accumulation_steps: int = 1  # batches accumulated per optimizer step
    # completions per prompt (the GRPO group size)
    num_generations: int = at_least(2, 4, "GRPO compares the completions of one prompt")
    num_iterations: int = 1  # optimization passes over each generated batch (TRL mu)
    max_completion_length: int = 96  # new-token cap of each completion
    temperature: float = 0.9  # sampling temperature of the rollouts
    top_p: float = 1.0  # nucleus-sampling p of the rollouts (1.0 = off)
    top_k: int = 0  # 0 = the whole vocabulary (transformers would otherwise default to 50)
    beta: float = 0.0  # KL coefficient in the loss
    loss_type: str = "dapo"  # TRL loss normalization: grpo | dr_grpo | dapo | bnpo | ...
    scale_rewards: str = "group"  # group | batch | none
    mask_truncated_completions: bool = False  # drop completions cut at the cap from the loss
    logging_steps: int = 1  # log metrics every N steps
    save_steps: int = 0  # 0 = only the final adapter (then a killed run cannot resume)
    save_total_limit: int | None = 2  # checkpoints kept (older ones deleted); None = all
    resume: str = "false"  # false | true (the last complete checkpoint; error if none) | auto (it if any)
    # KL to the start on step 1 and every N-th step (one start-model forward each; monitors wait for it); 0 = never
    log_kl_every: int = at_least(0, 1)
    samples_every: int = 1  # top/bottom scored stories every N steps (0 = never)
    samples_k: int = 2  # stories logged from each end (top and bottom) at a samples step
    # DeepSpeed JSON, e.g. configs/deepspeed/zero2.json (launch with torchrun; see slurm/README.md)
    deepspeed: str | None = None
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])  # tensorboard | wandb | trackio | none
    bf16: bool = False  # HF/TRL bf16 mixed precision (GPU configs); weights load as model.dtype


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
class GRPORecipeConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: PromptSection = field(default_factory=PromptSection)
    reward: GRPORewardSection = field(default_factory=GRPORewardSection)
    lora: LoraSection = field(default_factory=LoraSection)
    train: GRPOTrainSection = field(default_factory=GRPOTrainSection)
    rollout: GRPORolloutSection = field(default_factory=GRPORolloutSection)  # how the training stories are written
    eval: EvalSection = field(default_factory=EvalSection)
    monitor: MonitorSection = field(default_factory=MonitorSection)
    agents: AgentsRLSection = field(default_factory=AgentsRLSection)
    probe: ProbeSection = field(default_factory=ProbeSection)  # rlcw.measure.probe: log-prob change on held-out texts
    output_dir: str = "runs"  # parent folder of the run folder <output_dir>/<run_name>
    run_name: str = "grpo"  # name of the run folder under output_dir
    seed: int = 0  # random seed of the run (torch, sampling, data order)
    overwrite: bool = False  # a used run folder is moved aside as <name>.replaced-<time>
    MOVED_KEYS: ClassVar[dict[str, str]] = GRPO_MOVED_KEYS  # old keys a config fails on, with their new place
    REMOVED_KEYS: ClassVar[dict[str, str]] = GRPO_REMOVED_KEYS


# ---------------------------------------------------------------- validate: every config check, before anything loads


def validate(cfg: GRPORecipeConfig) -> PlainRollout:
    """Every check of the config that needs no model, run before the run folder is written (vLLM's presence
    on this machine is `check_vllm_installed`, also before it); returns the run's rollout (rlcw.rl.grpo.seam)."""
    t = cfg.train
    if t.batch_size % t.num_generations:
        raise RlcwError(
            f"train.batch_size={t.batch_size} must be a multiple of train.num_generations={t.num_generations}",
            where="train.batch_size",
            hint="GRPO scores each prompt's group of num_generations completions inside one batch",
        )
    resume_mode(t.resume)
    rollout = rollout_seam(cfg)
    validate_rl_sections(cfg.data, cfg.monitor, cfg.eval.evaluators)
    validate_train_keys(t.report_to, t.bf16)
    return rollout


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


def build_dataset(rows: list[dict], system_prompt: str):
    from datasets import Dataset

    keys = {"min_words": "min_words", "max_words": "max_words", "prompt_id": "id", "source": "source"}
    return Dataset.from_list(
        [{"prompt": prompt_messages(r, system_prompt), **{k: r[v] for k, v in keys.items()}} for r in rows]
    )


# ---------------------------------------------------------------- build: rewards, TRL args, rollouts, evaluation


def reward_defaults(cfg: GRPORecipeConfig, rollout: PlainRollout) -> dict:
    """Recipe-wide options of every reward spec that leaves them out (rlcw.rewards.factory)."""
    return {
        "rm_path": cfg.reward.rm_path,
        "num_generations": cfg.train.num_generations,
        "seed": cfg.seed,
        "max_tokens": rollout.completion_cap,
        "batch_size": cfg.reward.rm_batch_size,
    }


def build_rewards(cfg: GRPORecipeConfig, rollout: PlainRollout) -> RewardSet:
    return build_reward_set(cfg.reward.specs, reward_defaults(cfg, rollout), key="reward.specs")


def build_args(cfg: GRPORecipeConfig, run, weights: list[float], rollout: PlainRollout):
    from trl import GRPOConfig

    t = cfg.train
    return GRPOConfig(
        output_dir=str(run.checkpoints),
        max_steps=t.max_steps,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler_type,
        lr_scheduler_kwargs=dict(t.lr_scheduler_kwargs),
        warmup_steps=t.warmup_steps,
        max_grad_norm=t.max_grad_norm,
        weight_decay=t.weight_decay,
        epsilon=t.epsilon,
        epsilon_high=t.epsilon_high,
        per_device_train_batch_size=t.batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        num_generations=t.num_generations,
        num_iterations=t.num_iterations,
        temperature=t.temperature,
        top_p=t.top_p,
        top_k=t.top_k,
        beta=t.beta,
        loss_type=t.loss_type,
        scale_rewards=t.scale_rewards,
        mask_truncated_completions=t.mask_truncated_completions,
        reward_weights=weights,
        multi_objective_aggregation=cfg.reward.aggregation,
        **trainer_basics(t, cfg.seed),  # logging, saving, precision, seeds, CPU (shared with rloo, dpo)
        log_completions=False,
        remove_unused_columns=False,
        deepspeed=t.deepspeed,
        **rollout.grpo_args(),  # max_completion_length and TRL's vLLM keys
    )


def kl_reference(cfg: GRPORecipeConfig):
    """A frozen starting model for KL to the start: needed only by a full fine-tune at beta = 0 (LoRA
    disables its adapter instead; beta > 0 makes TRL compute reference log-probs itself)."""
    if cfg.lora.enabled or not cfg.train.log_kl_every or cfg.train.beta != 0:
        return None
    return load_causal_lm(cfg.model.name, cfg.model.dtype)


# ---------------------------------------------------------------- main: config -> validate -> build -> train -> save


def main(cfg: GRPORecipeConfig) -> dict:
    rollout = validate(cfg)
    check_vllm_installed(cfg.rollout)  # this machine, not the config (rlcw plan validates a vLLM config on a CPU box)
    check_bf16(cfg.train.bf16)
    check_rewards(cfg.reward.specs, reward_defaults(cfg, rollout), key="reward.specs")  # RM folders, targets
    train_rows, held_out = train_prompts(cfg, rollout), eval_prompts(cfg, rollout)  # before the run folder
    check_overlap(train_rows, held_out, cfg.data.no_overlap_with)
    with stage_run(cfg, "grpo") as run, closing(stage_tracker(cfg, run, cfg.train.report_to)) as tracker:
        tokenizer = load_tokenizer(cfg.model.name, padding_side="left")
        apply_chat_template_file(tokenizer, cfg.model.chat_template)
        rewards = build_rewards(cfg, rollout)  # before the policy loads: a bad reward spec fails fast
        funcs, weights = rewards.funcs, rewards.weights
        lc_lines = length_control_lines(funcs)  # the resolved auto | true | false of every bt reward
        e = cfg.eval
        context = {"rm_path": cfg.reward.rm_path, "run_dir": run.path, "seed": cfg.seed, "scorer": rewards.scorer}
        evaluators = build_evaluators(e.evaluators, context)
        sampler = rollout.eval_sampler(
            tokenizer,
            held_out[: e.num_prompts],
            run_name=cfg.run_name,
            max_new_tokens=e.max_new_tokens,
            temperature=e.temperature,
            batch_size=e.batch_size,
        )
        periodic = PeriodicEvalCallback(run, sampler, evaluators, cfg.eval.every_steps, tracker)
        m = cfg.monitor
        monitor = MonitorCallback(m.warn, m.stop, m.patience, m.min_steps, run)
        model = load_causal_lm(cfg.model.name, cfg.model.dtype)
        peft = lora_config(cfg.lora, "CAUSAL_LM", model.config.num_hidden_layers) if cfg.lora.enabled else None
        funcs = rollout.rewards(funcs)  # Agents' Room: the whole story is rewarded
        args = build_args(cfg, run, weights, rollout)
        from rlcw.rl.grpo.trainer import RlcwGRPOTrainer

        p = cfg.probe
        probe = LearningProbe(
            tokenizer,
            probe_texts(p.texts, p.num_texts, p.max_words) if p.every_steps else [],
            cfg.model.system_prompt,
            p.every_steps,
            run.path / "probe.jsonl",
        )
        t = cfg.train
        aux = {"monitor": monitor, **{f"reward/{f.__name__}": f for f in funcs}}  # saved with every checkpoint
        trainer = RlcwGRPOTrainer(
            model=model,
            reward_funcs=funcs,
            args=args,
            train_dataset=build_dataset(train_rows, cfg.model.system_prompt),
            processing_class=tokenizer,
            peft_config=peft,
            callbacks=[monitor, JsonlMetricsCallback(run, tracker), periodic, probe, AuxStateCallback(aux)],
            run=run,
            monitor_ngram=m.ngram if m.enabled else None,
            log_kl_every=t.log_kl_every,
            kl_ref_model=kl_reference(cfg),
            samples_every=t.samples_every,
            samples_k=t.samples_k,
            slop=human_baseline(m.slop_human) if m.enabled else None,
            **rollout.trainer_kwargs(tokenizer),
        )
        checkpoint = resume_checkpoint(t.resume, run.checkpoints)
        if checkpoint:
            load_aux_state(checkpoint, aux)  # monitor streaks, GenRM pairing RNG
        quiet_progress(trainer, "grpo")  # headline numbers per step; every key goes to metrics.jsonl
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        # the scorer's count of inputs cut to the RM's max_length goes into the summary
        return save_and_report(cfg, run, trainer, tokenizer, monitor, periodic, probe, lc_lines, rewards.scorer)


def save_and_report(cfg: GRPORecipeConfig, run, trainer, tokenizer, monitor, periodic, probe, lc_lines, scorer=None):
    """The final policy in `checkpoints/final` (rank 0; every rank under ZeRO-3), plots, report, summary."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    final, zero3 = run.checkpoints / "final", is_deepspeed_zero3_enabled()
    if zero3:  # ZeRO-3 shards the weights: every rank joins the gather inside save_model
        trainer.save_model(str(final))
    if not trainer.accelerator.is_main_process:  # only rank 0 saves, plots and reports
        return run.write_summary("completed", {"train/steps": float(trainer.state.global_step)})
    if zero3:
        if cfg.lora.enabled:
            atomic_write_json(final / BASE_FILE, {"base": cfg.model.name})
    elif cfg.lora.enabled:
        save_lora_checkpoint(trainer.model, tokenizer, final, cfg.model.name)
    else:
        trainer.model.save_pretrained(final)
        tokenizer.save_pretrained(final)
    metrics = {"train/steps": float(trainer.state.global_step), "monitor/alerts": float(len(monitor.alerts))}
    if scorer is not None and scorer.truncation.inputs:  # share of RM inputs cut to its max_length (warned > 5%)
        metrics["rm/truncated_share"] = scorer.truncation.share
    if periodic.history:
        metrics.update({k: v for k, v in periodic.history[-1].items() if k != "step"})
    if probe.history:
        metrics.update({k: v for k, v in probe.history[-1].items() if k != "step"})
    plots = grpo_plots(run.path, cfg.monitor.warn, cfg.monitor.stop)
    artifacts = {"policy": final, "samples": run.samples, "metrics": run.path / "metrics.jsonl"}
    artifacts.update({p.stem: p for p in plots})
    t = cfg.train
    report = grpo_report(
        run_name=cfg.run_name,
        model_name=cfg.model.name,
        rewards=reward_summary(cfg.reward.specs),
        rm_path=cfg.reward.rm_path,
        beta=t.beta,
        loss_type=t.loss_type,
        scale_rewards=t.scale_rewards,
        metrics=metrics,
        history=periodic.history,
        stop_reason=monitor.stop_reason,
        alerts=monitor.alerts,
        plots=plots,
        length_control=lc_lines,
    )
    keys = {"steps": "train/steps", "held-out RM score": "eval/rm/score", "KL to start": "probe/kl_to_start"}
    word = "STOPPED by a monitor" if monitor.stop_reason else "DONE"
    run.write_report(report, done_line(metrics, {**keys, "monitor alerts": "monitor/alerts"}, word))
    if monitor.stop_reason:
        return run.write_summary("failed", metrics, artifacts, error=monitor.stop_reason)
    return run.write_summary("completed", metrics, artifacts)
