"""The skeleton of the TRL-based RL recipes (`rlcw grpo`, `rlcw rloo`): what both do alike, written once.

    stage = TRLStage(command="rloo", title="RLOO", trainer=rloo_trainer, args=..., prompts=..., ...)
    return run_stage(cfg, stage)        # in the recipe's main, after its own `validate(cfg)`

`TRLTrainSection` holds the `train.*` keys both recipes read alike (each recipe's section adds its own);
`trl_args` turns them into the TRL config arguments both set alike. `run_stage` runs the checks of this machine and
of the rewards (RM folders, targets) before the run folder is written, then in the run folder: the rewards, the
evaluators and the periodic evaluation, the reward-hacking monitors, the learning probe, the policy (LoRA or
full), the trainer with rlcw's per-step extras (rlcw.rl.trl_common), the monitor and reward state saved with every
checkpoint (rlcw.rl.aux_state), resume, headline progress lines, and at the end `checkpoints/final`, plots, the
report titled by the recipe, the summary (with `rm/truncated_share` when the RM cut inputs) and the DONE line. A
recipe passes what differs as a `TRLStage`: its TRL config and trainer, its prompts and evaluation sampler, the
reward wrapper and trainer keywords of its rollout, and the lines of its report.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from rlcw.config import above, at_least, one_of
from rlcw.cpu_isa import CPU_PRECISIONS
from rlcw.generation import apply_chat_template_file
from rlcw.io import atomic_write_json
from rlcw.logs import quiet_progress, say
from rlcw.measure.callbacks import JsonlMetricsCallback
from rlcw.measure.evaluation import build_evaluators
from rlcw.measure.monitors import MonitorCallback
from rlcw.measure.periodic import PeriodicEvalCallback
from rlcw.measure.probe import LearningProbe, probe_texts
from rlcw.models import BASE_FILE, context_length, load_causal_lm, load_tokenizer, save_lora_checkpoint
from rlcw.recipes.common.checks import check_bf16
from rlcw.recipes.common.models import lora_config
from rlcw.recipes.common.prompts import check_overlap, fit_to_context, prompt_messages
from rlcw.recipes.common.run import stage_run, stage_tracker, trainer_basics
from rlcw.recipes.common.sections import RewardSection
from rlcw.rewards.constrained import CONSTRAINED_UNDER_GROUP, ConstrainedReward
from rlcw.rewards.factory import build_reward_set, check_rewards
from rlcw.rewards.slop import human_baseline
from rlcw.rl.aux_state import AUX_STATE_FILE, AuxStateCallback, load_aux_state, stateful
from rlcw.rl.grpo.report import grpo_plots, grpo_report, length_control_lines, reward_summary
from rlcw.rl.grpo.seam import check_vllm_installed
from rlcw.rl.tail_average import TAIL_FILE, TailAverage
from rlcw.runs import done_line, resume_checkpoint

# transformers' SchedulerType values (a test holds them equal), so a misspelt scheduler is refused before torch
LR_SCHEDULERS = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "reduce_lr_on_plateau",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "warmup_stable_decay",
    "greedy",
)


@dataclass
class TRLTrainSection:
    """`train.*` keys grpo and rloo share; each recipe's own section adds the rest."""

    learning_rate: float = at_least(0, 1e-5)  # peak AdamW learning rate
    lr_scheduler_type: str = one_of(LR_SCHEDULERS, "linear")  # any transformers SchedulerType: cosine, ...
    # the scheduler's own arguments (transformers `lr_scheduler_kwargs`), e.g. warmup_stable_decay's
    # {num_decay_steps: 8} (hold the peak, then decay to 0 over the last 8 steps)
    lr_scheduler_kwargs: dict[str, Any] = field(default_factory=dict)
    warmup_steps: float = 0.0  # steps; a value below 1 is a ratio of max_steps (transformers 5)
    max_grad_norm: float = 1.0  # gradient-norm clipping threshold
    weight_decay: float = 0.0  # AdamW weight decay
    # AdamW's momentum (transformers adam_beta1): its ~1/(1 - beta1) steps of memory keep a step's direction after
    # the gradient has turned
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999  # AdamW's second-moment decay (transformers adam_beta2)
    epsilon: float = 0.2  # clip range of the importance ratio (TRL `epsilon`; grpo per token, rloo per sequence)
    epsilon_high: float | None = None  # upper clip (DAPO: 0.28); None = epsilon
    max_steps: int = at_least(1, 20)  # optimizer steps of the run
    # the final policy is the mean of the trainable weights after each of the last N steps (Polyak-Ruppert tail
    # averaging, rlcw.rl.tail_average; not with train.deepspeed); 0 = the last step's weights
    tail_average: int = at_least(0, 0)
    batch_size: int = at_least(1, 8)  # completions per step per device (multiple of num_generations)
    gradient_accumulation_steps: int = at_least(1, 1)  # batches accumulated per optimizer step
    # completions per prompt (the group size)
    num_generations: int = at_least(2, 4, "each completion is compared with the others of its prompt")
    num_iterations: int = at_least(1, 1)  # optimization passes over each generated batch (TRL num_iterations, mu)
    max_completion_length: int = at_least(1, 96)  # new-token cap of each completion
    temperature: float = above(0, 0.9, "log-probs divide by it")  # sampling temperature of the rollouts
    top_p: float = 1.0  # nucleus-sampling p of the rollouts (1.0 = off)
    top_k: int = at_least(0, 0)  # 0 = the whole vocabulary (transformers would otherwise default to 50)
    beta: float = 0.0  # KL coefficient to the start (grpo: in the loss; rloo: a penalty in the reward)
    mask_truncated_completions: bool = False  # drop completions cut at the cap from the loss
    logging_steps: int = at_least(1, 1)  # log metrics every N steps
    save_steps: int = at_least(0, 0)  # 0 = only the final adapter (then a killed run cannot resume)
    save_total_limit: int | None = 2  # checkpoints kept (older ones deleted); None = all
    resume: str = "false"  # false | true (the last complete checkpoint; error if none) | auto (it if any)
    # KL to the start on step 1 and every N-th step (one start-model forward each; monitors wait for it); 0 = never
    log_kl_every: int = at_least(0, 1)
    samples_every: int = at_least(0, 1)  # top/bottom scored stories every N steps (0 = never)
    samples_k: int = at_least(1, 2)  # stories logged from each end (top and bottom) at a samples step
    # DeepSpeed JSON, e.g. configs/deepspeed/zero2.json (launch with torchrun; see slurm/README.md)
    deepspeed: str | None = None
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])  # tensorboard | wandb | trackio | none
    bf16: bool = False  # HF/TRL bf16 mixed precision (GPU configs); weights load as model.dtype
    # on a CPU, the loss's forward and backward: fp32 | bf16 (autocast) | auto (bf16 where AMX runs it or bf16
    # matmuls timed faster here, rlcw.cpu_isa; the log says which); train.bf16=true decides instead
    cpu_precision: str = one_of(CPU_PRECISIONS, "fp32")


