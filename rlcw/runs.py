"""The run folder every command leaves: `<output_dir>/<run_name>/`.

    config.yaml     resolved config + git SHA, written before step 0
    metrics.jsonl   one JSON object per logged step ({"step": int, "time": float, ...metrics})
    samples/        story records (jsonl)
    checkpoints/    resumable checkpoints / adapters
    summary.json    SUMMARY_SCHEMA below, rewritten atomically at start (status=running) and end
    report.md       short human-readable report (+ PNG plots beside it)

Only rank 0 writes (`is_main_process`); writes are atomic. While a run writes its folder, rank 0 holds its lock
(`.rlcw.lock`, rlcw.run_guard): a second process that tries to use the folder is refused with the holder's PID.

Run folders never mix runs (`prepare_run_folder`): a folder that holds checkpoints or metric rows
is refused unless `train.resume` says to continue (true | auto; then every jsonl row logged after
the checkpoint step is dropped and TensorBoard is purged from the next step) or `overwrite=true`
is given (then the old folder is moved aside as `<name>.replaced-<time>`). A resume that would change the settings
that define the experiment is refused unless `train.resume=changed` (`rlcw.run_guard.experiment_changes`); config.yaml
then keeps the settings the checkpoints were trained with and the new ones go to `config.resumed-<time>.yaml`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcw.errors import RlcwError
from rlcw.io import append_jsonl, atomic_write_json, atomic_write_jsonl, atomic_write_text, jsonl_lines
from rlcw.logs import say
from rlcw.run_guard import LOCK_FILE, RunLock, lock_run_folder

SUMMARY_SCHEMA = {
    "command": "str: the rlcw command (e.g. 'grpo')",
    "run_name": "str",
    "status": "str: running | completed | failed | interrupted (Ctrl-C / SIGTERM)",
    "started_at": "float: unix time",
    "finished_at": "float | null",
    "wall_time_s": "float | null",
    "git_sha": "str | null: commit of the rlcw checkout, '+dirty' if modified",
    "metrics": "dict[str, float]: key final metrics of the command",
    "artifacts": "dict[str, str]: name -> path of what the run produced",
    "error": "str | null: the error message when status is failed (the signal when interrupted)",
}


RESUME_MODES = ("false", "true", "auto", "changed")
# modes that need a checkpoint: `changed` is `true` that also accepts changed experiment settings
_NEEDS_CHECKPOINT = ("true", "changed")
# A checkpoint folder is complete once its trainer_state.json exists: HF Trainer (`checkpoint-N`) and
# rlcw's PPO (`step_NNNNNN`, see rlcw.rl.ppo.checkpoint) both write it last.
_CHECKPOINT_NAME = re.compile(r"(?:checkpoint-|step_)(\d+)")


def last_checkpoint(folder: str | Path, needs: tuple[str, ...] = ()) -> Path | None:
    """The complete checkpoint with the highest step in `folder` (None when there is none). Complete: the trainer
    wrote `trainer_state.json` (its last file) and every file in `needs` is there too; a stage whose callbacks add
    files after the trainer's (rlcw.rl.aux_state) names them, so a run killed between the two resumes from the
    checkpoint before."""
    found = []
    for p in Path(folder).glob("*"):
        m = _CHECKPOINT_NAME.fullmatch(p.name)
        if m and all((p / name).is_file() for name in ("trainer_state.json", *needs)):
            found.append((int(m.group(1)), p))
    return max(found)[1] if found else None


def resume_mode(value: str | bool) -> str:
    """`train.resume` as one of RESUME_MODES (YAML booleans read as 'true' / 'false')."""
    mode = str(value).lower()
    if mode not in RESUME_MODES:
        raise RlcwError(
            f"train.resume={value!r} is not one of {', '.join(RESUME_MODES)}",
            hint="false: start fresh; true: continue from the last checkpoint (error if none); auto: continue if one "
            "exists; changed: true, with changed experiment settings",
        )
    return mode


def resume_checkpoint(value: str | bool, folder: str | Path, needs: tuple[str, ...] = ()) -> Path | None:
    """What `train.resume` means for every training stage.

    false -> None (start fresh); true (and changed) -> the last complete checkpoint (`last_checkpoint`, with the
    files the stage `needs`), an error when there is none; auto -> the last complete checkpoint when there is one,
    else None. Where no checkpoint has the needed files (the only one was cut short, or a run older than them) the
    last one the trainer finished is taken, with a warning that what those files held restarts.
    """
    mode = resume_mode(value)
    if mode == "false":
        return None
    last = last_checkpoint(folder, needs)
    if last is None and needs and (last := last_checkpoint(folder)) is not None:
        say("resume", f"warning: {last} has no {', '.join(needs)}: resuming without it (what it holds restarts)")
    if last is None and mode in _NEEDS_CHECKPOINT:
        raise RlcwError(
            "train.resume=true but there is no complete checkpoint",
            where=str(folder),
            hint="checkpoints are written every train.save_steps (0 = never); use train.resume=auto to start fresh "
            "when there is none, or train.resume=false",
        )
    return last


def has_checkpoint(run_path: str | Path) -> bool:
    """A complete checkpoint anywhere under `<run_path>/checkpoints` (train-agents keeps one trainer per agent)."""
    root = Path(run_path) / "checkpoints"
    folders = [root, *(p for p in root.rglob("*") if p.is_dir())] if root.is_dir() else [root]
    return any(last_checkpoint(f) is not None for f in folders)


def check_resume_target(value: str | bool, run_path: str | Path) -> None:
    """`train.resume=true` needs a complete checkpoint under `<run_path>/checkpoints` (`has_checkpoint`): an error
    before any folder is made or model loads (false and auto never fail here); the stage's own resume then picks
    the checkpoint it continues from."""
    if resume_mode(value) in _NEEDS_CHECKPOINT and not has_checkpoint(run_path):
        resume_checkpoint("true", Path(run_path) / "checkpoints")  # raises the shared error naming the folder


# What `RunDir.create` and a tracker write before step 0: a folder holding nothing else is unused.
_CREATED_AT_START = ("config.yaml", "summary.json", LOCK_FILE)
_TRACKER_DIRS = ("tensorboard",)


def holds_only_start_files(path: str | Path) -> bool:
    """True when `path` holds nothing but what a run writes before its first step (config.yaml, summary.json,
    TensorBoard's event files, empty files and folders): removing it loses no result, cache or checkpoint."""
    path = Path(path)
    for file in path.rglob("*"):
        if file.is_dir():
            continue
        rel = file.relative_to(path)
        if rel.parts == (rel.name,) and rel.name in _CREATED_AT_START:
            continue
        if rel.parts[0] in _TRACKER_DIRS and rel.name.startswith("events.out.tfevents"):
            continue
        if file.is_file() and file.stat().st_size == 0:
            continue
        return False
    return True


def remove_unused_run_folder(path: str | Path) -> bool:
    """Remove a run folder this command created when a user error stopped it before it produced anything
    (`holds_only_start_files`); rank 0 only. True when it was removed."""
    path = Path(path)
    if not is_main_process() or not path.is_dir() or not holds_only_start_files(path):
        return False
    shutil.rmtree(path, ignore_errors=True)
    return not path.exists()


def checkpoint_step(path: str | Path) -> int:
    """The step in a checkpoint folder's name (`checkpoint-12`, `step_000012`)."""
    m = _CHECKPOINT_NAME.fullmatch(Path(path).name)
    if not m:
        raise RlcwError(f"not a checkpoint folder name: {Path(path).name!r}", where=str(path))
    return int(m.group(1))


def run_contents(path: str | Path) -> list[str]:
    """What makes `path` a used run folder: its checkpoints and metric rows (empty: free to use)."""
    path = Path(path)
    found = []
    ckpts = path / "checkpoints"
    if ckpts.is_dir():
        names = sorted(p.name for p in ckpts.iterdir())
        if names:
            found.append(f"checkpoints/ ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})")
    metrics = path / "metrics.jsonl"
    if metrics.is_file():
        rows = len(jsonl_lines(metrics.read_text(encoding="utf-8", errors="replace")))
        if rows:
            found.append(f"metrics.jsonl ({rows} rows)")
    return found


def move_aside(path: str | Path) -> Path:
    """Rename a run folder to `<name>.replaced-<time>` (a free name) and return the new path."""
    path = Path(path)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.replaced-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.replaced-{stamp}-{n}")
    path.rename(aside)
    return aside


def drop_rows_after(folder: str | Path, step: int) -> dict[str, int]:
    """Drop rows with `"step" > step` from every jsonl under `folder` (checkpoints/ aside), atomically.

    A torn last line (the run was killed mid-write) is dropped too; a file left with no rows is
    removed. Returns {relative path: rows dropped} for the files that changed.
    """
    folder = Path(folder)
    changed = {}
    for file in sorted(folder.rglob("*.jsonl")):
        rel = file.relative_to(folder)
        if rel.parts[0] == "checkpoints":
            continue
        keep, dropped = [], 0
        for line in jsonl_lines(file.read_text(encoding="utf-8", errors="replace")):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                dropped += 1
                continue
            row_step = row.get("step") if isinstance(row, dict) else None
            if isinstance(row_step, int) and not isinstance(row_step, bool) and row_step > step:
                dropped += 1
            else:
                keep.append(row)
        if dropped:
            changed[str(rel)] = dropped
            if keep:
                atomic_write_jsonl(file, keep)
            else:
                file.unlink()
    return changed


def purge_tensorboard(log_dir: str | Path, step: int) -> None:
    """Hide TensorBoard events at `step` and later (a SummaryWriter `purge_step` marker in `log_dir`)."""
    log_dir = Path(log_dir)
    if not log_dir.is_dir():
        return
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(log_dir), purge_step=step)
    writer.flush()
    writer.close()


