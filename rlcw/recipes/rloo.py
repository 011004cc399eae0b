"""RLOO with learned rewards (TRL RLOOTrainer; LoRA or full), monitors, evaluation, resume.

Reads config -> validate (before the run folder is written or anything loads) -> build (prompts mixed from
`data.sources`, checked against held-out and RM data; rewards from `reward.specs`, rlcw.rewards.factory, by
type or by import path; evaluators, monitors, the learning probe; the policy) -> train (rlcw.rl.rloo.trainer:
TRL's RLOOTrainer plus KL to the start even at beta = 0, monitor statistics, per-source reward and length, the
prompt order, top/bottom stories) -> save (`checkpoints/final`, report and plots). The sections and keys are
grpo's (`rlcw grpo`), except the RLOO-specific ones: `train.beta` is a KL penalty in the reward (TRL's RLOO,
sequence-level, default 0.05), `train.normalize_advantages`, `train.reward_clip_range`.

The advantage is RLOO's leave-one-out baseline: a completion's reward minus the mean reward of the other
completions of its prompt (Ahmadian et al. 2024), so `train.num_generations` >= 2. Not here, and why:
the fast rollout (`rollout.kind` is trl or vllm) with its importance-sampling correction and Agents' Room rollouts (TRL's RLOOTrainer has
no `rollout_func` seam, and its loss reads sequence log-prob sums, not the per-token sampler log-probs the
correction reweights): use `rlcw grpo` for those. Keys: `rlcw rloo --help`.

    rlcw rloo --config configs/rloo/cpu.yaml reward.rm_path=runs/train_rm/model
    rlcw rloo --config configs/rloo/cpu.yaml train.resume=auto      # after a crash or kill
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass, field
from typing import ClassVar

from rlcw.config import at_least
from rlcw.errors import RlcwError
from rlcw.generation import apply_chat_template_file
from rlcw.io import atomic_write_json
from rlcw.measure.callbacks import JsonlMetricsCallback
from rlcw.measure.evaluation import build_evaluators
from rlcw.measure.monitors import MonitorCallback
from rlcw.measure.periodic import PeriodicEvalCallback
from rlcw.measure.probe import LearningProbe, ProbeSection, probe_texts
from rlcw.models import BASE_FILE, load_causal_lm, load_tokenizer, save_lora_checkpoint
from rlcw.recipes.common.checks import check_bf16, validate_rl_sections, validate_train_keys
from rlcw.recipes.common.models import lora_config
from rlcw.recipes.common.prompts import check_overlap, eval_sampler, held_out_prompts, prompt_messages
from rlcw.recipes.common.prompts import train_prompts as mixed_train_prompts
from rlcw.recipes.common.run import stage_run, stage_tracker, trainer_basics
from rlcw.recipes.common.sections import (
    RL_MOVED_KEYS,
    EvalSection,
    LoraSection,
    ModelConfig,
    MonitorSection,
    PromptSection,
    RewardSection,
)
from rlcw.rewards.factory import RewardSet, build_reward_set
from rlcw.rewards.slop import human_baseline
from rlcw.rl.aux_state import AuxStateCallback, load_aux_state
from rlcw.rl.grpo.report import grpo_plots, grpo_report, length_control_lines, reward_summary
from rlcw.rl.grpo.seam import TRL_KINDS, RolloutSection, check_rollout, check_vllm_installed, vllm_args
from rlcw.runs import resume_checkpoint, resume_mode


@dataclass
class RLOOTrainSection:
    learning_rate: float = 1e-5  # peak AdamW learning rate
    lr_scheduler_type: str = "linear"  # any transformers SchedulerType: constant_with_warmup, cosine, ...
    warmup_steps: float = 0.0  # steps; a value below 1 is a ratio of max_steps (transformers 5)
    max_grad_norm: float = 1.0  # gradient-norm clipping threshold
    weight_decay: float = 0.0  # AdamW weight decay
    epsilon: float = 0.2  # clip range of the sequence-level importance ratio (TRL `epsilon`)
    epsilon_high: float | None = None  # upper clip; None = epsilon
    max_steps: int = at_least(1, 20)  # optimizer steps of the run
    batch_size: int = 8  # completions per step per device (multiple of num_generations)
    gradient_accumulation_steps: int = 1  # batches accumulated per optimizer step
    # completions per prompt (the RLOO group size)
    num_generations: int = at_least(2, 4, "the leave-one-out baseline needs another completion of the prompt")
    num_iterations: int = 1  # optimization passes over each generated batch (TRL num_iterations)
    max_completion_length: int = 96  # new-token cap of each completion
    temperature: float = 0.9  # sampling temperature of the rollouts
    top_p: float = 1.0  # nucleus-sampling p of the rollouts (1.0 = off)
    top_k: int = 0  # 0 = the whole vocabulary (transformers would otherwise default to 50)
    beta: float = 0.0  # KL penalty in the reward (TRL's default is 0.05; 0 loads no reference model)
    normalize_advantages: bool = False  # scale advantages to mean 0, std 1 per generation batch
    reward_clip_range: list[float] | None = None  # [min, max] of the total reward; None = no clipping
    mask_truncated_completions: bool = False  # drop completions cut at the cap from the loss
    logging_steps: int = 1  # log metrics every N steps
    save_steps: int = 0  # 0 = only the final adapter (then a killed run cannot resume)
    save_total_limit: int | None = 2  # checkpoints kept (older ones deleted); None = all
    resume: str = "false"  # false | true (the last complete checkpoint; error if none) | auto (it if any)
    log_kl_every: int = at_least(0, 1)  # KL to the start on step 1 and every N-th step (one extra forward); 0 = never
    samples_every: int = 1  # top/bottom scored stories every N steps (0 = never)
    samples_k: int = 2  # stories logged from each end (top and bottom) at a samples step
    deepspeed: str | None = None  # DeepSpeed JSON, e.g. configs/deepspeed/zero2.json (launch with torchrun)
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])  # tensorboard | wandb | trackio | none
    bf16: bool = False  # HF/TRL bf16 mixed precision (GPU configs); weights load as model.dtype


@dataclass
class RLOORecipeConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: PromptSection = field(default_factory=PromptSection)
    reward: RewardSection = field(default_factory=RewardSection)
    lora: LoraSection = field(default_factory=LoraSection)
    train: RLOOTrainSection = field(default_factory=RLOOTrainSection)
    rollout: RolloutSection = field(default_factory=RolloutSection)  # how the training completions are written
    eval: EvalSection = field(default_factory=EvalSection)
    monitor: MonitorSection = field(default_factory=MonitorSection)
    probe: ProbeSection = field(default_factory=ProbeSection)  # rlcw.measure.probe: log-prob change on held-out texts
    output_dir: str = "runs"  # parent folder of the run folder <output_dir>/<run_name>
    run_name: str = "rloo"  # name of the run folder under output_dir
    seed: int = 0  # random seed of the run
    overwrite: bool = False  # a used run folder is moved aside as <name>.replaced-<time>
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
    validate_train_keys(t.report_to, t.bf16)


# ---------------------------------------------------------------- build: prompts, rewards, TRL args


def build_dataset(rows: list[dict], system_prompt: str):
    from datasets import Dataset

    keys = {"min_words": "min_words", "max_words": "max_words", "prompt_id": "id", "source": "source"}
    return Dataset.from_list(
        [{"prompt": prompt_messages(r, system_prompt), **{k: r[v] for k, v in keys.items()}} for r in rows]
    )


def build_rewards(cfg: RLOORecipeConfig) -> RewardSet:
    defaults = {
        "rm_path": cfg.reward.rm_path,
        "num_generations": cfg.train.num_generations,
        "seed": cfg.seed,
        "max_tokens": cfg.train.max_completion_length,
        "batch_size": cfg.reward.rm_batch_size,
    }
    return build_reward_set(cfg.reward.specs, defaults, key="reward.specs")


def build_args(cfg: RLOORecipeConfig, run, weights: list[float]):
    from trl import RLOOConfig

    t = cfg.train
    return RLOOConfig(
        output_dir=str(run.checkpoints),
        max_steps=t.max_steps,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler_type,
        warmup_steps=t.warmup_steps,
        max_grad_norm=t.max_grad_norm,
        weight_decay=t.weight_decay,
        epsilon=t.epsilon,
        epsilon_high=t.epsilon_high,
        per_device_train_batch_size=t.batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        num_generations=t.num_generations,
        num_iterations=t.num_iterations,
        max_completion_length=t.max_completion_length,
        temperature=t.temperature,
        top_p=t.top_p,
        top_k=t.top_k,
        beta=t.beta,
        normalize_advantages=t.normalize_advantages,
        reward_clip_range=tuple(t.reward_clip_range) if t.reward_clip_range is not None else None,
        mask_truncated_completions=t.mask_truncated_completions,
        reward_weights=weights,
        **trainer_basics(t, cfg.seed),  # logging, saving, precision, seeds, CPU (shared with rloo, dpo)
        log_completions=False,
        remove_unused_columns=False,
        deepspeed=t.deepspeed,
        **vllm_args(cfg.rollout),
    )


def kl_reference(cfg: RLOORecipeConfig):
    """A frozen starting model for KL to the start of a full fine-tune (LoRA disables its adapter instead)."""
    if cfg.lora.enabled or not cfg.train.log_kl_every:
        return None
    return load_causal_lm(cfg.model.name, cfg.model.dtype)


# ---------------------------------------------------------------- main: config -> validate -> build -> train -> save


def main(cfg: RLOORecipeConfig) -> dict:
    validate(cfg)
    check_vllm_installed(cfg.rollout)
    check_bf16(cfg.train.bf16)
    cap = cfg.train.max_completion_length
    train_rows = mixed_train_prompts(cfg.data, cap, cfg.seed)  # prompt files only: before the run folder
    held_out = held_out_prompts(cfg.data, cfg.eval, cfg.eval.max_new_tokens)
    check_overlap(train_rows, held_out, cfg.data.no_overlap_with)
    with stage_run(cfg, "rloo") as run, closing(stage_tracker(cfg, run, cfg.train.report_to)) as tracker:
        tokenizer = load_tokenizer(cfg.model.name, padding_side="left")
        apply_chat_template_file(tokenizer, cfg.model.chat_template)
        rewards = build_rewards(cfg)  # before the policy loads: a bad reward spec fails fast
        funcs, weights = rewards.funcs, rewards.weights
        lc_lines = length_control_lines(funcs)
        context = {
            "rm_path": cfg.reward.rm_path,
            "run_dir": run.path,
            "seed": cfg.seed,
            "scorer": rewards.scorer,
        }
        evaluators = build_evaluators(cfg.eval.evaluators, context)
        sampler = eval_sampler(
            cfg.eval,
            tokenizer,
            held_out[: cfg.eval.num_prompts],
            system_prompt=cfg.model.system_prompt,
            run_name=cfg.run_name,
            seed=cfg.seed,
        )
        periodic = PeriodicEvalCallback(run, sampler, evaluators, cfg.eval.every_steps, tracker)
        m = cfg.monitor
        monitor = MonitorCallback(m.warn, m.stop, m.patience, m.min_steps, run)
        model = load_causal_lm(cfg.model.name, cfg.model.dtype)
        peft = lora_config(cfg.lora, "CAUSAL_LM", model.config.num_hidden_layers) if cfg.lora.enabled else None
        p, t = cfg.probe, cfg.train
        probe = LearningProbe(
            tokenizer,
            probe_texts(p.texts, p.num_texts, p.max_words) if p.every_steps else [],
            cfg.model.system_prompt,
            p.every_steps,
            run.path / "probe.jsonl",
        )
        from rlcw.rl.rloo.trainer import RlcwRLOOTrainer

        aux = {"monitor": monitor, **{f"reward/{f.__name__}": f for f in funcs}}  # saved with every checkpoint
        trainer = RlcwRLOOTrainer(
            model=model,
            reward_funcs=funcs,
            args=build_args(cfg, run, weights),
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
        )
        checkpoint = resume_checkpoint(t.resume, run.checkpoints)
        if checkpoint:
            load_aux_state(checkpoint, aux)  # monitor streaks, reward state
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        return save_and_report(cfg, run, trainer, tokenizer, monitor, periodic, probe, lc_lines)


def save_and_report(
    cfg: RLOORecipeConfig, run, trainer, tokenizer, monitor: MonitorCallback, periodic, probe, lc_lines: list[str]
) -> dict:
    """The final policy in `checkpoints/final` (rank 0; every rank under ZeRO-3), plots, report, summary."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    final, zero3 = run.checkpoints / "final", is_deepspeed_zero3_enabled()
    if zero3:  # ZeRO-3 shards the weights: every rank joins the gather inside save_model
        trainer.save_model(str(final))
    if not trainer.accelerator.is_main_process:
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
    if periodic.history:
        metrics.update({k: v for k, v in periodic.history[-1].items() if k != "step"})
    if probe.history:
        metrics.update({k: v for k, v in probe.history[-1].items() if k != "step"})
    plots = grpo_plots(run.path)  # the same metrics.jsonl keys as grpo's
    artifacts = {"policy": final, "samples": run.samples, "metrics": run.path / "metrics.jsonl"}
    artifacts |= {p.stem: p for p in plots}
    t = cfg.train
    report = grpo_report(
        run_name=cfg.run_name,
        model_name=cfg.model.name,
        rewards=reward_summary(cfg.reward.specs),
        rm_path=cfg.reward.rm_path,
        beta=t.beta,
        loss_type="rloo (leave-one-out baseline, sequence-level clipped ratio)",
        scale_rewards=f"normalize_advantages={t.normalize_advantages}",
        metrics=metrics,
        history=periodic.history,
        stop_reason=monitor.stop_reason,
        alerts=monitor.alerts,
        plots=plots,
        length_control=lc_lines,
    )
    run.write_report(report.replace("# GRPO run", "# RLOO run", 1))
    if monitor.stop_reason:
        return run.write_summary("failed", metrics, artifacts, error=monitor.stop_reason)
    return run.write_summary("completed", metrics, artifacts)
