"""Train a reward model on preference pairs: Bradley-Terry (`rm.type=bt`) or generative (`rm.type=genrm`).

`bt`: a scalar RM (TRL RewardTrainer, LoRA or full). Text is rendered and truncated by
`rlcw.rm.render.encode_for_rm` (never dropped for length) and fed to TRL pre-tokenized.
Options: prompt in the input or not (`rm.include_prompt`), a margin per pair (`rm.margin=column`
reads `meta.<rm.margin_key>`; `rm.margin=upvotes` uses `rm.margin_scale * ln((c+1)/(r+1))` of
the meta upvotes), reward centering (`rm.center_rewards_coefficient`). `rm.length_head=true` trains a length-disentangled RM
(ODIN, `rlcw.rm.odin`: a quality and a length head, the loss and its `rm.odin.*` weights are stated
there); every scorer then uses the quality head unless told otherwise (`head: quality|length|sum`).

`genrm`: a causal LM fine-tuned (LoRA or full) to answer `Preferred: A|B` for a pair shown as
Story A / Story B, on BOTH orders of every pair so position is not learnt (LitBench's GenRM).
It trains with `rlcw.rm.genrm_trainer.GenRMTrainer` (a transformers Trainer whose loss covers
only the answer tokens), with the same checkpoints/resume/DeepSpeed. With `rm.cot=true` it writes `Reasoning: ...` first (GenRM-CoT); rationales
come from `rm.rationales.source`: `teacher` (a local model, `rm.rationales.teacher_model`),
`file` (jsonl, see `rlcw.data.rationales`) or `judge` (OpenAI-compatible, `rm.rationales.judge`).
Held-out accuracy follows the two-order rule of `rlcw.metrics.pairwise` (verdict probabilities averaged
over both orders; a pair needs a verdict in both), the same numbers eval-rm reports.

Both save a merged model + tokenizer + `rlcw_rm.json` in `<run>/model`. Checkpoints every
`train.save_steps`; `train.resume=true` continues from the last one in `<run>/checkpoints` (an
error when there is none), `train.resume=auto` continues when there is one.
Multi-GPU: `torchrun --nproc_per_node N -m rlcw train-rm ... train.deepspeed=configs/deepspeed/zero2.json`
(ZeRO-3 is not supported for the final merge). Not here: PPO value heads, listwise RMs.

Trackers: `train.report_to` (tensorboard | wandb | trackio | none; default [tensorboard] into `<run>/tensorboard/`)
gets the trainer's metrics and the before/final evaluation rows through rlcw.tracking (checked for secrets; HF's
own `report_to` is "none"). Precision: both RM types load their weights as `model.dtype`; `train.bf16` (default
false = fp32) is the HF bf16 mixed-precision flag (the cluster configs set it; a GPU without bf16 is an error,
a CPU a warning). On a CPU a BT step's precision is `train.cpu_precision` (auto: bf16 autocast where AMX runs bf16
matmuls or they timed faster than fp32, fp32 elsewhere; rlcw.cpu_isa), the final held-out scoring's too, and its forward runs the batch in length
buckets (rlcw.rm.bt_trainer; the same scores up to float rounding); the log says which path was taken.

    rlcw train-rm --config configs/train_rm/cpu.yaml          # BT on corruption pairs
    rlcw train-rm --config configs/train_rm/genrm_cpu.yaml    # GenRM (A/B verdict)
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlcw.config import at_least, check_at_least, check_choice, one_of
from rlcw.cpu_isa import CPU_PRECISIONS
from rlcw.data.preferences import check_pairs_file, load_preferences
from rlcw.data.rationales import RationaleSource, make_rationales, write_rationales
from rlcw.errors import RlcwError, RunFailed
from rlcw.logs import quiet_progress
from rlcw.measure.callbacks import JsonlMetricsCallback
from rlcw.models import load_causal_lm, load_tokenizer, nonfinite_parameters, resolve, torch_dtype
from rlcw.recipes.common.checks import check_bf16, validate_train_keys
from rlcw.recipes.common.models import lora_config
from rlcw.recipes.common.run import stage_run, stage_tracker
from rlcw.recipes.common.sections import LoraSection, ModelConfig, RunKeys
from rlcw.recipes.rm_ensemble import EnsembleSection, SingleRM, train_bt_ensemble, validate_ensemble
from rlcw.rm.odin import HEADS, OdinWeights
from rlcw.rm.pair_eval import dead_rm, evaluate_genrm, evaluate_rm
from rlcw.rm.render import GENRM_SYSTEM_PROMPT, RMSpec, save_rm
from rlcw.rm.scoring import load_rm
from rlcw.rm.train_data import MARGINS, build_bt_dataset, build_genrm_dataset, pair_margins
from rlcw.runs import done_line, resume_checkpoint, resume_mode


@dataclass
class RMDataConfig:
    train_file: str = "runs/build_pairs/pairs/train.jsonl"  # local file or hub id
    # held-out pairs (local file or hub id, split test); None = no evaluation
    eval_file: str | None = "runs/build_pairs/pairs/eval.jsonl"
    split: str = "train"  # hub split for train_file
    # record field names: prompt/chosen/rejected -> the column holding each
    columns: dict[str, str] = field(
        default_factory=lambda: {"prompt": "prompt", "chosen": "chosen", "rejected": "rejected"}
    )
    max_train_pairs: int | None = None  # first N training pairs (None = all)
    max_eval_pairs: int | None = None  # first N held-out pairs (None = all)


@dataclass
class RMSection:
    type: str = "bt"  # bt | genrm
    input_template: str = "chat"  # chat: user=prompt, assistant=story | plain: labelled text | story: story only
    include_prompt: bool = True  # put the prompt in the RM input (false = the story alone)
    system_prompt: str | None = None  # genrm: None = rlcw's judge system prompt
    max_length: int = 512  # genrm: the prompt part (instruction + prompt + both stories)
    truncation_side: str = "left"  # left | right: which end of a too-long input is cut (left keeps the ending)
    center_rewards_coefficient: float | None = None  # bt
    margin: str = "none"  # bt: none | column | upvotes
    margin_key: str = "margin"  # meta key read by margin=column
    # meta keys (chosen, rejected) of the upvote counts read by margin=upvotes
    upvote_keys: list[str] = field(default_factory=lambda: ["chosen_upvotes", "rejected_upvotes"])
    margin_scale: float = 1.0  # margin=upvotes: scale of ln((c+1)/(r+1))
    length_head: bool = False  # bt: quality + length heads, ODIN loss (rlcw.rm.odin); scorers use quality
    odin: OdinWeights = field(default_factory=OdinWeights)  # bt, length_head: weights of the ODIN loss terms
    cot: bool = False  # genrm: rationale before the verdict
    max_rationale_tokens: int = 96  # genrm-cot: cap when training and when scoring
    instruction: str | None = None  # genrm: replaces the default instruction
    rationales: RationaleSource = field(default_factory=RationaleSource)  # genrm-cot: where rationales come from
    ensemble: EnsembleSection = field(default_factory=EnsembleSection)  # bt only


@dataclass
class RMTrainSection:
    learning_rate: float = at_least(0, 3e-4)  # peak AdamW learning rate
    batch_size: int = 8  # training examples per step per device (bt: pairs; genrm: one pair in one order)
    grad_accum: int = 1  # batches accumulated per optimizer step
    max_steps: int = at_least(1, 60)  # optimizer steps of the run
    warmup_ratio: float = 0.05  # share of max_steps spent warming up the learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    logging_steps: int = 5  # log metrics every N steps
    eval_steps: int = 20  # bt: 0 = evaluate only at the end
    eval_batch_size: int = 16  # examples per batch when evaluating
    eval_before: bool = False  # genrm: also measure held-out accuracy of the untrained model
    save_steps: int = 0  # 0 = no intermediate checkpoints
    resume: str = "false"  # false | true (error if no checkpoint) | auto, in <run>/checkpoints (rlcw.runs)
    deepspeed: str | None = None  # DeepSpeed JSON, e.g. configs/deepspeed/zero2.json
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])  # tensorboard | wandb | trackio | none
    bf16: bool = False  # HF bf16 mixed precision (GPU configs); weights load as model.dtype
    # bt on a CPU: auto | fp32 | bf16 (autocast; the weights stay fp32); auto takes bf16 where AMX runs it or it timed faster (the log says)
    cpu_precision: str = one_of(CPU_PRECISIONS, "auto")


@dataclass
class TrainRMConfig(RunKeys):
    model: ModelConfig = field(default_factory=ModelConfig)
    data: RMDataConfig = field(default_factory=RMDataConfig)
    rm: RMSection = field(default_factory=RMSection)
    lora: LoraSection = field(default_factory=LoraSection)
    train: RMTrainSection = field(default_factory=RMTrainSection)
    run_name: str = "train_rm"  # name of the run folder under output_dir


def validate(cfg: TrainRMConfig) -> None:
    """Every config check, before the run folder is written and before anything loads."""
    rm, t = cfg.rm, cfg.train
    check_choice("rm.type", rm.type, ("bt", "genrm"))
    check_choice("rm.truncation_side", rm.truncation_side, ("left", "right"))
    if rm.type == "bt":
        check_choice("rm.margin", rm.margin, MARGINS)
    check_at_least("rm.ensemble.size", rm.ensemble.size, 1)
    if rm.ensemble.size > 1:
        validate_ensemble(rm, cfg.lora)
    if rm.length_head:
        if rm.type != "bt":
            raise RlcwError("rm.length_head needs rm.type=bt", where="rm.length_head", hint="set rm.type=bt")
        if rm.center_rewards_coefficient is not None:
            raise RlcwError(
                "rm.center_rewards_coefficient is not supported with rm.length_head",
                where="rm.center_rewards_coefficient",
                hint="leave it unset (null)",
            )
        for key in ("length", "decorrelation", "orthogonality", "quality_bt"):
            check_at_least(f"rm.odin.{key}", getattr(rm.odin, key), 0)
    if rm.type == "genrm" and rm.cot:
        check_choice("rm.rationales.source", rm.rationales.source, ("teacher", "file", "judge"))
        if rm.rationales.source == "file" and not rm.rationales.file:
            raise RlcwError(
                "rm.rationales.source=file needs rm.rationales.file",
                where="rm.rationales.file",
                hint="point it at a jsonl of rationales",
            )
    for key in ("batch_size", "grad_accum", "max_steps", "eval_batch_size", "logging_steps", "max_length"):
        section = rm if key == "max_length" else t
        check_at_least(f"{'rm' if section is rm else 'train'}.{key}", getattr(section, key), 1)
    check_at_least("train.save_steps", t.save_steps, 0)
    resume_mode(t.resume)
    validate_train_keys(t.report_to, t.bf16)
    if t.deepspeed is not None and not Path(t.deepspeed).is_file():
        raise RlcwError(
            "DeepSpeed config not found",
            where="train.deepspeed",
            hint=f"no file {t.deepspeed}; e.g. train.deepspeed=configs/deepspeed/zero2.json",
        )


# --- Bradley-Terry and shared builders ---


def build_spec(cfg: TrainRMConfig, tokenizer) -> RMSpec:
    rm = cfg.rm
    extra: dict[str, Any] = {}
    system = rm.system_prompt
    if rm.type == "bt" and rm.length_head:
        extra = {"heads": list(HEADS)}  # the score layer's rows, in order
    if rm.type == "genrm":
        extra = {"cot": rm.cot, "max_rationale_tokens": rm.max_rationale_tokens}
        if rm.instruction:
            extra["instruction"] = rm.instruction
        system = GENRM_SYSTEM_PROMPT if system is None else system
    return RMSpec(
        type=rm.type,
        base_model=cfg.model.name,
        input_template=rm.input_template,
        include_prompt=rm.include_prompt,
        system_prompt=system,
        max_length=rm.max_length,
        truncation_side=rm.truncation_side,
        pad_token=tokenizer.pad_token,
        extra=extra,
    ).check()


def build_margins(cfg: TrainRMConfig, pairs: list[dict]) -> list[float] | None:
    """`rm.margin` -> TRL's per-pair `margin` column (None for rm.margin=none); errors name the row of data.train_file."""
    rm = cfg.rm
    return pair_margins(
        pairs,
        rm.margin,
        cfg.data.train_file,
        margin_key=rm.margin_key,
        upvote_keys=rm.upvote_keys,
        scale=rm.margin_scale,
    )


