"""grpo, ppo and dpo check their whole config before the run folder is written or anything loads.

Model and tokenizer loading and `RunDir.create` are patched to fail loudly: a bad config must stop
at its own validation error, never reach them. Without `validate` in main() these checks ran after
the run folder (and, for most of them, the policy) existed, so every case here would hit the patch."""

from __future__ import annotations

import importlib

import pytest

from rlcw.config import load_config
from rlcw.errors import RlcwError

RECIPES = {"grpo": "GRPORecipeConfig", "ppo": "PPORecipeConfig", "dpo": "DPORecipeConfig"}

BAD = [
    ("grpo", ["train.batch_size=6", "train.num_generations=4"], "multiple of train.num_generations"),
    ("grpo", ["train.resume=maybe"], "train.resume='maybe' is not one of"),
    ("grpo", ["rollout.precision=bf16"], "applies to the fast rollout only"),
    ("grpo", ["rollout.kind=fast", "train.deepspeed=configs/deepspeed/zero3.json"], "cannot be combined with"),
    (  # the shipped CPU config's rollout under ZeRO-3: the hint sets back every key of the fast sampler it set
        "grpo",
        ["rollout.kind=fast", "rollout.draw=inverse_cdf", "rollout.references=bundled"]
        + ["train.deepspeed=configs/deepspeed/zero3.json"],
        "rollout.kind=trl rollout.draw=multinomial rollout.references=null \\(",
    ),
    ("grpo", ["rollout.kind=sglang"], "unknown rollout.kind"),
    ("grpo", ["rollout.vllm.mode=remote"], "unknown rollout.vllm.mode"),
    ("grpo", ["agents.variant=outline"], "variant"),
    ("grpo", ["data.fit_to_cap=sometimes"], "data.fit_to_cap='sometimes' is not a mode"),
    ("grpo", ["data.sources.a.colour=red"], "unknown option 'colour'"),
    ("grpo", ["monitor.stop.max_vibes=1"], "unknown monitor rule"),
    ("grpo", ["eval.evaluators.vibes={}"], "unknown evaluator 'vibes'"),
    ("ppo", ["train.batch_size=8", "train.minibatch_size=3"], "multiple of train.minibatch_size"),
    ("ppo", ["train.kl_estimator=k2"], "kl_estimator"),
    ("ppo", ["train.resume=later"], "train.resume=.later. is not one of"),
    ("ppo", ["lora.enabled=false"], "ppo needs LoRA"),
    ("ppo", ["value.init=random"], "value.init"),
    ("ppo", ["value.backbone=full"], "value.backbone"),
    ("ppo", ["monitor.warn.min_nothing=1"], "unknown monitor rule"),
    ("dpo", ["train.beta=0"], "train.beta must be positive"),
    ("dpo", ["train.batch_size=0"], "train.batch_size must be at least 1"),
    ("dpo", ["train.resume=sometimes"], "train.resume='sometimes' is not one of"),
    ("dpo", ["eval.evaluators.vibes={}"], "unknown evaluator 'vibes'"),
]


def _load(recipe: str, overrides: list[str], config_file=None):
    module = importlib.import_module(f"rlcw.recipes.{recipe}")
    return module, load_config(getattr(module, RECIPES[recipe]), config_file, overrides)


@pytest.fixture
def nothing_heavy(monkeypatch):
    """Every way to load a model or write the run folder raises."""

    def too_late(*args, **kwargs):
        raise AssertionError("reached model loading or the run folder before the config was checked")

    monkeypatch.setattr("rlcw.recipes.common.run.RunDir.create", too_late)
    for recipe in RECIPES:
        module = importlib.import_module(f"rlcw.recipes.{recipe}")
        for name in ("load_causal_lm", "load_tokenizer", "load_value_model", "build_reward_funcs"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, too_late)


@pytest.mark.parametrize("recipe, overrides, match", BAD)
def test_bad_config_fails_before_anything_heavy(nothing_heavy, tmp_path, recipe, overrides, match):
    module, cfg = _load(recipe, [f"output_dir={tmp_path}", *overrides])
    with pytest.raises(RlcwError, match=match):
        module.main(cfg)
    assert not (tmp_path / recipe).exists()  # no run folder was written


def _inputs(tmp_path) -> list[str]:
    """The files a good config names: an RM folder (its rlcw_rm.json) and a pairs file."""
    from rlcw.rm.render import RMSpec, save_spec

    save_spec(RMSpec(), tmp_path / "rm")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"prompt": "P", "chosen": "A story.", "rejected": "B story"}\n', encoding="utf-8")
    return [f"reward.rm_path={tmp_path / 'rm'}"]


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_good_config_passes_validation_and_reaches_the_run_folder(nothing_heavy, tmp_path, recipe):
    inputs = _inputs(tmp_path)
    if recipe == "dpo":
        inputs = [f"data.train_file={tmp_path / 'pairs.jsonl'}", "data.eval_file=null"]
    module, cfg = _load(recipe, [f"output_dir={tmp_path}", *inputs])
    module.validate(cfg)
    with pytest.raises(AssertionError, match="before the config was checked"):
        module.main(cfg)  # past validation the first heavy step is the (patched) run folder


@pytest.mark.parametrize("recipe", sorted(RECIPES))
@pytest.mark.parametrize("given, mode", [("true", "true"), ("auto", "auto"), ("false", "false")])
def test_resume_from_yaml_and_command_line(tmp_path, recipe, given, mode):
    from rlcw.runs import resume_mode

    yaml = tmp_path / "c.yaml"
    yaml.write_text(f"train:\n  resume: {given}\n")  # YAML true/false arrive as booleans
    _, from_yaml = _load(recipe, [], yaml)
    _, from_cli = _load(recipe, [f"train.resume={given}"])
    assert resume_mode(from_yaml.train.resume) == resume_mode(from_cli.train.resume) == mode