def trl_args(t: TRLTrainSection, seed: int, output_dir: str, command: str) -> dict:
    """The TRL config arguments (GRPOConfig, RLOOConfig) grpo and rloo set alike from their `train` section; on a
    CPU `train.cpu_precision` resolved here turns TRL's bf16 autocast on (said in `command`'s log)."""
    from rlcw.cpu_isa import cpu_autocast

    bf16 = t.bf16 or cpu_autocast(t.cpu_precision, t.bf16, command, "the loss's forward and backward")
    return {
        "output_dir": output_dir,
        "max_steps": t.max_steps,
        "learning_rate": t.learning_rate,
        "lr_scheduler_type": t.lr_scheduler_type,
        "lr_scheduler_kwargs": dict(t.lr_scheduler_kwargs),
        "warmup_steps": t.warmup_steps,
        "max_grad_norm": t.max_grad_norm,
        "weight_decay": t.weight_decay,
        "adam_beta1": t.adam_beta1,
        "adam_beta2": t.adam_beta2,
        "epsilon": t.epsilon,
        "epsilon_high": t.epsilon_high,
        "per_device_train_batch_size": t.batch_size,
        "gradient_accumulation_steps": t.gradient_accumulation_steps,
        "num_generations": t.num_generations,
        "num_iterations": t.num_iterations,
        "temperature": t.temperature,
        "top_p": t.top_p,
        "top_k": t.top_k,
        "beta": t.beta,
        "mask_truncated_completions": t.mask_truncated_completions,
        **trainer_basics(t, seed),  # logging, saving, precision, seeds, CPU (shared with dpo)
        "bf16": bf16,
        "log_completions": False,
        "remove_unused_columns": False,
        "deepspeed": t.deepspeed,
    }


