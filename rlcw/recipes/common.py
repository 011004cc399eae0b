"""Config sections every recipe shares, the RL stages' prompt and scorer helpers, and the start/finish of a run.

Sections (`model.*`, `lora.*`, and for grpo, ppo and dpo `data.*` prompts, `reward.*`, `eval.*`,
`monitor.*`) are plain dataclasses; recipes translate them into library arguments in their own
builder functions. One meaning per key: held-out prompts are `eval.prompts` / `eval.split`, the
RM is `reward.rm_path` (dpo, which has no reward: `eval.evaluators.rm.rm_path`), resuming is
`train.resume: false | true | auto` (rlcw.runs.resume_checkpoint), trackers are `train.report_to`
(`stage_tracker`; TRL/HF's own `report_to` is always "none"), mixed precision is `train.bf16` (`check_bf16`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcw.config import to_dict, to_yaml
from rlcw.data.prompts import COLUMN_OPTIONS, find_overlap, load_prompt_column, load_prompts, mix_sources, source_rows
from rlcw.errors import RlcwError
from rlcw.generation import chat_messages
from rlcw.io import read_table
from rlcw.models import EMBEDDED_ALIAS
from rlcw.rewards.length import range_fits_cap
from rlcw.runs import RunDir, check_resume_target, is_main_process, remove_unused_run_folder
from rlcw.tracking import Tracker, parse_report_to

# Linear layers of Llama/Qwen/Mistral-style decoder blocks (what "all-linear" means there).
DECODER_LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

DEFAULT_SYSTEM_PROMPT = (
    "You are a skilled fiction writer. Write only the story the user asks for: no title, no preamble, "
    "no notes. Respect the requested length."
)


@dataclass
class ModelConfig:
    """The model a stage loads: alias, hub id, local folder, or an rlcw LoRA checkpoint."""

    name: str = EMBEDDED_ALIAS
    dtype: str = "float32"
    system_prompt: str = DEFAULT_SYSTEM_PROMPT  # sent as the system message for generation
    chat_template: str | None = None  # path to a Jinja template file; None = the tokenizer's own


@dataclass
class LoraSection:
    enabled: bool = True
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: str = "all-linear"  # or comma-separated module names, e.g. "q_proj,v_proj"
    top_layers: int | None = None  # adapt only the top N transformer layers: backprop stops early (much faster on CPU)


@dataclass
class MonitorSection:
    """Reward-hacking monitors of the RL stages (`rlcw.rl.monitors`); grpo and ppo share these keys."""

    enabled: bool = True
    ngram: int = 3
    warn: dict[str, float] = field(default_factory=dict)  # max_<stat> / min_<stat> -> threshold
    stop: dict[str, float] = field(default_factory=dict)
    patience: int = 2  # consecutive logged steps a stop rule must break
    min_steps: int = 0


@dataclass
class PromptSection:
    """`data.*` of the online RL stages (grpo, ppo): training prompts, mixed from sources and fitted to the cap."""

    prompts: str = "bundled"  # "bundled" or a jsonl/csv/parquet file of prompt rows (default for every source)
    train_split: str | None = "train"
    max_train_prompts: int | None = None  # size of the (mixed) training set; None = every row once
    # name -> {prompts: file (default data.prompts), style: tmas|wp (keep only that style), weight: float, split};
    # or {style: column, prompts: jsonl/csv/parquet/HF dataset, column: prompt, id_column, hf_split, weight}: any
    # prompt column, plain text or a conversation (used as the chat prompt as it is, system turn included)
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    fit_to_cap: str = "warn"  # filter | error | warn | ignore: prompts whose max_words cannot fit the completion cap
    tokens_per_word: float = 1.4
    no_overlap_with: list[str] = field(default_factory=list)  # files (RM pairs, other prompts) RL must not train on


@dataclass
class RewardSection:
    """`reward.*` of grpo and ppo: weighted reward functions (rlcw.rewards.factory)."""

    rm_path: str = "runs/train_rm/model"  # default RM of bt/genrm specs, the `rm` evaluator and ppo's value.init=rm
    rm_batch_size: int = 16
    # name -> spec ({type: bt|genrm|remote|length_range|overlong, weight, ...options}); weight 0 drops one
    specs: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "rm": {"type": "bt", "weight": 1.0},
            "length_range": {"type": "length_range", "weight": 1.0, "clip": 2.0},
        }
    )


@dataclass
class EvalSection:
    """`eval.*` of grpo, ppo and dpo: held-out prompts sampled every `every_steps` and scored by the evaluators."""

    every_steps: int = 10  # 0 disables periodic evaluation
    prompts: str | None = None  # held-out prompt file; None = data.prompts (grpo, ppo) or the bundled prompts (dpo)
    split: str | None = "eval"
    column: str | None = None  # read eval.prompts as any table/HF dataset with this prompt column (split ignored)
    num_prompts: int = 8
    max_new_tokens: int = 96
    temperature: float = 0.8
    batch_size: int = 8
    evaluators: dict[str, dict[str, Any]] = field(default_factory=lambda: {"rm": {}, "length": {}, "repetition": {}})


def eval_sampler(e: EvalSection, tokenizer, rows: list[dict], *, system_prompt: str, run_name: str, seed: int):
    """`sample(model, step)` of the held-out evaluation of grpo, ppo and dpo (one plain story per prompt)."""
    from rlcw.rl.periodic import story_sampler  # torch + transformers: not at import of every recipe

    return story_sampler(
        tokenizer,
        rows,
        system_prompt=system_prompt,
        run_name=run_name,
        max_new_tokens=e.max_new_tokens,
        temperature=e.temperature,
        batch_size=e.batch_size,
        seed=seed,
    )


FIT_MODES = ("filter", "error", "warn", "ignore")


def fit_to_cap(rows: list[dict], cap: int, mode: str, tokens_per_word: float, what: str) -> list[dict]:
    """Prompts whose stated max_words `cap` new tokens can hold: `mode` filter drops the rest, error
    raises, warn prints and keeps every row, ignore keeps every row."""
    bad = [r for r in rows if not range_fits_cap(r.get("max_words"), cap, tokens_per_word)]
    if not bad or mode == "ignore":
        return rows
    msg = (
        f"{len(bad)} of {len(rows)} {what} prompts ask for more words than {cap} tokens hold "
        f"(e.g. '{bad[0]['id']}': up to {bad[0]['max_words']} words at {tokens_per_word} tokens/word)"
    )
    if mode == "error":
        raise RlcwError(
            msg,
            where="data.fit_to_cap",
            hint="raise the completion cap, pick shorter prompts, or data.fit_to_cap=filter",
        )
    if mode == "warn":
        print(f"[rlcw] warning: {msg}; every such completion gets the same length penalty", flush=True)
        return rows
    kept = [r for r in rows if r not in bad]
    if not kept:
        raise RlcwError(
            msg + ": none left", where="data.fit_to_cap", hint="raise the completion cap or use shorter prompts"
        )
    return kept


def train_prompts(data: PromptSection, cap: int, seed: int) -> list[dict]:
    """The training prompt rows (`source` = the data.sources name), mixed by weight and fitted to `cap` tokens."""
    if not data.sources:
        rows = fit_to_cap(
            load_prompts(data.prompts, data.train_split), cap, data.fit_to_cap, data.tokens_per_word, "training"
        )
        return rows[: data.max_train_prompts or None]
    pools, weights = {}, {}
    for name, spec in data.sources.items():
        check_source(name, spec)
        rows = source_rows(spec, data.prompts, spec.get("split", data.train_split))
        rows = fit_to_cap(rows, cap, data.fit_to_cap, data.tokens_per_word, f"'{name}'")
        if not rows:
            raise RlcwError(f"no prompts of style '{spec.get('style')}'", where=f"data.sources.{name}")
        pools[name] = [dict(r, source=name) for r in rows]
        weights[name] = float(spec.get("weight", 1.0))
    total = data.max_train_prompts or sum(len(p) for p in pools.values())
    return mix_sources(pools, weights, total, seed)


def held_out_prompts(data: PromptSection, ev: EvalSection, cap: int) -> list[dict]:
    """Every held-out prompt row (`eval.prompts` at `eval.split`), fitted to `cap` tokens as data.fit_to_cap says."""
    return fit_to_cap(eval_prompt_rows(ev, data.prompts), cap, data.fit_to_cap, data.tokens_per_word, "held-out")


def eval_prompt_rows(ev: EvalSection, default: str) -> list[dict]:
    """Held-out prompt rows: rlcw prompt rows of `eval.prompts` (or `default`) at `eval.split`, or with
    `eval.column` that column of any table or HF dataset (rlcw.data.prompts.load_prompt_column)."""
    if ev.column:
        return load_prompt_column(ev.prompts or default, column=ev.column)
    return load_prompts(ev.prompts or default, ev.split)


def prompt_messages(row: dict, system_prompt: str | None) -> list[dict]:
    """The chat prompt of a prompt row: its own conversation (a conversational `style: column` cell) as it
    is, else `model.system_prompt` + the prompt as the user turn."""
    return row.get("messages") or chat_messages(system_prompt, row["prompt"])


def check_source(name: str, spec: dict) -> None:
    """One `data.sources.<name>` entry's options (errors name `data.sources.<name>`); reads no file."""
    where = f"data.sources.{name}"
    unknown = sorted(set(spec) - set(COLUMN_OPTIONS))
    if unknown:
        raise RlcwError(f"unknown option '{unknown[0]}'", where=where, hint=f"options: {', '.join(COLUMN_OPTIONS)}")
    column_only = sorted(set(spec) & {"column", "id_column", "hf_split"})
    if spec.get("style") == "column":
        if not spec.get("prompts"):
            raise RlcwError(
                "style: column needs `prompts`", where=where, hint="a jsonl/csv/parquet file or a dataset id"
            )
    elif column_only:
        raise RlcwError(
            f"'{column_only[0]}' applies to style: column only", where=where, hint="add style: column, or drop it"
        )


