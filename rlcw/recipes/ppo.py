"""PPO with learned rewards (rlcw's own loop: TRL 1.16 has no PPOTrainer).

What: a LoRA policy, the reference = the same base with the adapter disabled (no second copy),
a separate value model started from the BT reward model (its backbone with LoRA and its score
head read at every token; `value.init=policy` starts from the policy's base with a fresh head),
rewards from `reward.specs` (`rlcw.rewards.factory`: bt, genrm, remote, length_range,
overlong; the same section as `rlcw grpo`) summed with their weights, -kl_coef * KL per
token, GAE, clipped policy and value losses (`rlcw.rl.ppo.maths`). Prompts are chat
conversations as in `rlcw grpo`. Logged every step to metrics.jsonl and TensorBoard: reward
(and per reward function), KL, entropy, clipfrac, approx KL, losses, explained variance,
lengths, cap share, reward-hacking monitors (`monitor.*` warn / stop rules); every
`eval.every_steps` the evaluators (`eval.evaluators`, `rlcw.measure.evaluation`) run on held-out
prompts (`eval.prompts` at `eval.split`). Prompts, rewards, evaluation and monitors use the same
sections as `rlcw grpo` (`data.sources`, `data.fit_to_cap`, `data.no_overlap_with` included); the
`train.*` section is rlcw.rl.ppo.trainer.PPOSettings. Every config check runs in `validate` before the run
folder is written. Checkpoints in `<run>/checkpoints/step_XXXXXX` (policy adapter, value tensors,
optimizer, RNG, step); `train.resume=true` continues from the last (an error when there is none),
`auto` continues when there is one. The final adapter is
`<run>/checkpoints/final` (loadable by every command's `model.name`).
Trackers: `train.report_to` (tensorboard | wandb | trackio | none; default [tensorboard] into
`<run>/tensorboard/`) gets every step's stats and the `eval/...` rows through rlcw.tracking (checked for
secrets). Precision: `train.bf16` (default false = fp32) runs the loop's prepared policy and value forwards
under accelerate's bf16 autocast (`mixed_precision="bf16"`; rollout sampling stays in `model.dtype`); a GPU
without bf16 is an error, a CPU a warning.
What not: full fine-tuning (the reference is the adapter-disabled policy, so LoRA is required),
adaptive KL control, vLLM rollouts.

    rlcw ppo --config configs/ppo/cpu.yaml reward.rm_path=runs/train_rm/model
    rlcw ppo --config configs/ppo/cpu.yaml train.max_steps=20 train.resume=true   # continue
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass, field

from rlcw.errors import RlcwError
from rlcw.generation import apply_chat_template_file
from rlcw.measure.evaluation import build_evaluators
from rlcw.measure.monitors import MonitorCallback, member_panels, plot_monitors
from rlcw.measure.periodic import PeriodicEval
from rlcw.models import context_length, load_causal_lm, load_tokenizer, resolve, save_lora_checkpoint
from rlcw.recipes.common.checks import check_bf16, validate_rl_sections, validate_train_keys
from rlcw.recipes.common.models import lora_config
from rlcw.recipes.common.prompts import (
    check_overlap,
    eval_sampler,
    fit_to_context,
    held_out_prompts,
    prompt_messages,
    train_prompts,
)
from rlcw.recipes.common.run import stage_run, stage_tracker
from rlcw.recipes.common.sections import (
    EvalSection,
    LoraSection,
    MonitorSection,
    RLRecipeSections,
)
from rlcw.report import plot_lines, read_metrics, series
from rlcw.rewards.factory import RewardSet, build_reward_set, check_rewards, check_rm_folder
from rlcw.rewards.slop import human_baseline
from rlcw.rl.ppo.trainer import PPOSettings, PPOTrainer
from rlcw.rl.ppo.value import load_value_model
from rlcw.runs import done_line, resume_checkpoint, resume_mode


@dataclass
class ValueSection:
    init: str = "rm"  # rm: the BT RM's backbone + score head | policy: the policy's base + a fresh head
    path: str | None = None  # None: reward.rm_path (init=rm) or model.name (init=policy)
    backbone: str = "lora"  # lora: LoRA on the backbone + head | frozen: train the head only
    lora: LoraSection = field(default_factory=lambda: LoraSection(r=8, alpha=16))


@dataclass
class PPOTrainSection(PPOSettings):
    """`train.*`: the loop's settings (rlcw.rl.ppo.trainer.PPOSettings) and what the recipe does around the loop."""

    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])  # tensorboard | wandb | trackio | none
    bf16: bool = False  # accelerate bf16 autocast of the prepared policy/value forwards (GPU configs)


