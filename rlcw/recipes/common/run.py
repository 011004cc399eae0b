"""The start and finish of a run: the run folder, seeds, trackers, and failures marked in summary.json."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

from rlcw.config import to_dict, to_yaml
from rlcw.runs import RunDir, is_main_process
from rlcw.tracking import Tracker


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

    Nothing is written before the `with` block is entered (recipes validate their config first). A
    folder that holds another run is refused unless `train.resume` is true|auto or `overwrite=true`
    (`rlcw.runs.prepare_run_folder`).
    """
    resume = getattr(getattr(cfg, "train", None), "resume", False)
    overwrite = bool(getattr(cfg, "overwrite", False))
    run = RunDir.create(cfg.output_dir, cfg.run_name, command, to_yaml(cfg), resume=resume, overwrite=overwrite)
    set_seed(cfg.seed)
    try:
        yield run
    except BaseException as exc:
        run.write_summary("failed", error=f"{type(exc).__name__}: {exc}")
        raise
