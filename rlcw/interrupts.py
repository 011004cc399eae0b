"""How a command ends on Ctrl-C or SIGTERM (what Slurm sends): one line, no traceback, the command that resumes it.

The CLI installs `terminate_as_interrupt` for SIGTERM, so both signals arrive as KeyboardInterrupt (`Terminated`
carries SIGTERM's number); `rlcw.recipes.common.run.stage_run` marks the run folder's summary `interrupted`, and
the CLI prints `interrupted_lines` and exits with `exit_code` (130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import json
import shlex
import signal
from pathlib import Path

from rlcw.errors import Terminated


def exit_code(exc: BaseException) -> int:
    """128 + the signal's number: 130 for Ctrl-C (SIGINT), 143 for SIGTERM."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


def interrupted_lines(name: str, args: list[str], cfg, exc: BaseException) -> str:
    """What an interrupted command prints: one line saying so, and the command that resumes it when its recipe
    has `train.resume` and its run folder was written."""
    from rlcw.runs import has_checkpoint

    what = signal.Signals(int(getattr(exc, "signum", signal.SIGINT))).name
    run_dir = Path(cfg.output_dir) / cfg.run_name if hasattr(cfg, "output_dir") else None
    if run_dir is None or _status(run_dir / "summary.json") != "interrupted":
        return f"rlcw: interrupted ({what}): {name} stopped before writing its run folder"
    lines = [f"rlcw: interrupted ({what}): {name} stopped; {run_dir}/summary.json says status 'interrupted'"]
    if hasattr(getattr(cfg, "train", None), "resume"):
        keep = _without(args, ("train.resume", "overwrite"))
        note = "" if has_checkpoint(run_dir) else " (no checkpoint was saved yet, so it starts over)"
        lines.append(f"rlcw: resume with: {shlex.join(['rlcw', name, *keep, 'train.resume=auto'])}{note}")
    return "\n".join(lines)


def _without(args: list[str], keys: tuple[str, ...]) -> list[str]:
    """`args` without the given keys, as `key=value`, `--key=value` or `--key value`."""
    out, skip = [], False
    for arg in args:
        name, eq, _ = arg.lstrip("-").partition("=")
        if skip or name in keys:
            skip = not skip and not eq and arg.startswith("--")  # `--key value`: drop the value too
            continue
        out.append(arg)
    return out


def _status(summary: Path) -> str | None:
    try:
        return json.loads(summary.read_text(encoding="utf-8")).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def terminate_as_interrupt(signum, frame) -> None:
    """The SIGTERM handler of the main process: raise `Terminated`, an interrupt like Ctrl-C."""
    raise Terminated(signum)
