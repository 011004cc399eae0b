"""Tail averaging (rlcw.rl.tail_average): the final policy is the mean of the trainable weights after each of the
last `train.tail_average` steps. By hand on a two-weight model, through a checkpoint and back, and in a real grpo
run whose final adapter must equal the mean of its last two checkpoints' adapters, also when resumed between them."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlcw.config import load_config
from rlcw.errors import RlcwError
from rlcw.rl.tail_average import TAIL_FILE, TailAverage


def _model() -> torch.nn.Module:
    model = torch.nn.Module()
    model.trained = torch.nn.Parameter(torch.zeros(2))
    model.frozen = torch.nn.Parameter(torch.full((2,), 7.0), requires_grad=False)
    return model


def _step(avg: TailAverage, model, step: int, value: float, output_dir: Path | None = None) -> None:
    with torch.no_grad():
        model.trained.fill_(value)
    state = SimpleNamespace(global_step=step, is_world_process_zero=True)
    avg.on_step_end(None, state, None, model=model)
    if output_dir is not None:
        (output_dir / f"checkpoint-{step}").mkdir()
        avg.on_save(SimpleNamespace(output_dir=str(output_dir)), state, None)


def test_the_last_steps_weights_are_averaged_by_hand(tmp_path):
    model, avg = _model(), TailAverage(steps=2, max_steps=4)
    for step, value in ((1, 1.0), (2, 2.0), (3, 3.0), (4, 5.0)):  # steps 3 and 4 are the tail: (3 + 5) / 2 = 4
        _step(avg, model, step, value)
    avg.on_train_end(None, SimpleNamespace(), None, model=model)
    assert model.trained.tolist() == [4.0, 4.0]
    assert model.frozen.tolist() == [7.0, 7.0]  # only the trainable weights are averaged

    # a run stopped before the tail keeps its last weights
    early = TailAverage(steps=2, max_steps=4)
    _step(early, model, 1, 9.0)
    early.on_train_end(None, SimpleNamespace(), None, model=model)
    assert model.trained.tolist() == [9.0, 9.0]


def test_a_resumed_run_averages_the_same_steps(tmp_path):
    model, avg = _model(), TailAverage(steps=3, max_steps=4)
    for step, value in ((1, 1.0), (2, 2.0), (3, 4.0)):
        _step(avg, model, step, value, tmp_path)
    resumed = TailAverage(steps=3, max_steps=4)
    assert resumed.load(tmp_path / "checkpoint-3") and resumed.count == 2
    assert not resumed.load(tmp_path / "missing")
    _step(resumed, model, 4, 9.0)
    resumed.on_train_end(None, SimpleNamespace(), None, model=model)
    assert model.trained.tolist() == [5.0, 5.0]  # (2 + 4 + 9) / 3, as without the interruption
    with pytest.raises(RlcwError, match="averages the weights from step 2, this run from step 3") as err:
        TailAverage(steps=2, max_steps=4).load(tmp_path / "checkpoint-3")
    assert err.value.where.endswith(TAIL_FILE)


def test_grpo_final_adapter_is_the_mean_of_its_last_checkpoints(tiny_grpo_overrides, runs_root, capsys):
    from safetensors.torch import load_file

    from rlcw.recipes.grpo import GRPORecipeConfig, main, validate

    more = ("train.max_steps=3", "train.save_steps=1", "train.save_total_limit=null", "train.learning_rate=5e-2")
    result = main(load_config(GRPORecipeConfig, None, tiny_grpo_overrides("tail", *more, "train.tail_average=2")))
    assert result["status"] == "completed"
    assert "final policy: the mean of the weights after steps 2-3 (2 steps)" in capsys.readouterr().out
    ckpts = runs_root / "tail" / "checkpoints"
    two, three, final = (
        load_file(ckpts / d / "adapter_model.safetensors") for d in ("checkpoint-2", "checkpoint-3", "final")
    )
    assert (ckpts / "checkpoint-3" / TAIL_FILE).is_file()
    assert set(final) == set(three) and any(not torch.equal(two[k], three[k]) for k in three)  # the weights moved
    for key, value in final.items():
        torch.testing.assert_close(value, ((two[key].float() + three[key].float()) / 2).to(value.dtype))

    # resumed from checkpoint-2 (step 3 re-run): the mean restored from checkpoint-2 takes the new step 3 in
    shutil.rmtree(ckpts / "checkpoint-3")
    shutil.rmtree(ckpts / "final")
    overrides = tiny_grpo_overrides("tail", *more, "train.tail_average=2", "train.resume=true")
    assert main(load_config(GRPORecipeConfig, None, overrides))["status"] == "completed"
    three = load_file(ckpts / "checkpoint-3" / "adapter_model.safetensors")
    final = load_file(ckpts / "final" / "adapter_model.safetensors")
    for key, value in final.items():
        torch.testing.assert_close(value, ((two[key].float() + three[key].float()) / 2).to(value.dtype))

    with pytest.raises(RlcwError, match="averages more steps than the run takes") as err:
        validate(load_config(GRPORecipeConfig, None, ["train.max_steps=3", "train.tail_average=4"]))
    assert err.value.where == "train.tail_average"
    with pytest.raises(RlcwError, match="ZeRO shards them"):
        validate(
            load_config(
                GRPORecipeConfig, None, ["train.tail_average=2", "train.deepspeed=configs/deepspeed/zero2.json"]
            )
        )
