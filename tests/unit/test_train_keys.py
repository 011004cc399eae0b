"""`train.report_to` and `train.bf16` of the training stages, without training: validation, the TRL/HF args
(report_to always "none": rlcw's Tracker is the one path to a tracker; bf16 as configured), PPO's
accelerator, and what `check_bf16` says about this machine."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlcw.config import load_config
from rlcw.errors import RlcwError
from rlcw.recipes import dpo, grpo, ppo, rloo, train_agents, train_rm
from rlcw.recipes.common.checks import check_bf16

RUN = SimpleNamespace(checkpoints=Path("unused-checkpoints"))
STAGES = [
    (train_rm.TrainRMConfig, train_rm.validate),
    (train_agents.TrainAgentsConfig, train_agents.validate),
    (grpo.GRPORecipeConfig, grpo.validate),
    (ppo.PPORecipeConfig, ppo.validate),
    (dpo.DPORecipeConfig, dpo.validate),
]


@pytest.mark.parametrize(("cls", "validate"), STAGES)
def test_unknown_tracker_names_the_valid_ones(cls, validate):
    cfg = load_config(cls, None, ["train.report_to=[tensorboard,mlflow]"])
    with pytest.raises(RlcwError, match="mlflow") as err:
        validate(cfg)
    assert err.value.where == "train.report_to"
    assert all(name in str(err.value) for name in ("tensorboard", "wandb", "trackio", "none"))
    assert load_config(cls, None, []).train.report_to == ["tensorboard"]  # today's behaviour is the default
    validate(load_config(cls, None, ["train.report_to=[wandb,trackio]"]))


@pytest.mark.parametrize("bf16", [False, True])
def test_trl_args_report_to_none_and_carry_bf16(bf16):
    g = load_config(grpo.GRPORecipeConfig, None, [f"train.bf16={str(bf16).lower()}"])
    d = load_config(dpo.DPORecipeConfig, None, [f"train.bf16={str(bf16).lower()}"])
    r = load_config(train_rm.TrainRMConfig, None, [f"train.bf16={str(bf16).lower()}"])
    for args in (
        grpo.build_args(g, RUN, [1.0, 1.0], grpo.rollout_seam(g)),
        dpo.build_args(d, RUN, False),
        train_rm.build_args(r, RUN, False),
    ):
        assert args.report_to == []  # "none": HF starts no TensorBoard/wandb callback of its own
        assert args.bf16 is bf16


@pytest.mark.parametrize(("bf16", "mode"), [(False, "no"), (True, "bf16")])
def test_ppo_accelerator_mixed_precision(monkeypatch, bf16, mode):
    import accelerate

    seen = {}
    monkeypatch.setattr(accelerate, "Accelerator", lambda **kw: seen.update(kw) or "acc")
    cfg = load_config(ppo.PPORecipeConfig, None, [f"train.bf16={str(bf16).lower()}"])
    assert ppo.build_accelerator(cfg) == "acc"
    assert seen == {"cpu": not torch.cuda.is_available(), "mixed_precision": mode}


def test_train_rm_loads_the_bt_model_as_model_dtype(tiny_model_dir):
    from rlcw.models import load_tokenizer

    tokenizer = load_tokenizer(str(tiny_model_dir), for_reward_model=True)
    for dtype, expected in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        cfg = load_config(train_rm.TrainRMConfig, None, [f"model.name={tiny_model_dir}", f"model.dtype={dtype}"])
        assert train_rm.build_model(cfg, tokenizer).score.weight.dtype == expected


def test_check_bf16_errors_on_a_gpu_without_bf16_and_warns_on_cpu(monkeypatch, capsys):
    check_bf16(False)
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    check_bf16(True)
    assert "warning: train.bf16=true without a GPU" in capsys.readouterr().out
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "Tesla V100")
    with pytest.raises(RlcwError, match="V100 has no bf16") as err:
        check_bf16(True)
    assert err.value.where == "train.bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    check_bf16(True)


TRL_ARGS = {
    "grpo": (grpo.GRPORecipeConfig, lambda cfg: grpo.build_args(cfg, RUN, [1.0, 1.0], grpo.rollout_seam(cfg))),
    "rloo": (rloo.RLOORecipeConfig, lambda cfg: rloo.build_args(cfg, RUN, [1.0, 1.0])),
}


@pytest.mark.parametrize("stage", sorted(TRL_ARGS))
def test_scheduler_kwargs_reach_the_trainer_and_shape_the_schedule(stage):
    """`train.lr_scheduler_kwargs` (a dotlist key a time) reaches TRL's args (grpo's and rloo's), and transformers
    builds the schedule it names: warmup_stable_decay holds the peak, then decays over the last num_decay_steps."""
    from transformers.optimization import get_scheduler

    cls, build_args = TRL_ARGS[stage]
    g = load_config(
        cls,
        None,
        [
            "train.lr_scheduler_type=warmup_stable_decay",
            "train.lr_scheduler_kwargs.num_decay_steps=4",
            "train.warmup_steps=2",
            "train.max_steps=10",
            "train.learning_rate=1.0",
        ],
    )
    args = build_args(g)
    assert args.lr_scheduler_kwargs == {"num_decay_steps": 4}
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
    sched = get_scheduler(
        args.lr_scheduler_type,
        opt,
        num_warmup_steps=2,
        num_training_steps=10,
        scheduler_specific_kwargs=args.lr_scheduler_kwargs,
    )
    lrs = []
    for _ in range(10):
        lrs.append(sched.get_last_lr()[0])
        opt.step(), sched.step()
    assert lrs[2:7] == [1.0] * 5 and lrs[7] < 1.0 and lrs[-1] < lrs[7]


@pytest.mark.parametrize("stage", sorted(TRL_ARGS))
def test_cpu_precision_turns_the_loss_autocast_on_where_bf16_is_faster(stage, cpu_flags, monkeypatch, capsys):
    """`train.cpu_precision` (grpo and rloo): fp32 keeps TRL's bf16 flag off; bf16 turns it on; auto asks
    rlcw.cpu_isa (bf16 where AMX runs it or bf16 matmuls timed >= 1.5x fp32 here, never on the AVX2 path), and the
    log says which and why; train.bf16=true decides instead; a misspelt value is refused with its key."""
    from rlcw import cpu_isa

    cls, build_args = TRL_ARGS[stage]
    ratio = {"value": 4.0}
    monkeypatch.setattr(cpu_isa, "bf16_matmul_speedup", lambda: ratio["value"])

    def bf16(*overrides: str) -> tuple[bool, str]:
        args = build_args(load_config(cls, None, list(overrides)))
        return args.bf16, capsys.readouterr().out

    cpu_flags(avx512_bf16=True, amx=False)
    on, log = bf16()  # fp32 by default
    assert not on and f"{stage}: the loss's forward and backward in fp32 on the CPU (set in the config)" in log
    on, log = bf16("train.cpu_precision=bf16")
    assert on and f"{stage}: the loss's forward and backward in bf16 on the CPU (set in the config)" in log
    on, log = bf16("train.cpu_precision=auto")
    assert on and "avx512_bf16 without AMX" in log and "4.0x" in log
    ratio["value"] = 0.5  # an Intel Xeon without AMX: bf16 matmuls slower than fp32
    on, log = bf16("train.cpu_precision=auto")
    assert not on and "backward in fp32" in log and "0.5x" in log
    assert bf16("train.cpu_precision=fp32", "train.bf16=true")[0]  # the HF flag decides where it is set
    cpu_flags(avx512_bf16=True, amx=True)
    assert bf16("train.cpu_precision=auto")[0]
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # the AVX2 path of the same box
    on, log = bf16("train.cpu_precision=auto")
    assert not on and "limited away" in log
    with pytest.raises(RlcwError) as err:
        load_config(cls, None, ["train.cpu_precision=bf32"])
    assert "train.cpu_precision" in str(err.value) and "auto" in str(err.value)


@pytest.mark.parametrize(
    ("cls", "validate", "build"),
    [
        (grpo.GRPORecipeConfig, grpo.validate, lambda c: grpo.build_args(c, RUN, [1.0, 1.0], grpo.rollout_seam(c))),
        (rloo.RLOORecipeConfig, rloo.validate, lambda c: rloo.build_args(c, RUN, [1.0])),
    ],
)
def test_adam_betas_reach_the_optimizer_and_are_checked(cls, validate, build):
    default = load_config(cls, None, [])
    assert (default.train.adam_beta1, default.train.adam_beta2) == (0.9, 0.999)  # AdamW's own defaults
    cfg = load_config(cls, None, ["train.adam_beta1=0.5", "train.adam_beta2=0.99"])
    validate(cfg)
    args = build(cfg)
    assert (args.adam_beta1, args.adam_beta2) == (0.5, 0.99)
    for key, bad in (("adam_beta1", 1.0), ("adam_beta2", -0.1)):
        with pytest.raises(RlcwError, match=rf"train\.{key}={bad} must be in \[0, 1\)") as err:
            validate(load_config(cls, None, [f"train.{key}={bad}"]))
        assert err.value.where == f"train.{key}"