def reward_defaults(reward: RewardSection, num_generations: int, seed: int, max_tokens: int) -> dict:
    """Recipe-wide options of every reward spec that leaves them out (rlcw.rewards.factory)."""
    return {
        "rm_path": reward.rm_path,
        "num_generations": num_generations,
        "seed": seed,
        "max_tokens": max_tokens,
        "batch_size": reward.rm_batch_size,
    }


def build_dataset(rows: list[dict], system_prompt: str):
    """The TRL training dataset: the chat prompt and the columns rlcw's rewards and batch log read."""
    from datasets import Dataset

    keys = {"min_words": "min_words", "max_words": "max_words", "prompt_id": "id", "source": "source"}
    return Dataset.from_list(
        [{"prompt": prompt_messages(r, system_prompt), **{k: r[v] for k, v in keys.items()}} for r in rows]
    )


def _same(x):
    return x


def _no_kwargs(tokenizer, rows: list[dict]) -> dict:
    return {}


@dataclass
class TRLStage:
    """What one TRL-based RL recipe puts into `run_stage`: everything in which grpo and rloo differ."""

    command: str  # the run folder's command and the progress lines' label: grpo | rloo
    title: str  # the report's heading: "# <title> run `<run_name>`"
    trainer: Callable[[], type]  # the trainer class (a TRL trainer with rlcw.rl.trl_common.TRLExtras), imported late
    args: Callable[[Any, list[float]], Any]  # (run, reward weights) -> the TRL config
    prompts: Callable[[], tuple[list[dict], list[dict]]]  # -> (training rows, held-out rows): read before the run
    eval_sampler: Callable[[Any, list[dict]], Callable]  # (tokenizer, held-out rows) -> `sample(model, step)`
    max_tokens: int  # the reward specs' default `max_tokens`: the completion cap
    start_copy: bool  # a full fine-tune needs a frozen start model for the KL (no reference log-probs from TRL)
    loss_line: str  # the report's loss
    scale_line: str  # the report's reward scaling
    rewards: Callable[[list], list] = _same  # the reward functions as the trainer calls them
    # (tokenizer, training rows) -> the trainer's own keywords (rollout); called before any model loads
    trainer_kwargs: Callable[[Any, list[dict]], dict] = _no_kwargs


def kl_reference(cfg, stage: TRLStage):
    """A frozen starting model for KL to the start: needed only by a full fine-tune whose trainer gets no reference
    log-probs from TRL (LoRA disables its adapter instead)."""
    if cfg.lora.enabled or not cfg.train.log_kl_every or not stage.start_copy:
        return None
    return load_causal_lm(cfg.model.name, cfg.model.dtype)


