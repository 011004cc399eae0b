"""`rlcw <command> [--config FILE] [key=value ...]`.

    rlcw --help                    list commands
    rlcw grpo --help               list keys with defaults
    rlcw grpo --config configs/grpo/cpu.yaml train.max_steps=20

Analysis commands (agreement, surface, summarize) take input paths as positional arguments
and `--json`. A user error prints one clear message and exits with status 2.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys

from rlcw.config import describe, load_config
from rlcw.errors import RlcwError

# command -> (module, config class, one-line help). A command whose module does not exist yet
# is listed as "not built yet". A config class of None means the module parses its own
# positional arguments: it defines `cli(argv: list[str]) -> int` (analysis commands).
COMMANDS: dict[str, tuple[str, str | None, str]] = {
    "prepare-model": (
        "rlcw.recipes.prepare_model",
        "PrepareModelConfig",
        "convert/cache the embedded model, check any model loads",
    ),
    "curate": ("rlcw.recipes.curate", "CurateConfig", "LitBench-style preference curation from upvoted stories"),
    "build-pairs": (
        "rlcw.recipes.build_pairs",
        "BuildPairsConfig",
        "preference pairs by controlled (length-matched) corruption",
    ),
    "train-rm": ("rlcw.recipes.train_rm", "TrainRMConfig", "train a reward model (rm.type=bt|genrm)"),
    "eval-rm": ("rlcw.recipes.eval_rm", "EvalRMConfig", "evaluate a BT RM, GenRM or judge on held-out pairs"),
    "serve-rm": ("rlcw.recipes.serve_rm", "ServeRMConfig", "serve a reward model over HTTP for RL jobs"),
    "grpo": ("rlcw.recipes.grpo", "GRPORecipeConfig", "GRPO with learned rewards + length control (TRL GRPOTrainer)"),
    "ppo": ("rlcw.recipes.ppo", "PPORecipeConfig", "PPO with a learned reward (policy + value model, GAE)"),
    "rloo": ("rlcw.recipes.rloo", "RLOORecipeConfig", "RLOO with learned rewards (TRL RLOOTrainer)"),
    "dpo": ("rlcw.recipes.dpo", "DPORecipeConfig", "offline DPO on preference pairs (TRL DPOTrainer)"),
    "generate": ("rlcw.recipes.generate", "GenerateConfig", "sample stories for prompts into story records"),
    "judge": ("rlcw.recipes.judge", "JudgeConfig", "LLM judges (Agents' Room, LitBench, TTCW) over story files"),
    "agreement": ("rlcw.recipes.agreement", None, "agreement of judge scores with human scores (CSV)"),
    "surface": ("rlcw.recipes.surface", None, "surface metrics of story files (Agents' Room Table 2)"),
    "study-export": (
        "rlcw.recipes.study_export",
        "StudyExportConfig",
        "blinded human-study packets (HTML, CSV, Label Studio)",
    ),
    "study-ingest": (
        "rlcw.recipes.study_ingest",
        "StudyIngestConfig",
        "validate, unblind and analyse human-study answers",
    ),
    "train-agents": (
        "rlcw.recipes.train_agents",
        "TrainAgentsConfig",
        "synthetic Agents' Room data and one LoRA per agent",
    ),
    "sweep": ("rlcw.recipes.sweep", None, "run override grids locally or as a Slurm job array"),
    "summarize": ("rlcw.recipes.summarize", None, "collect runs' summary.json into one table"),
    "export": ("rlcw.recipes.export", "ExportConfig", "merge LoRA, save for serving, check logits"),
    "plan": ("rlcw.recipes.plan", None, "check a training config for a world size: batch geometry, memory per GPU"),
    "quickstart": (
        "rlcw.recipes.quickstart",
        "QuickstartConfig",
        "the whole loop on the embedded model, with a report",
    ),
    "outcome": (
        "rlcw.recipes.outcome",
        "OutcomeConfig",
        "outcome study: proxy vs gold reward over RL runs and baselines, with a report",
    ),
}


def is_built(name: str) -> bool:
    return importlib.util.find_spec(COMMANDS[name][0]) is not None


def planned() -> list[str]:
    """Commands reserved by the contract whose module does not exist yet."""
    return [name for name in COMMANDS if not is_built(name)]


def _usage() -> str:
    width = max(map(len, COMMANDS))
    todo = planned()
    lines = ["usage: rlcw <command> [--config FILE] [key=value ...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, _, text) in COMMANDS.items() if name not in todo]
    if todo:
        lines += ["", f"planned (not built yet): {', '.join(todo)}"]
    lines += ["`rlcw <command> --help` lists its keys and defaults."]
    return "\n".join(lines)


def _split_args(args: list[str]) -> tuple[str | None, list[str]]:
    config, overrides, i = None, [], 0
    while i < len(args):
        arg = args[i]
        if arg == "--config":
            if i + 1 >= len(args):
                raise RlcwError("--config needs a file path")
            config, i = args[i + 1], i + 2
            continue
        if arg.startswith("--config="):
            config = arg.split("=", 1)[1]
        elif arg.startswith("-"):
            raise RlcwError(
                f"unknown option '{arg}'", hint="options: --config FILE, --help; everything else is key=value"
            )
        else:
            overrides.append(arg)
        i += 1
    return config, overrides


def run(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        import difflib

        close = difflib.get_close_matches(name, list(COMMANDS), n=2)
        raise RlcwError(
            f"unknown command '{name}'",
            hint=f"did you mean {' or '.join(close)}?" if close else "`rlcw --help` lists commands",
        )
    if not is_built(name):
        built = [n for n in COMMANDS if is_built(n)]
        raise RlcwError(
            f"'rlcw {name}' is not built yet", hint="see the project's issues; built commands: " + ", ".join(built)
        )
    module_name, cls_name, text = COMMANDS[name]
    module = importlib.import_module(module_name)
    if cls_name is None:
        return int(module.cli(rest) or 0)
    cls = getattr(module, cls_name)
    if any(a in ("-h", "--help") for a in rest):
        print(
            f"rlcw {name}: {text}\n\n{(module.__doc__ or '').strip()}\n\nkeys (key: type = default):\n{describe(cls)}"
        )
        return 0
    config, overrides = _split_args(rest)
    cfg = load_config(cls, config, overrides)
    summary = module.main(cfg)
    if isinstance(summary, dict):
        print(
            json.dumps(
                {k: summary.get(k) for k in ("command", "status", "metrics", "artifacts")}, indent=2, default=str
            )
        )
    return 0


def main(argv: list[str] | None = None) -> None:
    try:
        code = run(sys.argv[1:] if argv is None else argv)
    except RlcwError as exc:
        print(f"rlcw: error: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