def build_model(cfg: TrainRMConfig, tokenizer):
    from transformers import AutoModelForSequenceClassification

    heads = list(HEADS) if cfg.rm.length_head else ["score"]
    model = AutoModelForSequenceClassification.from_pretrained(
        resolve(cfg.model.name),
        num_labels=len(heads),
        id2label=dict(enumerate(heads)),
        label2id={h: i for i, h in enumerate(heads)},
        dtype=torch_dtype(cfg.model.dtype),
    )
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(len(tokenizer))
    model.config.pad_token_id = tokenizer.pad_token_id
    return model


def build_peft_config(lora: LoraSection, num_layers: int, task: str = "SEQ_CLS"):
    if not lora.enabled:
        return None
    from peft import TaskType

    return lora_config(lora, TaskType[task], num_layers)


def common_args(cfg: TrainRMConfig, run) -> dict:
    """TrainingArguments shared by the BT and GenRM trainers."""
    t = cfg.train
    if t.deepspeed is not None and not Path(t.deepspeed).is_file():
        raise RlcwError(
            "DeepSpeed config not found", where=t.deepspeed, hint="e.g. train.deepspeed=configs/deepspeed/zero2.json"
        )
    return dict(
        output_dir=str(run.checkpoints),
        max_steps=t.max_steps,
        per_device_train_batch_size=t.batch_size,
        per_device_eval_batch_size=t.eval_batch_size,
        gradient_accumulation_steps=t.grad_accum,
        learning_rate=t.learning_rate,
        warmup_steps=t.warmup_ratio,
        weight_decay=t.weight_decay,
        logging_steps=t.logging_steps,
        save_strategy="steps" if t.save_steps else "no",
        save_steps=t.save_steps or 500,
        bf16=t.bf16,
        gradient_checkpointing=False,
        use_cpu=not torch.cuda.is_available(),
        report_to="none",  # train.report_to goes through rlcw.tracking (JsonlMetricsCallback), checked
        seed=cfg.seed,
        logging_nan_inf_filter=False,  # a non-finite loss is logged as it is, and ends the run (measure.callbacks)
        disable_tqdm=False,
        save_only_model=False,
        deepspeed=t.deepspeed,
    )


