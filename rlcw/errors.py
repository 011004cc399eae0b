"""User-facing errors: what went wrong, where (file, line, key), and how to fix it.

The CLI prints an `RlcwError` without a traceback and exits with status 2; anything else
is a bug and keeps its traceback. `RunFailed` is a run that ran but whose result is unusable (a loss that became
non-finite, a dead reward model): summary.json says `failed` and the CLI exits with status 1. `Terminated` is how the CLI reads SIGTERM: an interrupt like Ctrl-C.
"""

from __future__ import annotations


class RlcwError(Exception):
    """An error caused by input or set-up that the user can fix."""

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        self.message = message
        self.where = where
        self.hint = hint
        text = f"{where}: {message}" if where else message
        if hint:
            text += f"\n  hint: {hint}"
        super().__init__(text)


class RunFailed(RlcwError):
    """A run whose training diverged or whose model is dead; `metrics` are what it measured before it stopped."""

    def __init__(
        self, message: str, *, where: str | None = None, hint: str | None = None, metrics: dict | None = None
    ):
        super().__init__(message, where=where, hint=hint)
        self.metrics = metrics or {}


class Terminated(KeyboardInterrupt):
    """SIGTERM (what Slurm and `kill` send) raised in the main process, handled as Ctrl-C is."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"signal {signum}")


def location(path: object, line: int | None = None, field: str | None = None) -> str:
    """Format a location as `file:line [field 'x']` (line is 1-based)."""
    out = str(path)
    if line is not None:
        out += f":{line}"
    if field is not None:
        out += f" field '{field}'"
    return out
