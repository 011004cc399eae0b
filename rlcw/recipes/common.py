"""Config sections every recipe shares, and the start/finish of a run.

Sections (`model.*`, `lora.*`) are plain dataclasses; recipes translate them into library
arguments in their own builder functions.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from rlcw.config import to_yaml
from rlcw.models import EMBEDDED_ALIAS
from rlcw.runs import RunDir

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


def set_seed(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def tensorboard_dir(run: RunDir) -> str:
    """Point transformers' TensorBoard callback at `<run>/tensorboard` (it reads the env var)."""
    path = str(run.path / "tensorboard")
    os.environ["TENSORBOARD_LOGGING_DIR"] = path
    return path


@contextmanager
def stage_run(cfg, command: str) -> Iterator[RunDir]:
    """Create the run folder (config + git SHA first), seed everything, mark failures in summary.json.

    Nothing is written before the `with` block is entered (recipes validate their config first). A
    folder that holds another run is refused unless `train.resume` is true|auto or `overwrite=true`
    (`rlcw.runs.prepare_run_folder`).
    """
    resume = getattr(getattr(cfg, "train", None), "resume", False)
    overwrite = bool(getattr(cfg, "overwrite", False))
    run = RunDir.create(cfg.output_dir, cfg.run_name, command, to_yaml(cfg), resume=resume, overwrite=overwrite)
    set_seed(cfg.seed)
    try:
        yield run
    except BaseException as exc:
        run.write_summary("failed", error=f"{type(exc).__name__}: {exc}")
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
