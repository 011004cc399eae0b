"""Every TRL symbol rlcw.rl.grpo.trainer (and the rollout hooks used with it) relies on still exists.

The list mirrors the module docstring of rlcw.rl.grpo.trainer; a TRL upgrade that renames or drops
one of these fails here, naming it, instead of deep inside a training step."""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import version

import pytest

# (module, attribute path) for classes and functions TRL defines
TRL_SYMBOLS = [
    ("trl", "GRPOTrainer"),
    ("trl", "GRPOConfig"),
    ("trl.trainer.utils", "RepeatSampler"),
    ("trl.trainer.utils", "add_fused_lm_head"),
    ("trl", "RLOOTrainer"),
    ("trl.trainer.grpo_trainer", "RolloutFunc"),
    ("trl.models", "unwrap_model_for_generation"),
]
# GRPOTrainer methods rlcw overrides or calls, with the parameters it passes
METHODS = {
    "_get_train_sampler": ["dataset"],
    "_calculate_rewards": ["inputs", "prompts", "completions", "completion_ids_list"],
    "_generate_and_score_completions": ["inputs"],
    "_get_per_token_logps_and_entropies": ["model", "input_ids", "attention_mask", "logits_to_keep"],
    "_tokenize_prompts": ["prompts"],
    "_compute_loss": ["model", "inputs"],
    "_run_epoch": ["model", "epoch"],  # transformers' Trainer; called with keywords (epoch=...)
}
# attributes GRPOTrainer.__init__ sets that rlcw reads (checked in the constructor's source)
INIT_ATTRIBUTES = [
    "self._metrics",
    "self.reward_weights",
    "self.reward_func_names",
    "self.num_generations",
    "self.num_iterations",
    "self.shuffle_dataset",
    "self.temperature",
    "self.rollout_func",
    "self.generation_config",
    "self.eos_token_ids",
]
# keys of the batch TRL's _compute_loss reads that the importance-sampling hook reads or rewrites
LOSS_INPUT_KEYS = ["sampling_per_token_logps", "old_per_token_logps", "completion_mask", "advantages"]
CONFIG_FIELDS = [
    "generation_batch_size",
    "steps_per_generation",
    "cast_lm_head_to_fp32",
    "multi_objective_aggregation",
]


def test_trl_version_is_the_checked_one():
    from rlcw.rl.grpo.trainer import TRL_VERSION_CHECKED

    assert version("trl") == TRL_VERSION_CHECKED, "re-check the symbols in rlcw/rl/grpo/trainer.py's docstring"


@pytest.mark.parametrize("module, name", TRL_SYMBOLS)
def test_trl_symbol_exists(module, name):
    assert hasattr(importlib.import_module(module), name), f"{module}.{name} is gone"


@pytest.mark.parametrize("name, params", sorted(METHODS.items()))
def test_grpo_trainer_method_and_parameters(name, params):
    from trl import GRPOTrainer

    method = getattr(GRPOTrainer, name, None)
    assert callable(method), f"GRPOTrainer.{name} is gone"
    have = list(inspect.signature(method).parameters)
    assert have[1 : 1 + len(params)] == params, f"GRPOTrainer.{name}{have} no longer takes {params} first"


def test_grpo_trainer_sets_the_attributes_rlcw_reads():
    from trl import GRPOTrainer

    source = inspect.getsource(GRPOTrainer)
    missing = [a for a in INIT_ATTRIBUTES if f"{a} =" not in source and f"{a}: " not in source]
    assert not missing, f"GRPOTrainer no longer sets {missing}"


def test_grpo_config_fields():
    from trl import GRPOConfig

    cfg = GRPOConfig(output_dir="unused", per_device_train_batch_size=4, num_generations=2, use_cpu=True, report_to=[])
    assert all(hasattr(cfg, f) for f in CONFIG_FIELDS), [f for f in CONFIG_FIELDS if not hasattr(cfg, f)]


def test_repeat_sampler_keeps_seed_and_generator():
    from trl.trainer.utils import RepeatSampler

    sampler = RepeatSampler(list(range(4)), mini_repeat_count=2, batch_size=2, seed=3)
    assert sampler.seed == 3 and hasattr(sampler.generator, "manual_seed")


def test_epoch_sampler_is_reseeded_per_epoch():
    from rlcw.rl.trl_common import EpochRepeatSampler

    sampler = EpochRepeatSampler(list(range(8)), mini_repeat_count=1, batch_size=8, seed=0)
    first = list(sampler)
    sampler.set_epoch(1)
    second = list(sampler)
    sampler.set_epoch(0)
    assert sorted(first) == list(range(8)) and second != first and list(sampler) == first


def test_grpo_loss_reads_the_batch_keys_the_is_hook_rewrites():
    from trl import GRPOTrainer

    source = inspect.getsource(GRPOTrainer._compute_loss)
    missing = [k for k in LOSS_INPUT_KEYS if f'"{k}"' not in source]
    assert not missing, f"GRPOTrainer._compute_loss no longer reads {missing}"


def test_transformers_calls_run_epoch_with_the_epoch_keyword():
    from transformers import Trainer

    source = inspect.getsource(Trainer)
    call = source.index("self._run_epoch(")
    assert "epoch=epoch" in source[call : call + 200], "Trainer no longer passes epoch= to _run_epoch"