def prepare_run_folder(path: str | Path, resume: str | bool = "false", overwrite: bool = False) -> int | None:
    """Make `path` safe to use for a new run or a continued one, before anything is written.

    Free folder (no checkpoints, no metric rows): nothing to do. Used folder: `overwrite` moves it
    aside; `resume` true|auto keeps it, drops jsonl rows after the last complete checkpoint's step
    (all step-tagged rows when there is none) and purges TensorBoard from the next step, returning
    that checkpoint step (-1: none); otherwise an error naming what the folder holds.
    """
    path = Path(path)
    mode = resume_mode(resume)
    if overwrite and mode in _NEEDS_CHECKPOINT:
        raise RlcwError(
            "overwrite=true and train.resume=true contradict each other",
            where=str(path),
            hint="train.resume=true continues the run in this folder; overwrite=true starts a new one (old folder "
            "moved aside). Pick one.",
        )
    held = run_contents(path)
    if not held:
        return None
    if overwrite:
        if is_main_process():
            aside = move_aside(path)
            print(f"[rlcw] overwrite=true: the old run folder is kept as {aside}", flush=True)
        return None
    if mode == "false":
        raise RlcwError(
            f"the run folder already holds another run: {'; '.join(held)}",
            where=str(path),
            hint="use a new run_name, continue it with train.resume=true|auto (training stages), or pass "
            "overwrite=true to move the old folder aside",
        )
    last = last_checkpoint(path / "checkpoints")
    step = checkpoint_step(last) if last is not None else -1
    if is_main_process():
        if last is not None:
            print(f"[rlcw] resuming from {last} at step {step}", flush=True)
        dropped = drop_rows_after(path, step)
        purge_tensorboard(path / "tensorboard", step + 1)
        if dropped:
            print(f"[rlcw] resume after step {step}: dropped later rows {dropped}", flush=True)
    return step


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
    lock: RunLock | None = None  # rank 0's lock on the folder (`release_lock` when the run ends)

    @classmethod
    def create(
        cls,
        output_dir: str,
        run_name: str,
        command: str,
        config_yaml: str,
        resume: str | bool = "false",
        overwrite: bool = False,
    ) -> RunDir:
        """Lock the folder (rank 0), check it (`prepare_run_folder`), then write config.yaml and a running summary.
        A folder this call created is removed again when the checks refuse it."""
        run = cls(Path(output_dir) / run_name, command, sha=git_sha())
        fresh = not run.path.exists()
        run.lock = lock_run_folder(run.path) if is_main_process() else None
        try:
            prepare_run_folder(run.path, resume, overwrite)
            if run.lock is not None and not run.path.exists():  # overwrite moved the old folder (and its lock) aside
                run.lock.release()
                run.lock = lock_run_folder(run.path)
        except BaseException:
            run.release_lock()
            if fresh and is_main_process():
                shutil.rmtree(run.path, ignore_errors=True)
            raise
        if is_main_process():
            for sub in ("samples", "checkpoints"):
                (run.path / sub).mkdir(parents=True, exist_ok=True)
            header = f"# rlcw {command}\n# git_sha: {run.sha}\n"
            atomic_write_text(run.path / run.config_name(resume), header + config_yaml)
            run.write_summary("running")
        return run

    def config_name(self, resume: str | bool) -> str:
        """config.yaml, or `config.resumed-<time>.yaml` when `train.resume=changed` continues a run whose config.yaml
        holds the settings its checkpoints were trained with."""
        if resume_mode(resume) != "changed" or not (self.path / "config.yaml").is_file():
            return "config.yaml"
        name = f"config.resumed-{time.strftime('%Y%m%d-%H%M%S')}.yaml"
        print(f"[rlcw] train.resume=changed: config.yaml keeps the settings of the checkpoints; this run's are {name}")
        return name

    def release_lock(self) -> None:
        if self.lock is not None:
            self.lock.release()

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

    def write_report(self, text: str, headline: str | None = None) -> Path:
        """report.md; `headline` (PASS/FAIL or DONE with the headline numbers, `done_line`) becomes its first line."""
        return atomic_write_text(self.path / "report.md", f"# {headline}\n\n{text}" if headline else text)


def done_line(metrics: dict, keys: dict[str, str], word: str = "DONE", more: int = 0) -> str:
    """`DONE: label value, ...` from `metrics` (label -> key, 4 significant digits; missing or NaN keys are left
    out), then up to `more` other metrics in their order."""

    def number(v) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and v == v

    parts = [f"{label} {metrics[k]:.4g}" for label, k in keys.items() if number(metrics.get(k))]
    rest = [k for k, v in metrics.items() if k not in keys.values() and number(v)][:more]
    parts += [f"{k} {metrics[k]:.4g}" for k in rest]
    return f"{word}: {', '.join(parts)}" if parts else word