def build_args(cfg: TrainRMConfig, run, has_eval: bool, bf16: bool = False):
    """TRL's RewardConfig; `bf16` turns the trainer's bf16 autocast on whatever train.bf16 says."""
    from trl import RewardConfig

    t = cfg.train
    args = common_args(cfg, run)
    args["bf16"] = args["bf16"] or bf16
    return RewardConfig(
        **args,
        eval_strategy="steps" if has_eval and t.eval_steps else "no",
        eval_steps=t.eval_steps or None,
        center_rewards_coefficient=cfg.rm.center_rewards_coefficient,
        max_length=None,
    )


def resume_point(resume: str, checkpoints: Path) -> str | None:
    """`train.resume` (false | true | auto, rlcw.runs.resume_checkpoint) -> the checkpoint to continue from."""
    last = resume_checkpoint(resume, checkpoints)
    if resume_mode(resume) != "false":
        print(
            f"[train-rm] resume: {'from ' + str(last) if last else 'no checkpoint in ' + str(checkpoints) + ', starting at step 0'}"
        )
    return str(last) if last else None


@dataclass
class BTParts:
    """What a Bradley-Terry run trains from, built as train_bt builds it (the joint ensemble path's inputs)."""

    tokenizer: Any
    spec: RMSpec
    model: Any  # the sequence-classification base, before LoRA
    rows: list[dict]  # TRL preference rows: chosen_ids, rejected_ids[, margin]
    eval_rows: list[dict]
    peft_config: Any  # None for full fine-tuning


