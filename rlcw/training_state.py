"""Training state any trainer checkpoints: the trainable tensors of a model and every RNG a step draws from.

    torch.save(rng_state(), folder / "rng.pt")                        # python / numpy / torch (/ cuda)
    set_rng_state(torch.load(folder / "rng.pt", weights_only=False))   # on resume
    save_file(trainable_state(model), str(folder / "member_0.safetensors"))   # LoRA + head only

Used by PPO's checkpoints (`rlcw.rl.ppo.checkpoint`, the value model's `rlcw.rl.ppo.value`) and the RM
ensemble's joint trainer (`rlcw.rm.ensemble_trainer`).
"""

from __future__ import annotations

import random

import numpy as np
import torch
from torch import nn


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors that need grad (LoRA + heads), detached on the CPU."""
    return {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}