def check_overlap(train_rows: list[dict], held_out: list[dict], files: list[str]) -> None:
    """Error naming the first overlap of training prompts with held-out prompts or RM data files."""
    others = {"held-out prompts": held_out}
    for path in files:
        others[path] = [
            {"id": f"line {line}", "prompt": row["prompt"]}
            for line, row in read_table(path)
            if isinstance(row.get("prompt"), str)
        ]
    hits = find_overlap(train_rows, others)
    if hits:
        tid, name, oid = hits[0]
        raise RlcwError(
            f"RL training prompt '{tid}' also appears in {name} ({oid}); {len(hits)} overlapping prompt(s) in all",
            where="data",
            hint="keep RL prompts apart from evaluation prompts and RM training data",
        )


def validate_rl_sections(data: PromptSection | None, monitor: MonitorSection | None, evaluators: dict) -> None:
    """Config checks of `data.*`, `monitor.*` and `eval.evaluators` that read no file and load no model."""
    from rlcw.rl.evaluation import EVALUATORS
    from rlcw.rl.monitors import validate_rules

    if data is not None and data.fit_to_cap not in FIT_MODES:
        raise RlcwError(
            f"data.fit_to_cap={data.fit_to_cap!r} is not a mode",
            where="data.fit_to_cap",
            hint=f"one of {', '.join(FIT_MODES)}",
        )
    for name, spec in (data.sources if data is not None else {}).items():
        check_source(name, spec)
    if monitor is not None:
        validate_rules(monitor.warn, "monitor.warn")
        validate_rules(monitor.stop, "monitor.stop")
    for name, options in (evaluators or {}).items():
        if name not in EVALUATORS and not (options or {}).get("factory"):
            raise RlcwError(
                f"unknown evaluator '{name}'",
                where=f"eval.evaluators.{name}",
                hint=f"known: {', '.join(EVALUATORS)}; or give options.factory='module:function'",
            )


