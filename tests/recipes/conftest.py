"""Session-scoped tiny runs of the stages (tiny random-weight Llama, real tokenizer).

Each fixture runs a real recipe `main(cfg)` once; the test_<stage>.py files check its outputs.
"""

from __future__ import annotations

import pytest

from rlcw.config import load_config


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory):
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="session")
def pairs_run(runs_root):
    from rlcw.recipes.build_pairs import BuildPairsConfig, main

    cfg = load_config(BuildPairsConfig, None, [f"output_dir={runs_root}", "run_name=pairs", "data.chunk_sentences=4"])
    return main(cfg)


@pytest.fixture(scope="session")
def rm_run(runs_root, pairs_run, tiny_model_dir):
    from rlcw.recipes.train_rm import TrainRMConfig, main

    cfg = load_config(
        TrainRMConfig,
        None,
        [
            f"output_dir={runs_root}",
            "run_name=rm",
            f"model.name={tiny_model_dir}",
            f"data.train_file={pairs_run['artifacts']['train']}",
            f"data.eval_file={pairs_run['artifacts']['eval']}",
            "data.max_train_pairs=32",
            "data.max_eval_pairs=16",
            "train.max_steps=4",
            "train.batch_size=4",
            "train.eval_steps=2",
            "train.logging_steps=1",
            "rm.max_length=64",
            "lora.r=4",
        ],
    )
    return main(cfg)


@pytest.fixture(scope="session")
def grpo_run(runs_root, rm_run, tiny_model_dir):
    from rlcw.recipes.grpo import GRPORecipeConfig, main

    cfg = load_config(
        GRPORecipeConfig,
        None,
        [
            f"output_dir={runs_root}",
            "run_name=grpo",
            f"model.name={tiny_model_dir}",
            f"reward.rm_path={rm_run['artifacts']['model']}",
            "train.max_steps=2",
            "train.batch_size=4",
            "train.num_generations=2",
            "train.max_completion_length=8",
            "train.learning_rate=1e-2",
            "eval.every_steps=1",
            "eval.num_prompts=2",
            "eval.max_new_tokens=8",
            "lora.r=4",
            "data.max_train_prompts=8",
        ],
    )
    return main(cfg)


@pytest.fixture
def tiny_grpo_overrides(runs_root, rm_run, tiny_model_dir):
    """`overrides(run_name, *more)`: a one-step grpo run on the tiny model with the rm_run fixture's RM (4 prompts, 2
    completions of 8 tokens each), then `more`."""

    def overrides(name: str, *more: str) -> list[str]:
        return [
            f"output_dir={runs_root}",
            f"run_name={name}",
            f"model.name={tiny_model_dir}",
            f"reward.rm_path={rm_run['artifacts']['model']}",
            "train.max_steps=1",
            "train.batch_size=4",
            "train.num_generations=2",
            "train.max_completion_length=8",
            "lora.r=4",
            "data.max_train_prompts=4",
            *more,
        ]

    return overrides
