"""`rlcw <command> [--config FILE] [key=value ...]`.

    rlcw --help                    list commands
    rlcw grpo --help               list keys with defaults and comments (reward types, monitor keys, ...)
    rlcw configs grpo              the shipped configs of a command; `rlcw configs --copy grpo/cpu mine.yaml`
    rlcw grpo --config configs/grpo/cpu.yaml train.max_steps=20
    rlcw grpo --check --config configs/grpo/cpu.yaml   # every check a run makes before its folder; runs nothing
    rlcw env                       # versions, CPU, cache: paste it into a bug report
    rlcw --version

Analysis commands (agreement, surface, summarize) take input paths as positional arguments
and `--json`. A user error prints one clear message and exits with status 2, before any run folder is
written; config keys are checked against the dataclass source before the recipe's heavy imports. A finished
command prints its report's path and first line; one whose quality gate failed (`gates.exit_on_fail`) exits 1, and so
does a run whose loss or reward became non-finite or whose reward model came out dead (`rlcw: failed: ...`).
`--key value` (TRL style) is read as the one config key ending in `key` (aliases: lr, steps, bs).
Ctrl-C or SIGTERM (Slurm's) stops a command with one line, marks its summary.json `interrupted`, prints the
command that resumes it where the recipe has `train.resume`, and exits 130 (SIGINT) or 143 (SIGTERM).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import sys
from pathlib import Path

from rlcw import __version__
from rlcw.argv import split_args
from rlcw.commands import COMMANDS
from rlcw.config import check_keys_early, flat_keys, load_config
from rlcw.config_help import describe
from rlcw.config_static import (
    static_constant,
    static_doc,
    static_help,
    static_keys,
    static_leaves,
    static_retired_keys,
    static_signature,
)
from rlcw.errors import RlcwError, RunFailed
from rlcw.interrupts import exit_code, interrupted_lines, terminate_as_interrupt
from rlcw.logs import quiet_libraries


def dict_sections() -> dict[str, str]:
    """Docs of the dict-valued keys, by leaf name (`reward.specs`, `monitor.warn|stop`, `data.sources`,
    `eval.evaluators`), read from the modules that own each schema; the monitor statistics and the reward
    constructors' signatures are read from source (their modules import torch and TRL)."""
    from rlcw.data.prompts import COLUMN_OPTIONS
    from rlcw.measure.evaluation import EVALUATORS

    stats = static_constant("rlcw.measure.monitors", "STATS")
    if stats is None:
        from rlcw.measure.monitors import STATS as stats
    rules = (
        f"max_<stat> | min_<stat> -> threshold; stats: {', '.join(stats)}\n"
        "e.g. monitor.warn.max_rep_intra=0.15 monitor.stop.min_distinct_batch=0.3"
    )
    return {
        "specs": reward_types_doc(),
        "warn": rules + "\n(warn: an [rlcw] alert line; stop: ends the run after `patience` logged steps)",
        "stop": rules,
        "sources": f"name -> {{{', '.join(COLUMN_OPTIONS)}}}\n"
        "style: tmas | wp (the bundled prompts of that style) | column (any table or HF dataset column)",
        "evaluators": f"name -> options; names: {', '.join(EVALUATORS)}; or options.factory='module:function'",
    }


def reward_types_doc() -> str:
    """`rlcw.rewards.factory.describe_types()` with each constructor's signature read from source when every one
    can be (no torch), else from the imported constructors."""
    from rlcw.rewards import factory

    signatures = {k: static_signature(*target.split(":")) for k, (target, _) in factory.REWARD_TYPES.items()}
    if any(sig is None for sig in signatures.values()) or not hasattr(factory, "_constructor"):
        return factory.describe_types()

    def from_source(kind: str):
        def constructor(*args, **kwargs):
            raise TypeError("a signature read from source")

        constructor.__signature__ = signatures[kind]
        return constructor

    real = factory._constructor
    factory._constructor = from_source
    try:
        return factory.describe_types()
    finally:
        factory._constructor = real


def is_built(name: str) -> bool:
    return importlib.util.find_spec(COMMANDS[name][0]) is not None


def planned() -> list[str]:
    """Commands reserved by the contract whose module does not exist yet."""
    return [name for name in COMMANDS if not is_built(name)]