@dataclass
class PPORecipeConfig(RLRecipeSections):
    value: ValueSection = field(default_factory=ValueSection)
    train: PPOTrainSection = field(default_factory=PPOTrainSection)  # the library's settings + report_to, bf16
    eval: EvalSection = field(default_factory=lambda: EvalSection(max_new_tokens=64))
    monitor: MonitorSection = field(default_factory=MonitorSection)
    run_name: str = "ppo"  # name of the run folder under output_dir


def validate(cfg: PPORecipeConfig) -> None:
    """Every check of the config that needs no model: run before the run folder is written."""
    t, v = cfg.train, cfg.value
    if t.kl_estimator not in ("k1", "k3"):
        raise RlcwError(
            f"unknown train.kl_estimator '{t.kl_estimator}'", where="train.kl_estimator", hint="use k1 or k3"
        )
    if t.minibatch_size > t.batch_size or t.batch_size % t.minibatch_size:
        raise RlcwError(
            f"train.batch_size={t.batch_size} must be a multiple of train.minibatch_size={t.minibatch_size}",
            where="train.minibatch_size",
            hint="each PPO epoch splits the batch into whole minibatches",
        )
    resume_mode(t.resume)
    if not cfg.lora.enabled:
        raise RlcwError(
            "ppo needs LoRA: the reference model is the policy with its adapter disabled",
            where="lora.enabled",
            hint="set lora.enabled=true (full fine-tuning would need a second copy)",
        )
    if v.init not in ("rm", "policy"):
        raise RlcwError(f"unknown value.init '{v.init}'", where="value.init", hint="use rm or policy")
    if v.backbone not in ("lora", "frozen"):
        raise RlcwError(f"unknown value.backbone '{v.backbone}'", where="value.backbone", hint="use lora or frozen")
    validate_rl_sections(cfg.data, cfg.monitor, cfg.eval.evaluators)
    validate_train_keys(t.report_to, t.bf16)


def build_accelerator(cfg: PPORecipeConfig):
    """The loop's accelerator: CPU when there is no GPU, bf16 autocast when `train.bf16`."""
    import torch
    from accelerate import Accelerator

    return Accelerator(cpu=not torch.cuda.is_available(), mixed_precision="bf16" if cfg.train.bf16 else "no")


def build_policy(cfg: PPORecipeConfig):
    """The starting model (an rlcw LoRA checkpoint is merged: it becomes the reference) + a new LoRA."""
    from peft import get_peft_model

    base = load_causal_lm(cfg.model.name, cfg.model.dtype, merge_lora=True)
    base.config.use_cache = True
    return get_peft_model(base, lora_config(cfg.lora, "CAUSAL_LM", base.config.num_hidden_layers))


def value_source(cfg: PPORecipeConfig) -> str:
    v = cfg.value
    if v.path:
        return resolve(v.path)
    if v.init == "policy":
        return resolve(cfg.model.name)
    return cfg.reward.rm_path


def reward_defaults(cfg: PPORecipeConfig) -> dict:
    """Recipe-wide options of every reward spec that leaves them out (rlcw.rewards.factory)."""
    return {
        "rm_path": cfg.reward.rm_path,
        "seed": cfg.seed,
        "max_tokens": cfg.train.max_new_tokens,
        "batch_size": cfg.reward.rm_batch_size,
    }


def build_rewards(cfg: PPORecipeConfig) -> RewardSet:
    return build_reward_set(cfg.reward.specs, reward_defaults(cfg), key="reward.specs")


def build_value(cfg: PPORecipeConfig, vocab_size: int):
    v = cfg.value
    source = value_source(cfg)
    from transformers import AutoConfig

    layers = AutoConfig.from_pretrained(source).num_hidden_layers
    lora = lora_config(v.lora, None, layers) if v.backbone == "lora" else None
    return load_value_model(source, lora=lora, vocab_size=vocab_size)


