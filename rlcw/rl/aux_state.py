"""State that lives outside the model and optimizer but decides what a resumed run does next: the
reward-hacking monitor's streaks and alerts, a GenRM reward's pairing RNG. Saved next to each checkpoint
(`rlcw_aux_state.json`) and restored on resume, so a resumed run stops, warns and pairs as the
uninterrupted one would.

    objects = {"monitor": monitor, "reward/genrm_groupmates": genrm}     # anything with state_dict/load_state_dict
    trainer = GRPOTrainer(..., callbacks=[AuxStateCallback(objects)])
    load_aux_state(Path("runs/grpo/checkpoints/checkpoint-4"), objects)   # before trainer.train(resume_from_checkpoint=...)
"""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from rlcw.io import atomic_write_json, read_json

AUX_STATE_FILE = "rlcw_aux_state.json"


def stateful(objects: dict[str, object]) -> dict[str, object]:
    """The entries that carry state (have state_dict and load_state_dict)."""
    return {k: o for k, o in objects.items() if hasattr(o, "state_dict") and hasattr(o, "load_state_dict")}


def saved_checkpoint(args, state) -> Path | None:
    """The folder the trainer has just saved (`<output_dir>/checkpoint-<step>`) on rank 0; None on other ranks or
    where the trainer wrote none."""
    folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
    return folder if state.is_world_process_zero and folder.is_dir() else None


def save_aux_state(folder: Path, objects: dict[str, object], name: str = AUX_STATE_FILE) -> Path:
    return atomic_write_json(folder / name, {k: o.state_dict() for k, o in stateful(objects).items()})


def load_aux_state(folder: Path, objects: dict[str, object], name: str = AUX_STATE_FILE) -> bool:
    """Restore every object saved in `folder`; False when the checkpoint has no aux state (older runs)."""
    path = folder / name
    if not path.is_file():
        return False
    saved = read_json(path, AUX_STATE_FILE)
    for key, obj in stateful(objects).items():
        if key in saved:
            obj.load_state_dict(saved[key])
    return True


class AuxStateCallback(TrainerCallback):
    """Writes the aux state into each `checkpoint-N` the trainer saves (rank 0)."""

    def __init__(self, objects: dict[str, object]):
        self.objects = objects

    def on_save(self, args, state, control, **kwargs):
        if (folder := saved_checkpoint(args, state)) is not None:
            save_aux_state(folder, self.objects)