def rm_scorer(funcs: list, rm_path: str):
    """The already loaded BT scorer of `rm_path` among the reward functions (the `rm` evaluator reuses it), or None."""
    from rlcw.rewards.bt import BTScorer

    return next((f for f in funcs if isinstance(f, BTScorer) and str(f.rm_dir) == str(Path(rm_path))), None)


def set_seed(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def validate_train_keys(report_to: list[str] | str, bf16: bool) -> None:
    """`train.report_to` names known trackers (an RlcwError listing them otherwise) and `train.bf16` is a bool."""
    parse_report_to(report_to)
    if not isinstance(bf16, bool):
        raise RlcwError(f"train.bf16 must be true or false, got {bf16!r}", where="train.bf16")


def check_bf16(bf16: bool) -> None:
    """This machine against `train.bf16=true` (run in main, not validate: `rlcw plan` checks GPU configs on CPU boxes).

    A CUDA device without bf16 is an error (the HF trainer would refuse later, after loading the model); without
    CUDA it is a warning: the HF trainer autocasts to bf16 on CPU, which runs but was slower than fp32 on this
    project's CPUs (FIELD-NOTES), and is emulated on CPUs without AVX512-BF16/AMX."""
    import torch

    if not bf16:
        return
    if torch.cuda.is_available():
        if not torch.cuda.is_bf16_supported():
            raise RlcwError(
                f"train.bf16=true but {torch.cuda.get_device_name()} has no bf16 support",
                where="train.bf16",
                hint="train.bf16=false (fp32), or a GPU with bf16 (Ampere or newer)",
            )
        return
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    print(
        f"[rlcw] warning: train.bf16=true without a GPU: bf16 autocast on a CPU {'with' if native else 'WITHOUT'} "
        "native bf16; usually slower than fp32 on CPU (train.bf16=false)",
        flush=True,
    )


def stage_tracker(cfg, run: RunDir, report_to: list[str] | str) -> Tracker:
    """The run's trackers (`train.report_to`, rank 0 only; other ranks get a no-op one), sent the resolved config."""
    names = report_to if is_main_process() else "none"
    return Tracker(names, run.path, run_name=run.path.name, config=to_dict(cfg))


@contextmanager
def stage_run(cfg, command: str) -> Iterator[RunDir]:
    """Create the run folder (config + git SHA first), seed everything, mark failures in summary.json.

    Nothing is written before the `with` block is entered (recipes validate their config first;
    `train.resume=true` without a checkpoint is refused here). A folder that holds another run is refused
    unless `train.resume` is true|auto or `overwrite=true` (`rlcw.runs.prepare_run_folder`). A user error
    (RlcwError) raised inside the block before the run produced anything removes the folder it created.
    """
    resume = getattr(getattr(cfg, "train", None), "resume", False)
    overwrite = bool(getattr(cfg, "overwrite", False))
    path = Path(cfg.output_dir) / cfg.run_name
    check_resume_target(resume, path)
    fresh = not path.exists()
    run = RunDir.create(cfg.output_dir, cfg.run_name, command, to_yaml(cfg), resume=resume, overwrite=overwrite)
    set_seed(cfg.seed)
    try:
        yield run
    except BaseException as exc:
        run.write_summary("failed", error=f"{type(exc).__name__}: {exc}")
        # a user error found after loading (a chat template, a server's reply) leaves no half-written folder
        if isinstance(exc, RlcwError) and fresh and remove_unused_run_folder(run.path):
            print(f"[rlcw] {command}: stopped before producing anything; removed {run.path}", flush=True)
        raise


def lora_config(lora: LoraSection, task_type, num_layers: int):
    """A peft LoraConfig from the `lora.*` section (`top_layers` -> layers_to_transform)."""
    from peft import LoraConfig

    layers = None
    modules: str | list[str] = lora.target_modules
    if "," in modules:
        modules = [m.strip() for m in modules.split(",") if m.strip()]
    if lora.top_layers:
        layers = list(range(max(0, num_layers - lora.top_layers), num_layers))
        if modules == "all-linear":  # peft needs names with layers_to_transform
            modules = list(DECODER_LINEAR_MODULES)
    return LoraConfig(
        task_type=task_type,
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=modules,
        layers_to_transform=layers,
    )