def build_sampler(cfg: PPORecipeConfig, tokenizer, eval_rows: list[dict]):
    return eval_sampler(
        cfg.eval, tokenizer, eval_rows, system_prompt=cfg.model.system_prompt, run_name=cfg.run_name, seed=cfg.seed
    )


def main(cfg: PPORecipeConfig) -> dict:
    validate(cfg)
    check_bf16(cfg.train.bf16)
    check_rewards(cfg.reward.specs, reward_defaults(cfg), key="reward.specs")  # RM folders, targets, options
    if cfg.value.init == "rm" and not cfg.value.path:
        check_rm_folder(cfg.reward.rm_path, "reward.rm_path (value.init=rm)")
    train_rows = train_prompts(
        cfg.data, cfg.train.max_new_tokens, cfg.seed
    )  # prompt files only: before the run folder
    held_out = held_out_prompts(cfg.data, cfg.eval, cfg.eval.max_new_tokens)
    check_overlap(train_rows, held_out, cfg.data.no_overlap_with)
    tokenizer = load_tokenizer(cfg.model.name, padding_side="left")
    apply_chat_template_file(tokenizer, cfg.model.chat_template)
    context, system, mode = context_length(cfg.model.name), cfg.model.system_prompt, cfg.data.fit_to_cap
    train_rows = fit_to_context(
        train_rows, tokenizer, system, cfg.train.max_new_tokens, context, mode, "training", "train.max_new_tokens"
    )
    held_out = fit_to_context(
        held_out, tokenizer, system, cfg.eval.max_new_tokens, context, mode, "held-out", "eval.max_new_tokens"
    )
    eval_rows = held_out[: cfg.eval.num_prompts]
    with stage_run(cfg, "ppo") as run, closing(stage_tracker(cfg, run, cfg.train.report_to)) as tracker:
        rewards = build_rewards(cfg)  # before the policy loads: a bad reward spec fails fast
        funcs, weights = rewards.funcs, rewards.weights
        policy = build_policy(cfg)
        value = build_value(cfg, policy.get_input_embeddings().num_embeddings)
        scorer = rewards.scorer
        evaluators = build_evaluators(
            cfg.eval.evaluators,
            {"rm_path": cfg.reward.rm_path, "run_dir": run.path, "seed": cfg.seed, "scorer": scorer},
        )
        sampler = build_sampler(cfg, tokenizer, eval_rows)
        periodic = PeriodicEval(run, sampler, evaluators, cfg.eval.every_steps, tracker)
        monitor = MonitorCallback(cfg.monitor.warn, cfg.monitor.stop, cfg.monitor.patience, cfg.monitor.min_steps, run)
        trainer = PPOTrainer(
            policy,
            value,
            tokenizer,
            funcs,
            weights,
            cfg.train,
            run,
            accelerator=build_accelerator(cfg),
            base_spec=cfg.model.name,
            monitor=monitor,
            seed=cfg.seed,
            monitor_ngram=cfg.monitor.ngram if cfg.monitor.enabled else None,
            tracker=tracker,
            slop=human_baseline(cfg.monitor.slop_human) if cfg.monitor.enabled else None,
        )

        def encode(row: dict) -> list[int]:
            text = tokenizer.apply_chat_template(
                prompt_messages(row, cfg.model.system_prompt), tokenize=False, add_generation_prompt=True
            )
            return tokenizer(text, add_special_tokens=False)["input_ids"]

        history = trainer.train(
            train_rows,
            encode,
            lambda row: prompt_messages(row, cfg.model.system_prompt),
            periodic=periodic,
            resume=resume_checkpoint(cfg.train.resume, run.checkpoints) is not None,
            columns=("min_words", "max_words", "source", "id"),
        )
        trainer.save(run.checkpoints / f"step_{trainer.step:06d}")
        final = run.checkpoints / "final"
        if trainer.acc.is_main_process:
            save_lora_checkpoint(trainer.acc.unwrap_model(trainer.policy), tokenizer, final, cfg.model.name)
        metrics = {"train/steps": float(trainer.step), "monitor/alerts": float(len(monitor.alerts))}
        if history:
            metrics.update(
                {
                    f"train/{k}": history[-1][k]
                    for k in ("reward", "kl", "entropy", "ppo/clipfrac", "ppo/explained_variance")
                    if k in history[-1]
                }
            )
        if periodic.history:
            metrics.update({k: v for k, v in periodic.history[-1].items() if k != "step"})
        artifacts = {
            "policy": final,
            "checkpoint": run.checkpoints / f"step_{trainer.step:06d}",
            "samples": run.samples,
            "metrics": run.path / "metrics.jsonl",
        }
        if trainer.acc.is_main_process:
            run.write_report(
                _report(cfg, run, metrics, history, periodic.history, monitor.alerts, trainer.stop_reason),
                done_line(
                    metrics,
                    {"steps": "train/steps", "monitor alerts": "monitor/alerts"},
                    "STOPPED by a monitor" if trainer.stop_reason else "DONE",
                    more=2,
                ),
            )
        return run.write_summary(
            "failed" if trainer.stop_reason else "completed", metrics, artifacts, error=trainer.stop_reason
        )


