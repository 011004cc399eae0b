"""`rlcw <command> [--config FILE] [key=value ...]`.

    rlcw --help                    list commands
    rlcw grpo --help               list keys with defaults
    rlcw grpo --config configs/grpo/cpu.yaml train.max_steps=20

Analysis commands (agreement, surface, summarize) take input paths as positional arguments
and `--json`. A user error prints one clear message and exits with status 2.
"""

from __future__ import annotations

import importlib
import json
import sys

from rlcw.config import describe, load_config
from rlcw.errors import RlcwError

# command -> (module, config class, one-line help). Commands of later issues keep their names:
# curate, eval-rm, serve-rm, ppo, judge, agreement, surface, study-export, study-ingest,
# train-agents, sweep, summarize.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "prepare-model": ("rlcw.recipes.prepare_model", "PrepareModelConfig", "convert/cache the embedded model, check any model loads"),
    "build-pairs": ("rlcw.recipes.build_pairs", "BuildPairsConfig", "preference pairs by controlled (length-matched) corruption"),
    "train-rm": ("rlcw.recipes.train_rm", "TrainRMConfig", "train a reward model (rm.type=bt)"),
    "grpo": ("rlcw.recipes.grpo", "GRPORecipeConfig", "GRPO with a learned reward + length term (TRL GRPOTrainer, LoRA)"),
    "generate": ("rlcw.recipes.generate", "GenerateConfig", "sample stories for prompts into story records"),
    "export": ("rlcw.recipes.export", "ExportConfig", "merge LoRA, save for serving, check logits"),
    "quickstart": ("rlcw.recipes.quickstart", "QuickstartConfig", "the whole loop on the embedded model, with a report"),
}
PLANNED = ("curate", "eval-rm", "serve-rm", "ppo", "judge", "agreement", "surface", "study-export", "study-ingest", "train-agents", "sweep", "summarize")


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: rlcw <command> [--config FILE] [key=value ...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, _, text) in COMMANDS.items()]
    lines += ["", f"planned (not built yet): {', '.join(PLANNED)}", "`rlcw <command> --help` lists its keys and defaults."]
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
            raise RlcwError(f"unknown option '{arg}'", hint="options: --config FILE, --help; everything else is key=value")
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
        if name in PLANNED:
            raise RlcwError(f"'rlcw {name}' is not built yet", hint="see the project's issues; built commands: " + ", ".join(COMMANDS))
        import difflib

        close = difflib.get_close_matches(name, list(COMMANDS) + list(PLANNED), n=2)
        raise RlcwError(f"unknown command '{name}'", hint=f"did you mean {' or '.join(close)}?" if close else "`rlcw --help` lists commands")
    module_name, cls_name, text = COMMANDS[name]
    module = importlib.import_module(module_name)
    cls = getattr(module, cls_name)
    if any(a in ("-h", "--help") for a in rest):
        print(f"rlcw {name}: {text}\n\n{(module.__doc__ or '').strip()}\n\nkeys (key: type = default):\n{describe(cls)}")
        return 0
    config, overrides = _split_args(rest)
    cfg = load_config(cls, config, overrides)
    summary = module.main(cfg)
    if isinstance(summary, dict):
        print(json.dumps({k: summary.get(k) for k in ("command", "status", "metrics", "artifacts")}, indent=2, default=str))
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