def bt_parts(cfg: TrainRMConfig, train_pairs: list[dict], eval_pairs: list[dict]) -> BTParts:
    margins = build_margins(cfg, train_pairs)
    tokenizer = load_tokenizer(cfg.model.name, for_reward_model=True, padding_side="right")
    spec = build_spec(cfg, tokenizer)
    model = build_model(cfg, tokenizer)
    return BTParts(
        tokenizer,
        spec,
        model,
        build_bt_dataset(train_pairs, spec, tokenizer, margins).to_list(),
        build_bt_dataset(eval_pairs, spec, tokenizer).to_list() if eval_pairs else [],
        build_peft_config(cfg.lora, model.config.num_hidden_layers),
    )


def train_bt(
    cfg: TrainRMConfig,
    run,
    train_pairs: list[dict],
    eval_pairs: list[dict],
    tracker=None,
    member_seed: int | None = None,
):
    """`member_seed` (an ensemble member): the score head and LoRA are initialised from it, after the base model
    (and any resized embedding row) was built from the caller's RNG state, so members share their frozen trunk."""
    from transformers import set_seed

    from rlcw.rm.bt_trainer import BucketedRewardTrainer, cpu_bf16
    from rlcw.rm.odin_trainer import OdinRewardTrainer

    margins = build_margins(cfg, train_pairs)  # bad margins fail before any model loads
    start = resume_point(cfg.train.resume, run.checkpoints)
    tokenizer = load_tokenizer(cfg.model.name, for_reward_model=True, padding_side="right")
    spec = build_spec(cfg, tokenizer)
    model = build_model(cfg, tokenizer)
    if member_seed is not None:
        set_seed(member_seed)
        torch.nn.init.normal_(model.score.weight, std=model.config.initializer_range)
    odin = {"odin_weights": cfg.rm.odin} if cfg.rm.length_head else {}
    bucketed = not cfg.rm.length_head and BucketedRewardTrainer.max_padding is not None
    trainer = (OdinRewardTrainer if cfg.rm.length_head else BucketedRewardTrainer)(
        **odin,
        model=model,
        args=build_args(cfg, run, bool(eval_pairs), cpu_bf16(cfg.train.cpu_precision, cfg.train.bf16, bucketed)),
        processing_class=tokenizer,
        train_dataset=build_bt_dataset(train_pairs, spec, tokenizer, margins),
        eval_dataset=build_bt_dataset(eval_pairs, spec, tokenizer) if eval_pairs else None,
        peft_config=build_peft_config(cfg.lora, model.config.num_hidden_layers),
        callbacks=[JsonlMetricsCallback(run, tracker)],
    )
    if eval_pairs and cfg.train.eval_steps and start is None:
        trainer.evaluate()  # step-0 accuracy for the curve (logged by the trainer)
    quiet_progress(trainer, "train-rm")  # headline numbers per step; every key goes to metrics.jsonl
    trainer.train(resume_from_checkpoint=start)
    return trainer, tokenizer, spec