def _report(
    cfg: PPORecipeConfig,
    run,
    metrics: dict,
    history: list[dict],
    evals: list[dict],
    alerts: list[dict],
    stop: str | None,
) -> str:
    lines = [
        f"# PPO run `{cfg.run_name}`",
        "",
        f"- policy start: `{cfg.model.name}`",
        "- rewards: "
        + ", ".join(f"{k} ({v.get('type')}, weight {v.get('weight', 1.0)})" for k, v in cfg.reward.specs.items()),
        f"- value model: init={cfg.value.init}, backbone={cfg.value.backbone}; kl_coef {cfg.train.kl_coef} ({cfg.train.kl_estimator})",
        "",
    ]
    if stop:
        lines += [f"**Stopped early:** {stop}", ""]
    if alerts:
        lines += (
            ["## Monitor alerts", ""]
            + [f"- step {a['step']} ({a['level']}): {a['message']}" for a in alerts[:30]]
            + [""]
        )
    keys = [
        "reward",
        "kl",
        "entropy",
        "ppo/clipfrac",
        "ppo/value_loss",
        "ppo/explained_variance",
        "completions/mean_length",
    ]
    if history:
        lines += ["| step | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
        lines += [
            "| " + " | ".join([str(h["step"])] + [f"{h.get(k, float('nan')):.3f}" for k in keys]) + " |"
            for h in history
        ]
        lines += [""] + [f"![{p.stem}](plots/{p.name})" for p in _plots(run, cfg.monitor)] + [""]
    if evals:
        ekeys = [k for k in evals[0] if k != "step"]
        lines += [
            "## Periodic evaluation",
            "",
            "| step | " + " | ".join(ekeys) + " |",
            "|---" * (len(ekeys) + 1) + "|",
        ]
        lines += [
            "| " + " | ".join([str(h["step"])] + [f"{h.get(k, float('nan')):.3f}" for k in ekeys]) + " |"
            for h in evals
        ]
    return "\n".join(lines) + "\n"


def _plots(run, monitor: MonitorSection) -> list:
    rows = read_metrics(run.path / "metrics.jsonl")
    rewards = sorted(
        {k for r in rows for k in r if k.startswith("rewards/") and k.endswith("/mean") and "/member_" not in k}
    )
    curves = plot_lines(
        [
            (
                "reward per step",
                {"total": series(rows, "reward"), **{k.split("/")[1]: series(rows, k) for k in rewards}},
                "reward (mean over responses)",
            ),
            ("KL to the reference", {"kl": series(rows, "kl")}, "nats per response"),
            ("PPO clipped share", {"clipfrac": series(rows, "ppo/clipfrac")}, "share of tokens"),
            ("value model fit", {"explained variance": series(rows, "ppo/explained_variance")}, "explained variance"),
            ("policy entropy", {"entropy": series(rows, "entropy")}, "nats / token"),
            (
                "held-out RM score, policy vs start",
                {"policy": series(rows, "eval/rm/score"), "baseline": series(rows, "eval/rm/baseline_score")},
                "RM score (mean)",
            ),
            *member_panels(rows),
        ],
        run.path / "plots" / "ppo.png",
    )
    return [curves, plot_monitors(rows, run.path / "plots" / "monitors.png", monitor.warn, monitor.stop)]
