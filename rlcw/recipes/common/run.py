"""The start and finish of a run: checks of this machine, the run folder and its lock, seeds, trackers, failures
and interrupts marked in summary.json, and `--check` (stop where the folder would be written)."""

from __future__ import annotations

import random
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlcw.config import check_bounds, leaf_values, to_dict, to_yaml
from rlcw.errors import RlcwError
from rlcw.models import check_model_name
from rlcw.run_guard import changed_lines, check_cache, check_writable, experiment_changes
from rlcw.runs import (
    RunDir,
    check_resume_target,
    has_checkpoint,
    is_main_process,
    remove_unused_run_folder,
    resume_mode,
)
from rlcw.tracking import Tracker, check_trackers


def set_seed(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def stage_tracker(cfg, run: RunDir, report_to: list[str] | str) -> Tracker:
    """The run's trackers (`train.report_to`, rank 0 only; other ranks get a no-op one), sent the resolved config."""
    names = report_to if is_main_process() else "none"
    return Tracker(names, run.path, run_name=run.path.name, config=to_dict(cfg))


class ConfigChecked(Exception):
    """Raised by `stage_run` under `check_only()` where a run would write its folder: every check before it
    passed and nothing was written (`rlcw <command> --check`)."""

    def __init__(self, path: Path):
        self.path = path
        super().__init__(f"config OK: {path}")


_CHECK_ONLY = False


@contextmanager
def check_only() -> Iterator[None]:
    """Inside this context `stage_run` stops with `ConfigChecked` instead of writing the run folder."""
    global _CHECK_ONLY
    before, _CHECK_ONLY = _CHECK_ONLY, True
    try:
        yield
    finally:
        _CHECK_ONLY = before


def check_machine(cfg, path: Path) -> None:
    """What this machine must allow before a run folder is written: bounds of the config's numbers (also for a
    config built in code), the resume target, the trackers (installed; wandb logged in), a writable output_dir
    and, when the embedded model must be converted first, a writable $RLCW_CACHE; a `model.name` path that exists
    and holds a model (`rlcw.models.check_model_name`)."""
    check_bounds(cfg)
    resume = getattr(getattr(cfg, "train", None), "resume", False)
    check_resume_target(resume, path)
    check_same_experiment(resume, path, to_yaml(cfg))
    check_trackers(getattr(getattr(cfg, "train", None), "report_to", None))
    check_writable(path, "output_dir")
    check_cache(leaf_values(cfg).values())
    check_model_name(getattr(getattr(cfg, "model", None), "name", None))


def check_same_experiment(resume: str | bool, path: Path, config_yaml: str) -> None:
    """A resume (`train.resume` true | auto) from a checkpoint keeps the settings that define the experiment
    (`rlcw.run_guard.experiment_changes` against `<path>/config.yaml`): an error listing the changed keys, unless
    `train.resume=changed`, which continues with them and says which."""
    mode = resume_mode(resume)
    saved = path / "config.yaml"
    if mode == "false" or not saved.is_file() or not has_checkpoint(path):
        return
    changes = experiment_changes(saved.read_text(encoding="utf-8"), config_yaml)
    if not changes:
        return
    if mode == "changed":
        print(f"[rlcw] resuming with changed settings: {changed_lines(changes)}", flush=True)
        return
    raise RlcwError(
        f"resuming would change the settings its checkpoints were trained with: {changed_lines(changes)}",
        where=str(saved),
        hint="put those values back, pass train.resume=changed to continue with the new ones (config.yaml keeps "
        "the old), or start a new run_name",
    )


@contextmanager
def stage_run(cfg, command: str) -> Iterator[RunDir]:
    """Create the run folder (config + git SHA first), seed everything, mark failures in summary.json.

    Nothing is written before the `with` block is entered (recipes validate their config first; this machine is
    checked here, `check_machine`). A folder that holds another run is refused unless `train.resume` is true|auto
    or `overwrite=true` (`rlcw.runs.prepare_run_folder`); one another process is writing is refused (its lock,
    rlcw.run_guard). A user error (RlcwError) raised inside the block before the run produced anything removes the
    folder it created; Ctrl-C or SIGTERM marks the summary `interrupted`. Under `check_only()` it stops with
    `ConfigChecked` before writing anything.
    """
    resume = getattr(getattr(cfg, "train", None), "resume", False)
    overwrite = bool(getattr(cfg, "overwrite", False))
    path = Path(cfg.output_dir) / cfg.run_name
    check_machine(cfg, path)
    if _CHECK_ONLY:
        raise ConfigChecked(path)
    fresh = not path.exists()
    run = RunDir.create(cfg.output_dir, cfg.run_name, command, to_yaml(cfg), resume=resume, overwrite=overwrite)
    try:
        set_seed(cfg.seed)
        yield run
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM read as one (rlcw.errors.Terminated)
        signum = getattr(exc, "signum", signal.SIGINT)
        run.write_summary("interrupted", error=f"interrupted by {signal.Signals(signum).name}")
        raise
    except BaseException as exc:
        run.write_summary("failed", getattr(exc, "metrics", None), error=f"{type(exc).__name__}: {exc}")
        # a user error found after loading (a chat template, a server's reply) leaves no half-written folder
        if isinstance(exc, RlcwError) and fresh and remove_unused_run_folder(run.path):
            print(f"[rlcw] {command}: stopped before producing anything; removed {run.path}", flush=True)
        raise
    finally:
        run.release_lock()


def trainer_basics(t, seed: int) -> dict:
    """The HF TrainingArguments every TRL-based RL recipe sets alike (grpo, rloo, dpo), from its `train` section:
    logging and checkpoint cadence, precision, seeds, CPU when no GPU, trackers left to rlcw.tracking."""
    import torch

    return {
        "logging_steps": t.logging_steps,
        "save_strategy": "steps" if t.save_steps else "no",
        "save_steps": t.save_steps or 500,
        "save_total_limit": t.save_total_limit,
        "bf16": t.bf16,
        "gradient_checkpointing": False,
        "use_cpu": not torch.cuda.is_available(),
        "report_to": "none",  # train.report_to goes through rlcw.tracking (JsonlMetricsCallback), checked
        "seed": seed,
        "data_seed": seed,
        "logging_nan_inf_filter": False,  # a non-finite loss is logged as it is, and ends the run (measure.callbacks)
        "disable_tqdm": False,
    }
