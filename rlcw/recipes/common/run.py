"""The start and finish of a run: the run folder, seeds, trackers, and failures marked in summary.json."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlcw.config import to_dict, to_yaml
from rlcw.errors import RlcwError
from rlcw.runs import RunDir, check_resume_target, is_main_process, remove_unused_run_folder
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


@contextmanager
def stage_run(cfg, command: str) -> Iterator[RunDir]:
    """Create the run folder (config + git SHA first), seed everything, mark failures in summary.json.

    Nothing is written before the `with` block is entered (recipes validate their config first;
    `train.resume=true` without a checkpoint is refused here). A folder that holds another run is refused
    unless `train.resume` is true|auto or `overwrite=true` (`rlcw.runs.prepare_run_folder`). A user error
    (RlcwError) raised inside the block before the run produced anything removes the folder it created.
    """
    resume = getattr(getattr(cfg, "train", None), "resume", False)
    overwrite = bool(getattr(cfg, "overwrite", False))
    path = Path(cfg.output_dir) / cfg.run_name
    check_resume_target(resume, path)
    check_trackers(getattr(getattr(cfg, "train", None), "report_to", None))
    fresh = not path.exists()
    run = RunDir.create(cfg.output_dir, cfg.run_name, command, to_yaml(cfg), resume=resume, overwrite=overwrite)
    set_seed(cfg.seed)
    try:
        yield run
    except BaseException as exc:
        run.write_summary("failed", error=f"{type(exc).__name__}: {exc}")
        # a user error found after loading (a chat template, a server's reply) leaves no half-written folder
        if isinstance(exc, RlcwError) and fresh and remove_unused_run_folder(run.path):
            print(f"[rlcw] {command}: stopped before producing anything; removed {run.path}", flush=True)
        raise


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
        "disable_tqdm": False,
    }