def build_probe(cfg, tokenizer, run) -> LearningProbe:
    """The learning probe (`probe.*`, rlcw.measure.probe) writing `probe.jsonl` in the run folder."""
    p = cfg.probe
    return LearningProbe(
        tokenizer,
        probe_texts(p.texts, p.num_texts, p.max_words) if p.every_steps else [],
        cfg.model.system_prompt,
        p.every_steps,
        run.path / "probe.jsonl",
    )


# ---------------------------------------------------------------- the run: checks -> build -> train -> save


def fit_prompts_to_context(cfg, tokenizer, train_rows: list[dict], held_out: list[dict], cap: int):
    """The training and held-out rows that fit the policy's context window with their completion caps
    (rlcw.recipes.common.prompts.fit_to_context: data.fit_to_cap=filter drops, otherwise an error)."""
    context, system, mode = context_length(cfg.model.name), cfg.model.system_prompt, cfg.data.fit_to_cap
    return (
        fit_to_context(train_rows, tokenizer, system, cap, context, mode, "training", "train.max_completion_length"),
        fit_to_context(
            held_out, tokenizer, system, cfg.eval.max_new_tokens, context, mode, "held-out", "eval.max_new_tokens"
        ),
    )


def run_stage(cfg, stage: TRLStage) -> dict:
    """Checks of this machine and the rewards, prompts and their overlap (before the run folder is written), then
    build, train, save and report in the run folder (see the module docstring). `cfg` is grpo's or rloo's config,
    already validated by the recipe."""
    check_vllm_installed(cfg.rollout)  # this machine, not the config (rlcw plan checks GPU configs)
    check_bf16(cfg.train.bf16)
    defaults = reward_defaults(cfg.reward, cfg.train.num_generations, cfg.seed, stage.max_tokens)
    check_rewards(cfg.reward.specs, defaults, key="reward.specs")  # RM folders, targets
    train_rows, held_out = stage.prompts()  # prompt files only
    check_overlap(train_rows, held_out, cfg.data.no_overlap_with)
    tokenizer = load_tokenizer(cfg.model.name, padding_side="left")
    apply_chat_template_file(tokenizer, cfg.model.chat_template)
    train_rows, held_out = fit_prompts_to_context(cfg, tokenizer, train_rows, held_out, stage.max_tokens)
    with stage_run(cfg, stage.command) as run, closing(stage_tracker(cfg, run, cfg.train.report_to)) as tracker:
        extra = stage.trainer_kwargs(tokenizer, train_rows)  # first: its errors (a reference file) cost no load
        rewards = build_reward_set(cfg.reward.specs, defaults, key="reward.specs")  # before the policy loads
        if stage.scale_line == "group" and any(isinstance(f, ConstrainedReward) for f in rewards.funcs):
            say(stage.command, CONSTRAINED_UNDER_GROUP)
        lc_lines = length_control_lines(rewards.funcs)  # the resolved auto | true | false of every bt reward
        context = {"rm_path": cfg.reward.rm_path, "run_dir": run.path, "seed": cfg.seed, "scorer": rewards.scorer}
        evaluators = build_evaluators(cfg.eval.evaluators, context)
        sampler = stage.eval_sampler(tokenizer, held_out[: cfg.eval.num_prompts])
        periodic = PeriodicEvalCallback(run, sampler, evaluators, cfg.eval.every_steps, tracker)
        m, t = cfg.monitor, cfg.train
        monitor = MonitorCallback(m.warn, m.stop, m.patience, m.min_steps, run)
        model = load_causal_lm(cfg.model.name, cfg.model.dtype)
        peft = lora_config(cfg.lora, "CAUSAL_LM", model.config.num_hidden_layers) if cfg.lora.enabled else None
        funcs = stage.rewards(rewards.funcs)
        args = stage.args(run, rewards.weights)
        probe = build_probe(cfg, tokenizer, run)
        aux = {"monitor": monitor, **{f"reward/{f.__name__}": f for f in funcs}}  # saved with every checkpoint
        # first: the final evaluation at the end of training reads the averaged policy
        tail = [TailAverage(t.tail_average, t.max_steps, stage.command)] if t.tail_average else []
        trainer = stage.trainer()(
            model=model,
            reward_funcs=funcs,
            args=args,
            train_dataset=build_dataset(train_rows, cfg.model.system_prompt),
            processing_class=tokenizer,
            peft_config=peft,
            callbacks=[*tail, monitor, JsonlMetricsCallback(run, tracker), periodic, probe, AuxStateCallback(aux)],
            run=run,
            monitor_ngram=m.ngram if m.enabled else None,
            log_kl_every=t.log_kl_every,
            kl_ref_model=kl_reference(cfg, stage),
            samples_every=t.samples_every,
            samples_k=t.samples_k,
            slop=human_baseline(m.slop_human) if m.enabled else None,
            **extra,
        )
        # the aux state is written after the trainer's own files: a checkpoint without it was cut short
        needs = ((AUX_STATE_FILE,) if stateful(aux) else ()) + ((TAIL_FILE,) if tail else ())
        checkpoint = resume_checkpoint(t.resume, run.checkpoints, needs=needs)
        if checkpoint:
            load_aux_state(checkpoint, aux)  # monitor streaks, GenRM pairing RNG
            if tail:
                tail[0].load(checkpoint)
        quiet_progress(trainer, stage.command)  # headline numbers per step; every key goes to metrics.jsonl
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        # the scorer's count of inputs cut to the RM's max_length goes into the summary
        return save_and_report(cfg, stage, run, trainer, tokenizer, monitor, periodic, probe, lc_lines, rewards.scorer)


