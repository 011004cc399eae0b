"""`rlcw plan` reads `train.bf16`: the shipped GPU configs turn bf16 mixed precision on (so the plan's mixed-precision
figures describe the run), and a 16-bit model.dtype without train.bf16 gets a note saying so."""

from pathlib import Path

import pytest

from rlcw.cli import run
from rlcw.config import load_config
from rlcw.recipes.grpo import GRPORecipeConfig
from rlcw.recipes.ppo import PPORecipeConfig
from rlcw.recipes.train_rm import TrainRMConfig

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ROOT / "tests" / "assets" / "model_shapes"
PLAN = [
    "plan",
    "--config",
    str(ROOT / "configs/grpo/litbench_2node.yaml"),
    "world_size=16",
    f"plan.model_config={SHAPES / 'meta-llama--Llama-3.1-8B-Instruct'}",
]


@pytest.mark.parametrize(
    ("cls", "config"),
    [
        (GRPORecipeConfig, "configs/grpo/litbench_1node.yaml"),
        (GRPORecipeConfig, "configs/grpo/litbench_2node.yaml"),
        (PPORecipeConfig, "configs/ppo/litbench_1node.yaml"),
        (TrainRMConfig, "configs/train_rm/litbench_bt_1b.yaml"),
        (TrainRMConfig, "configs/train_rm/litbench_bt_8b.yaml"),
        (TrainRMConfig, "configs/train_rm/litbench_genrm_7b.yaml"),
    ],
)
def test_gpu_configs_turn_bf16_on(cls, config):
    assert load_config(cls, ROOT / config, []).train.bf16 is True
    assert load_config(cls, None, []).train.bf16 is False  # CPU default: fp32


def test_plan_notes_a_bf16_model_without_train_bf16(capsys):
    assert run(PLAN) == 0
    out = capsys.readouterr().out
    assert "mixed precision" in out and "train.bf16 is off" not in out
    assert run([*PLAN, "train.bf16=false"]) == 0
    out = capsys.readouterr().out
    assert "note: figures assume bf16 mixed precision as DeepSpeed counts it, but train.bf16 is off" in out
    assert run([*PLAN, "train.bf16=false", "model.dtype=float32"]) == 0
    out = capsys.readouterr().out
    assert "fp32 precision" in out and "train.bf16 is off" not in out
