"""The quickstart's GRPO sizes, read from configs/quickstart/cpu.yaml: the defaults of every bench that runs "at the
quickstart's sizes", so a changed config changes the benches with it.

    from quickstart_sizes import grpo_sizes, add_size_args   # scripts/ is on sys.path for its scripts
    add_size_args(parser, "--max-new-tokens")   # --batch --num-generations --max-new-tokens --temperature --top-layers
"""

from __future__ import annotations

import argparse
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart" / "cpu.yaml"


def grpo_sizes(path: Path = QUICKSTART) -> dict:
    """{batch, num_generations, completion_tokens, temperature, top_layers (None: every layer)} of the config's GRPO
    stage, defaults resolved as `rlcw quickstart` resolves them."""
    from rlcw.config import load_config
    from rlcw.recipes.quickstart import QuickstartConfig

    cfg = load_config(QuickstartConfig, str(path), [])
    train = cfg.grpo.train
    return {
        "batch": train.batch_size,
        "num_generations": train.num_generations,
        "completion_tokens": train.max_completion_length,
        "temperature": train.temperature,
        "top_layers": cfg.grpo.lora.top_layers,
    }


def top_layers(text: str) -> int | None:
    """`--top-layers`: a count, or `all` for a LoRA on every layer."""
    return None if text.lower() in ("all", "none", "null") else int(text)


def add_size_args(p: argparse.ArgumentParser, tokens_flag: str, lora: bool = True) -> None:
    """The size flags, each defaulting to the quickstart's value; `lora`: --top-layers too."""
    s = grpo_sizes()
    p.add_argument("--batch", type=int, default=s["batch"], help=f"completions a step (quickstart: {s['batch']})")
    p.add_argument("--num-generations", type=int, default=s["num_generations"], help="completions a prompt")
    p.add_argument(tokens_flag, type=int, default=s["completion_tokens"], help="completion tokens at most")
    p.add_argument("--temperature", type=float, default=s["temperature"])
    if not lora:
        return
    layers = "all" if s["top_layers"] is None else s["top_layers"]
    p.add_argument(
        "--top-layers", type=top_layers, default=s["top_layers"], help=f"LoRA on the top N layers, or all ({layers})"
    )