def save_final(cfg, run, trainer, tokenizer) -> bool:
    """The final policy in `checkpoints/final` (rank 0; every rank under ZeRO-3); True on the main process."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    final, zero3 = run.checkpoints / "final", is_deepspeed_zero3_enabled()
    if zero3:  # ZeRO-3 shards the weights: every rank joins the gather inside save_model
        trainer.save_model(str(final))
    if not trainer.accelerator.is_main_process:  # only rank 0 saves, plots and reports
        return False
    if zero3:
        if cfg.lora.enabled:
            atomic_write_json(final / BASE_FILE, {"base": cfg.model.name})
    elif cfg.lora.enabled:
        save_lora_checkpoint(trainer.model, tokenizer, final, cfg.model.name)
    else:
        trainer.model.save_pretrained(final)
        tokenizer.save_pretrained(final)
    return True


def save_and_report(cfg, stage: TRLStage, run, trainer, tokenizer, monitor, periodic, probe, lc_lines, scorer=None):
    """The final policy, plots, the report titled `stage.title`, the summary and the DONE (or STOPPED) line."""
    if not save_final(cfg, run, trainer, tokenizer):
        return run.write_summary("completed", {"train/steps": float(trainer.state.global_step)})
    metrics = {"train/steps": float(trainer.state.global_step), "monitor/alerts": float(len(monitor.alerts))}
    if scorer is not None and scorer.truncation.inputs:  # share of RM inputs cut to its max_length (warned > 5%)
        metrics["rm/truncated_share"] = scorer.truncation.share
    if periodic.history:
        metrics.update({k: v for k, v in periodic.history[-1].items() if k != "step"})
    if probe.history:
        metrics.update({k: v for k, v in probe.history[-1].items() if k != "step"})
    plots = grpo_plots(run.path, cfg.monitor.warn, cfg.monitor.stop)
    artifacts = {"policy": run.checkpoints / "final", "samples": run.samples, "metrics": run.path / "metrics.jsonl"}
    artifacts.update({p.stem: p for p in plots})
    report = grpo_report(
        title=stage.title,
        run_name=cfg.run_name,
        model_name=cfg.model.name,
        rewards=reward_summary(cfg.reward.specs),
        rm_path=cfg.reward.rm_path,
        beta=cfg.train.beta,
        loss_type=stage.loss_line,
        scale_rewards=stage.scale_line,
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
