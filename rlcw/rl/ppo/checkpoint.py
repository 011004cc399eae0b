"""PPO checkpoints: write one folder atomically, find the latest, load it back.

    <run>/checkpoints/step_000010/
        policy/                 LoRA adapter + tokenizer + rlcw_model.json (loadable as model.name)
        value.safetensors       the value model's trainable tensors (LoRA + head)
        optimizer.pt            AdamW state (policy and value groups)
        rng_rank<R>.pt          python / numpy / torch (/ cuda) RNG states of each process
        trainer_state.json      {"step": 10, "settings": {...}}: written last, marks the folder complete

The folder is assembled under `<name>.tmp` and renamed, so a killed run never leaves a
half-written checkpoint that looks whole.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch

from rlcw.io import atomic_write_json
from rlcw.models import save_lora_checkpoint
from rlcw.rl.ppo.value import load_trainable, save_trainable
from rlcw.training_state import rng_state, set_rng_state

STATE_FILE = "trainer_state.json"


def tmp_path(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def write_model_state(path: Path, policy, value, optimizer, tokenizer, base_spec: str | None) -> None:
    """Rank 0: the policy adapter, value tensors and optimizer into `<path>.tmp`."""
    tmp = tmp_path(path)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_lora_checkpoint(policy, tokenizer, tmp / "policy", base_spec or "")
    save_trainable(value, tmp / "value.safetensors")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")


def write_rng(path: Path, rank: int) -> None:
    """Every rank: its RNG states into `<path>.tmp`."""
    torch.save(rng_state(), tmp_path(path) / f"rng_rank{rank}.pt")


def finish_checkpoint(path: Path, step: int, settings: dict) -> Path:
    """Rank 0: mark complete and move into place."""
    tmp = tmp_path(path)
    atomic_write_json(tmp / STATE_FILE, {"step": step, "settings": settings})
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
    return path


def latest_checkpoint(root: Path) -> Path | None:
    """The complete `step_*` folder with the highest step (None when there is none)."""
    found = []
    for p in Path(root).glob("step_*"):
        m = re.fullmatch(r"step_(\d+)", p.name)
        if m and (p / STATE_FILE).is_file():
            found.append((int(m.group(1)), p))
    return max(found)[1] if found else None


def load_checkpoint(path: Path, policy, value, optimizer, rank: int = 0) -> int:
    """Load adapter, value tensors, optimizer and this rank's RNG; return the step."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    adapter = load_file(str(path / "policy" / "adapter_model.safetensors"))
    result = set_peft_model_state_dict(policy, adapter)
    if getattr(result, "unexpected_keys", None):
        raise RuntimeError(f"adapter in {path} does not fit the policy: {result.unexpected_keys[:3]}")
    load_trainable(value, path / "value.safetensors")
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    rng = path / f"rng_rank{rank}.pt"
    if rng.is_file():
        set_rng_state(torch.load(rng, weights_only=False))
    return int(json.loads((path / STATE_FILE).read_text())["step"])
