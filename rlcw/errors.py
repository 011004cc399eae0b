"""User-facing errors: what went wrong, where (file, line, key), and how to fix it.

The CLI prints an `RlcwError` without a traceback and exits with status 2; anything else
is a bug and keeps its traceback. `Terminated` is how the CLI reads SIGTERM: an interrupt like Ctrl-C.
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