# --- generative RM ---


def genrm_rationales(cfg: TrainRMConfig, run, pairs: list[dict]) -> list[str] | None:
    """One rationale per training pair (chosen shown as A), or None without CoT; saved to <run>/rationales.jsonl."""
    if not cfg.rm.cot:
        return None
    texts = make_rationales(cfg.rm.rationales, pairs, seed=cfg.seed)
    write_rationales(run.path / "rationales.jsonl", pairs, texts)
    return texts


def train_genrm(cfg: TrainRMConfig, run, train_pairs: list[dict], eval_pairs: list[dict], tracker=None):
    from transformers import TrainingArguments

    from rlcw.rewards.genrm import GenRMScorer
    from rlcw.rm.genrm_trainer import GenRMTrainer

    start = resume_point(cfg.train.resume, run.checkpoints)
    tokenizer = load_tokenizer(cfg.model.name, for_reward_model=True, padding_side="right")
    spec = build_spec(cfg, tokenizer)
    rationales = genrm_rationales(cfg, run, train_pairs)
    model = load_causal_lm(cfg.model.name, cfg.model.dtype, merge_lora=True)
    if len(tokenizer) > model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(len(tokenizer))
    before = {}
    if cfg.train.eval_before and eval_pairs and start is None:  # a resumed run has its step-0 row already
        scorer = GenRMScorer(
            run.path, batch_size=cfg.train.eval_batch_size, model=model, tokenizer=tokenizer, spec=spec
        )
        before = evaluate_genrm(scorer, eval_pairs, prefix="before")
        run.log(0, before)
        if tracker is not None:
            tracker.log(before, 0)
    args = TrainingArguments(**common_args(cfg, run), eval_strategy="no", remove_unused_columns=False)
    trainer = GenRMTrainer(
        model,
        args,
        build_genrm_dataset(train_pairs, spec, tokenizer, rationales),
        tokenizer,
        peft_config=build_peft_config(cfg.lora, model.config.num_hidden_layers, "CAUSAL_LM"),
        callbacks=[JsonlMetricsCallback(run, tracker)],
    )
    quiet_progress(trainer, "train-rm")  # headline numbers per step; every key goes to metrics.jsonl
    trainer.train(resume_from_checkpoint=start)
    return trainer, tokenizer, spec, before


