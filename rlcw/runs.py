"""The run folder every command leaves: `<output_dir>/<run_name>/`.

    config.yaml     resolved config + git SHA, written before step 0
    metrics.jsonl   one JSON object per logged step ({"step": int, "time": float, ...metrics})
    samples/        story records (jsonl)
    checkpoints/    resumable checkpoints / adapters
    summary.json    SUMMARY_SCHEMA below, rewritten atomically at start (status=running) and end
    report.md       short human-readable report (+ PNG plots beside it)

Only rank 0 writes (`is_main_process`); writes are atomic.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcw.errors import RlcwError
from rlcw.io import append_jsonl, atomic_write_json, atomic_write_text

SUMMARY_SCHEMA = {
    "command": "str: the rlcw command (e.g. 'grpo')",
    "run_name": "str",
    "status": "str: running | completed | failed",
    "started_at": "float: unix time",
    "finished_at": "float | null",
    "wall_time_s": "float | null",
    "git_sha": "str | null: commit of the rlcw checkout, '+dirty' if modified",
    "metrics": "dict[str, float]: key final metrics of the command",
    "artifacts": "dict[str, str]: name -> path of what the run produced",
    "error": "str | null: the error message when status is failed",
}


RESUME_MODES = ("false", "true", "auto")
# A checkpoint folder is complete once its trainer_state.json exists: HF Trainer (`checkpoint-N`) and
# rlcw's PPO (`step_NNNNNN`, see rlcw.rl.ppo_checkpoint) both write it last.
_CHECKPOINT_NAME = re.compile(r"(?:checkpoint-|step_)(\d+)")


def last_checkpoint(folder: str | Path) -> Path | None:
    """The complete checkpoint with the highest step in `folder` (None when there is none)."""
    found = []
    for p in Path(folder).glob("*"):
        m = _CHECKPOINT_NAME.fullmatch(p.name)
        if m and (p / "trainer_state.json").is_file():
            found.append((int(m.group(1)), p))
    return max(found)[1] if found else None


def resume_mode(value: str | bool) -> str:
    """`train.resume` as one of RESUME_MODES (YAML booleans read as 'true' / 'false')."""
    mode = str(value).lower()
    if mode not in RESUME_MODES:
        raise RlcwError(
            f"train.resume={value!r} is not one of {', '.join(RESUME_MODES)}",
            hint="false: start fresh; true: continue from the last checkpoint (error if none); auto: continue if one exists",
        )
    return mode


def resume_checkpoint(value: str | bool, folder: str | Path) -> Path | None:
    """What `train.resume` means for every training stage.

    false -> None (start fresh); true -> the last complete checkpoint, an error when there is none;
    auto -> the last complete checkpoint when there is one, else None.
    """
    mode = resume_mode(value)
    if mode == "false":
        return None
    last = last_checkpoint(folder)
    if last is None and mode == "true":
        raise RlcwError(
            "train.resume=true but there is no complete checkpoint",
            where=str(folder),
            hint="checkpoints are written every train.save_steps (0 = never); use train.resume=auto to start fresh "
            "when there is none, or train.resume=false",
        )
    return last


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def git_sha() -> str | None:
    """Commit of the rlcw source tree (None outside git)."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


@dataclass
class RunDir:
    """Paths and writers of one run folder."""

    path: Path
    command: str
    started_at: float = field(default_factory=time.time)
    sha: str | None = None

    @classmethod
    def create(cls, output_dir: str, run_name: str, command: str, config_yaml: str) -> RunDir:
        run = cls(Path(output_dir) / run_name, command, sha=git_sha())
        if is_main_process():
            for sub in ("samples", "checkpoints"):
                (run.path / sub).mkdir(parents=True, exist_ok=True)
            header = f"# rlcw {command}\n# git_sha: {run.sha}\n"
            atomic_write_text(run.path / "config.yaml", header + config_yaml)
            run.write_summary("running")
        return run

    @property
    def samples(self) -> Path:
        return self.path / "samples"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if is_main_process():
            append_jsonl(self.path / "metrics.jsonl", {"step": step, "time": time.time(), **metrics})

    def write_summary(
        self, status: str, metrics: dict | None = None, artifacts: dict | None = None, error: str | None = None
    ) -> dict:
        done = status != "running"
        now = time.time()
        summary = {
            "command": self.command,
            "run_name": self.path.name,
            "status": status,
            "started_at": self.started_at,
            "finished_at": now if done else None,
            "wall_time_s": round(now - self.started_at, 2) if done else None,
            "git_sha": self.sha,
            "metrics": metrics or {},
            "artifacts": {k: str(v) for k, v in (artifacts or {}).items()},
            "error": error,
        }
        if is_main_process():
            atomic_write_json(self.path / "summary.json", summary)
        return summary

    def write_report(self, text: str) -> Path:
        return atomic_write_text(self.path / "report.md", text)
