"""outcome's and quickstart's wire(): a key the user set is never reset silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcw.config import load_config
from rlcw.errors import RlcwError
from rlcw.pipelines.outcome_stages import proxy_stage, wire
from rlcw.recipes import outcome, quickstart

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_outcome_wire_refuses_to_reset_an_override():
    cfg = load_config(outcome.OutcomeConfig, CONFIGS / "outcome/cpu.yaml", ["grpo.eval.every_steps=5"])
    with pytest.raises(RlcwError, match="'grpo.eval.every_steps' is set to 5 by you"):
        wire(cfg, "/tmp/study")


def test_outcome_wire_keeps_the_shipped_config_and_derives_the_rest():
    cfg = load_config(outcome.OutcomeConfig, CONFIGS / "outcome/cpu.yaml", ["seed=3", "grpo.eval.every_steps=0"])
    wire(cfg, "/tmp/study")  # the user's 0 equals what the study sets: no error
    assert cfg.grpo.seed == 3 and cfg.grpo.run_name == "grpo" and cfg.grpo.output_dir == "/tmp/study"
    assert cfg.ppo.reward.rm_path == "/tmp/study/proxy_rm_large/model" and cfg.dpo.eval.every_steps == 0
    assert cfg.dpo.data.train_file == "/tmp/study/dpo_pairs/pairs/train.jsonl"  # proxy-labelled on-policy pairs
    small = proxy_stage(cfg, "small")
    assert (small.run_name, small.data.max_train_pairs) == ("proxy_rm_small", 80)
    assert (
        small.data.train_file == "/tmp/study/proxy_data/pairs/train.jsonl"
        and cfg.proxy_rm.data.max_train_pairs is None
    )


def test_quickstart_wire_refuses_to_reset_an_override():
    for override, key in (("grpo.seed=5", "grpo.seed"), ("train_rm.model.name=other", "train_rm.model.name")):
        cfg = load_config(quickstart.QuickstartConfig, CONFIGS / "quickstart/cpu.yaml", [override])
        with pytest.raises(RlcwError, match=f"'{key}' is set to"):
            quickstart.wire(cfg, "/tmp/qs")
    cfg = load_config(quickstart.QuickstartConfig, CONFIGS / "quickstart/cpu.yaml", ["seed=4"])
    quickstart.wire(cfg, "/tmp/qs")
    assert cfg.grpo.seed == 4 and cfg.grpo.reward.rm_path == "/tmp/qs/train_rm/model"


def _trains_alike(arm, shipped) -> None:
    """Two GRPO configs train alike: schedule, batch, caps, LoRA, rollout, prompts and the length terms (the RM,
    evaluation and run folder may differ)."""
    keys = ("learning_rate", "beta", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps", "max_steps")
    keys += ("batch_size", "num_generations", "max_completion_length", "cpu_precision")
    assert {k: getattr(arm.train, k) for k in keys} == {k: getattr(shipped.train, k) for k in keys}
    assert vars(arm.lora) == vars(shipped.lora) and vars(arm.rollout) == vars(shipped.rollout)
    assert arm.data.sources == shipped.data.sources and arm.data.fit_to_cap == shipped.data.fit_to_cap
    assert set(arm.reward.specs) == set(shipped.reward.specs)
    for name in ("length_range", "overlong"):
        assert arm.reward.specs[name] == shipped.reward.specs[name]


def test_grpo_cpu_config_trains_as_the_quickstart_ships():
    """configs/grpo/cpu.yaml, the GRPO config users start from, is the quickstart's GRPO (its defence included)."""
    from rlcw.recipes.grpo import GRPORecipeConfig

    shipped = load_config(quickstart.QuickstartConfig, CONFIGS / "quickstart/cpu.yaml", []).grpo
    cpu = load_config(GRPORecipeConfig, CONFIGS / "grpo/cpu.yaml", [])
    _trains_alike(cpu, shipped)
    assert cpu.rollout.references == "bundled" and cpu.reward.specs["rm"] == shipped.reward.specs["rm"]


def test_default_study_arm_trains_as_the_quickstart_ships():
    """configs/outcome/default_cpu.yaml's grpo_refs (grpo_default with reference injection, the arm the study chose)
    is the quickstart's GRPO against the study's proxy: the study's verdict on the default is void the moment the two
    drift apart."""
    study = load_config(outcome.OutcomeConfig, CONFIGS / "outcome/default_cpu.yaml", [])
    shipped = load_config(quickstart.QuickstartConfig, CONFIGS / "quickstart/cpu.yaml", []).grpo
    _trains_alike(study.grpo_refs, shipped)  # the arm the study chose, shipped
    assert "grpo_default" in study.runs and study.seeds["grpo_default"] == [1, 2]
    wire(study, "/tmp/study")
    assert study.grpo_default.reward.rm_path == "/tmp/study/proxy_rm_large/model"
    assert (study.grpo_default.run_name, study.grpo_default.eval.every_steps) == ("grpo_default", 0)


def test_reference_arm_is_the_default_arm_with_references():
    """grpo_refs differs from grpo_default by the reference stories injected into its groups, and nothing else."""
    import dataclasses

    study = load_config(outcome.OutcomeConfig, CONFIGS / "outcome/default_cpu.yaml", [])
    refs, default = study.grpo_refs, study.grpo_default
    assert refs.rollout.references == "bundled" and default.rollout.references is None
    assert dataclasses.replace(refs.rollout, references=None) == default.rollout
    assert (refs.train, refs.lora, refs.data, refs.reward) == (
        default.train,
        default.lora,
        default.data,
        default.reward,
    )
    assert "grpo_refs" in study.runs and study.seeds["grpo_refs"] == [1, 2]
    wire(study, "/tmp/study")
    assert (
        study.grpo_refs.reward.rm_path == "/tmp/study/proxy_rm_large/model" and study.grpo_refs.run_name == "grpo_refs"
    )