def main(cfg: TrainRMConfig) -> dict:
    validate(cfg)
    check_bf16(cfg.train.bf16)
    # not in validate: outcome validates before build-pairs writes them
    check_pairs_file(cfg.data.train_file, "data.train_file")
    check_pairs_file(cfg.data.eval_file, "data.eval_file", optional=True)
    with stage_run(cfg, "train-rm") as run, closing(stage_tracker(cfg, run, cfg.train.report_to)) as tracker:
        train_pairs = load_preferences(cfg.data.train_file, cfg.data.split, cfg.data.columns, cfg.data.max_train_pairs)
        eval_pairs = (
            load_preferences(cfg.data.eval_file, "test", cfg.data.columns, cfg.data.max_eval_pairs)
            if cfg.data.eval_file
            else []
        )
        if cfg.rm.type == "bt" and cfg.rm.ensemble.size > 1:
            one = SingleRM(train_bt, _report, bt_parts)
            return train_bt_ensemble(cfg, run, train_pairs, eval_pairs, tracker, one)
        t0 = time.time()
        before: dict = {}
        if cfg.rm.type == "bt":
            trainer, tokenizer, spec = train_bt(cfg, run, train_pairs, eval_pairs, tracker)
        else:
            trainer, tokenizer, spec, before = train_genrm(cfg, run, train_pairs, eval_pairs, tracker)
        metrics = {
            **before,
            "train/steps": float(trainer.state.global_step),
            "train/pairs": float(len(train_pairs)),
            "time/train_s": round(time.time() - t0, 1),
        }
        if not trainer.is_world_process_zero():
            return run.write_summary("completed", metrics)
        broken = nonfinite_parameters(trainer.model)
        if broken:
            raise RunFailed(
                f"training diverged: {len(broken)} weight tensor(s) hold nan or inf (first: {broken[0]})",
                where=str(run.path),
                hint=f"lower train.learning_rate (now {cfg.train.learning_rate:g}) and train again",
                metrics=metrics,
            )
        model_dir = save_rm(trainer.model, tokenizer, spec, run.path / "model")
        if eval_pairs:
            t1 = time.time()
            metrics.update(
                evaluate_pairs(spec, model_dir, eval_pairs, cfg.train.eval_batch_size, cfg.train.cpu_precision)
            )
            metrics["time/eval_s"] = round(time.time() - t1, 1)
            run.log(trainer.state.global_step, metrics)
            tracker.log(metrics, trainer.state.global_step)
        dead = dead_rm(metrics)
        if dead:
            run.write_report(_report(cfg, metrics, model_dir), f"FAILED: {dead}")
            raise RunFailed(
                f"the reward model is dead: {dead}",
                where=str(model_dir),
                hint=f"it ranks nothing; lower train.learning_rate (now {cfg.train.learning_rate:g}) and train again",
                metrics=metrics,
            )
        summary = run.write_summary("completed", metrics, {"model": model_dir, "metrics": run.path / "metrics.jsonl"})
        keys = {"held-out accuracy": "eval/accuracy", "length-only baseline": "eval/length_baseline_accuracy"}
        run.write_report(_report(cfg, metrics, model_dir), done_line(metrics, {**keys, "steps": "train/steps"}))
        return summary


def evaluate_pairs(
    spec: RMSpec, model_dir: Path, pairs: list[dict], batch_size: int, precision: str = "fp32"
) -> dict[str, float]:
    """Held-out metrics of the saved RM; a BT RM scores in `precision` (the training step's `cpu_precision`)."""
    if spec.type == "bt":
        return evaluate_rm(load_rm(model_dir, precision=precision), pairs)
    from rlcw.rewards.genrm import GenRMScorer

    return evaluate_genrm(GenRMScorer(model_dir, batch_size=batch_size), pairs)


def _report(cfg: TrainRMConfig, metrics: dict, model_dir) -> str:
    kind = (
        cfg.rm.type
        + ("-cot" if cfg.rm.type == "genrm" and cfg.rm.cot else "")
        + (" + length head" if cfg.rm.length_head else "")
    )
    lines = [f"# Reward model ({kind})", "", f"- base: `{cfg.model.name}`", f"- model: `{model_dir}`", ""]
    lines += ["| metric | value |", "|---|---|"] + [f"| {k} | {v:.4g} |" for k, v in metrics.items()]
    return "\n".join(lines) + "\n"