def _usage() -> str:
    width = max(map(len, COMMANDS))
    todo = planned()
    lines = ["usage: rlcw <command> [--config FILE] [--check] [key=value ...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, _, text) in COMMANDS.items() if name not in todo]
    if todo:
        lines += ["", f"planned (not built yet): {', '.join(todo)}"]
    lines += [
        "`rlcw <command> --help` lists its keys and defaults; `--check` checks a config without running it;",
        "`rlcw --version` prints the version.",
    ]
    return "\n".join(lines)


def run(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("--version", "-V"):
        print(f"rlcw {__version__}")
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
    if any(a in ("-h", "--help") for a in rest):
        return _help(name, rest)
    if cls_name is None and "--check" in rest:
        raise RlcwError(f"'rlcw {name}' has no --check", hint="--check is for commands that take a config")
    # --dry-run is --check for a command with a config; a command without one reads its own (`rlcw sweep --dry-run`)
    check = cls_name is not None and any(a in CHECK_FLAGS for a in rest)
    rest = [a for a in rest if a not in CHECK_FLAGS] if cls_name is not None else rest
    static = static_keys(module_name, cls_name) if cls_name else None
    split = None
    if static is not None:  # key, type and bound errors answer before torch and TRL are imported
        split = split_args(rest, [k for k, section in static.items() if not section])
        leaves, retired = static_leaves(module_name, cls_name), static_retired_keys(module_name, cls_name)
        check_keys_early(static, *split, leaves=leaves, retired=retired)
    quiet_libraries()  # before the libraries load: their set-up chatter stays out of the log
    module = importlib.import_module(module_name)
    quiet_libraries()  # torch is loaded now: DeepSpeed's accelerator can be named
    if cls_name is None:
        return int(module.cli(rest) or 0)
    cls = getattr(module, cls_name)
    config, overrides = split or split_args(rest, list(flat_keys(cls)))
    cfg = load_config(cls, config, overrides)
    if check:
        return _check(name, module, cfg)
    try:
        summary = module.main(cfg)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM through `terminate_as_interrupt`
        print(interrupted_lines(name, rest, cfg, exc), file=sys.stderr, flush=True)
        return exit_code(exc)
    if not isinstance(summary, dict):
        return 0
    print(ending(summary, Path(cfg.output_dir) / cfg.run_name if hasattr(cfg, "output_dir") else None), flush=True)
    gates = getattr(cfg, "gates", None)
    return 1 if summary.get("status") == "failed" and getattr(gates, "exit_on_fail", False) else 0


CHECK_FLAGS = ("--check", "--dry-run")


def _help(name: str, rest: list[str]) -> int:
    """`rlcw <command> --help`: read from the recipe's source when it can be (no torch), else after the import."""
    module_name, cls_name, text = COMMANDS[name]
    keys = static_help(module_name, cls_name, dict_sections()) if cls_name else None
    doc = static_doc(module_name)
    if keys is None or doc is None:
        quiet_libraries()
        module = importlib.import_module(module_name)
        if cls_name is None:
            return int(module.cli(rest) or 0)
        keys, doc = describe(getattr(module, cls_name), dict_sections()), module.__doc__
    print(f"rlcw {name}: {text}\n\n{(doc or '').strip()}\n\nkeys (key: type = default  # comment):\n{keys}")
    return 0


def _check(name: str, module, cfg) -> int:
    """`--check`: the recipe's main up to the point where it would write its run folder (every config, file and
    machine check of a real run), then "config OK" and, for a plannable recipe, its batch per step."""
    from rlcw.recipes.common.run import ConfigChecked, check_only

    try:
        with check_only():
            module.main(cfg)
    except ConfigChecked as done:
        print(f"[rlcw] {name}: config OK (nothing was run or written; the run folder would be {done.path})")
        line = _plan_line(name, cfg)
        if line:
            print(f"[rlcw] {name}: {line}")
        return 0
    raise RlcwError(f"rlcw {name} --check ran to the end without reaching its run folder", hint="a bug: report it")


def _plan_line(name: str, cfg) -> str | None:
    import os

    from rlcw.recipes import plan

    if name not in plan.PLANNABLE:
        return None
    try:
        return plan.step_line(name, cfg, int(os.environ.get("WORLD_SIZE", "1")))
    except RlcwError:
        return None


def ending(summary: dict, run_dir: Path | None) -> str:
    """What a finished command prints: its status and folder, the report's path and first line (else a few
    headline metrics); the full summary is in <run>/summary.json."""
    lines = [f"[rlcw] {summary.get('command')}: {summary.get('status')}" + (f" -> {run_dir}" if run_dir else "")]
    report = run_dir / "report.md" if run_dir else None
    if report is not None and report.is_file():
        first = report.read_text(encoding="utf-8").split("\n", 1)[0].lstrip("# ").strip()
        lines.append(f"[rlcw] report: {report}")
        lines.append(f"[rlcw] {first}")
    else:
        metrics = summary.get("metrics") or {}
        head = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in list(metrics.items())[:6])
        lines.append(f"[rlcw] {head or 'no metrics'} (all: {run_dir / 'summary.json' if run_dir else 'summary.json'})")
    if summary.get("error"):
        lines.append(f"[rlcw] error: {summary['error']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """The `rlcw` entry point: user errors exit 2 with one message, failed runs (`RunFailed`) 1; SIGTERM is read as an interrupt (Slurm's
    way to stop a job), so both signals end a run the same way (`interrupted_lines`)."""
    import threading

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, terminate_as_interrupt) if main_thread else None
    try:
        code = run(sys.argv[1:] if argv is None else argv)
    except RunFailed as exc:  # it ran, but diverged or left a dead model: summary.json says failed
        print(f"rlcw: failed: {exc}", file=sys.stderr)
        code = 1
    except RlcwError as exc:
        print(f"rlcw: error: {exc}", file=sys.stderr)
        code = 2
    except BrokenPipeError:  # `rlcw grpo --help | head`: the reader stopped reading; no traceback, as `cat | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit flush must not raise again
        code = 128 + signal.SIGPIPE
    except KeyboardInterrupt as exc:  # outside a command's main: while loading, or a command without a run
        what = signal.Signals(int(getattr(exc, "signum", signal.SIGINT))).name
        print(f"rlcw: interrupted ({what})", file=sys.stderr)
        code = exit_code(exc)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    sys.exit(code)


if __name__ == "__main__":
    main()
