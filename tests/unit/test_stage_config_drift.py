"""The outcome study reuses a finished stage whose config lacks only keys rlcw added since (at their defaults), or
spells keys rlcw moved since by their old names, and reruns one whose values changed or whose new key was set away
from its default."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import ClassVar

import yaml

from rlcw.config import to_yaml


@dataclass
class Train:
    learning_rate: float = 1e-3
    shared_prefix: bool = True  # a key "added since" in these tests


@dataclass
class Stage:
    train: Train = field(default_factory=Train)
    output_dir: str = "runs"
    run_name: str = "grpo"


def old_yaml(cfg: Stage) -> str:
    """The stage's YAML as an rlcw without `train.shared_prefix` wrote it."""
    return "\n".join(line for line in to_yaml(cfg).splitlines() if "shared_prefix" not in line) + "\n"


def test_drift_names_changed_and_added_keys():
    from rlcw.pipelines.stages import config_drift

    assert config_drift(old_yaml(Stage()), Stage()) == ([], ["train.shared_prefix"])
    assert config_drift(to_yaml(Stage()), Stage()) == ([], [])
    off = Stage(train=Train(shared_prefix=False))
    assert config_drift(old_yaml(Stage()), off) == (["train.shared_prefix"], [])
    faster = Stage(train=Train(learning_rate=2e-3))
    assert config_drift(old_yaml(Stage()), faster) == (["train.learning_rate"], ["train.shared_prefix"])
    assert config_drift(to_yaml(Stage()) + "extra: 1\n", Stage())[0] == ["extra"]  # a key rlcw dropped


def test_stage_reused_across_an_added_key_and_rerun_on_a_change(tmp_path, capsys):
    from rlcw.pipelines.stages import Stages

    def finished(cfg: Stage, yaml: str) -> None:
        folder = tmp_path / cfg.run_name
        folder.mkdir(exist_ok=True)
        (folder / "config.yaml").write_text("# rlcw config\n# git abc\n" + yaml)
        (folder / "summary.json").write_text(json.dumps({"status": "completed", "wall_time_s": 5.0}))

    ran = []
    cfg = Stage(output_dir=str(tmp_path))
    finished(cfg, old_yaml(cfg))
    got = Stages(resume=True, label="outcome").run("grpo", lambda c: ran.append(c) or {"status": "completed"}, cfg)
    assert ran == [] and got["wall_time_s"] == 5.0
    assert "lacks keys added since (train.shared_prefix)" in capsys.readouterr().out
    reordered = yaml.safe_dump(yaml.safe_load(to_yaml(cfg)), sort_keys=True)  # same values, another text
    finished(cfg, "run_name: grpo\n" + reordered.replace("run_name: grpo\n", ""))
    Stages(resume=True, label="outcome").run("grpo", lambda c: ran.append(c) or {"status": "completed"}, cfg)
    assert ran == [] and "differs only in retired or reordered keys" in capsys.readouterr().out
    changed = Stage(train=Train(learning_rate=2e-3), output_dir=str(tmp_path))
    Stages(resume=True, label="outcome").run("grpo", lambda c: ran.append(c) or {"status": "completed"}, changed)
    assert ran == [changed] and "config changed" in capsys.readouterr().out


@dataclass
class Rollout:
    kind: str = "plain"
    precision: str = "fp32"


@dataclass
class RetiredTrain:
    learning_rate: float = 1e-3
    log_every: int = 10


@dataclass
class Renamed:
    """A stage config whose `train.*` rollout keys moved into `rollout.*` (as GRPO's did)."""

    train: RetiredTrain = field(default_factory=RetiredTrain)
    rollout: Rollout = field(default_factory=Rollout)
    MOVED_KEYS: ClassVar[dict[str, str]] = {
        "train.rollout_precision": "rollout.precision",
        "train.fast": "rollout.kind=fast",
        "train.log_on": "train.log_every=0 if it was false (true was the default)",
    }
    REMOVED_KEYS: ClassVar[dict[str, str]] = {"train.compact": "always on"}


def saved_before_the_move(precision: str = "fp32", fast: bool = False, log_on: bool = True) -> str:
    """The config.yaml a stage wrote before `rollout:` existed (its keys under train, one since removed)."""
    train = {"learning_rate": 1e-3, "log_every": 10, "compact": True}
    train.update(rollout_precision=precision, fast=fast, log_on=log_on)
    return yaml.safe_dump({"train": train})


def test_moved_keys_are_compared_in_their_new_places_and_removed_ones_not_at_all():
    from rlcw.pipelines.stages import config_drift

    assert config_drift(saved_before_the_move(), Renamed()) == ([], ["rollout.kind"])  # kind: new, at its default
    fast = Renamed(rollout=Rollout(kind="fast"))
    assert config_drift(saved_before_the_move(fast=True), fast) == ([], [])
    assert config_drift(saved_before_the_move(fast=True), Renamed()) == (["rollout.kind"], [])
    assert config_drift(saved_before_the_move("bf16"), Renamed())[0] == ["rollout.precision"]
    never = Renamed(train=RetiredTrain(log_every=0))
    assert config_drift(saved_before_the_move(log_on=False), never)[0] == []
    assert config_drift(saved_before_the_move(log_on=False), Renamed())[0] == ["train.log_every"]


def test_a_grpo_stage_saved_before_the_rollout_section_is_the_same_run():
    """GRPO's own retired keys: a config.yaml with `train.fast_rollout`, `train.rollout_*`, `train.vllm_*`,
    `train.log_kl_to_start` and the removed speed switches, at the values of today's config, shows no drift."""
    from rlcw.pipelines.stages import config_drift
    from rlcw.recipes.grpo import GRPORecipeConfig

    cfg = GRPORecipeConfig()
    cfg.rollout.kind, cfg.rollout.precision = "fast", "bf16"
    saved = yaml.safe_load(to_yaml(cfg))
    rollout = saved.pop("rollout")
    saved["train"].update(
        fast_rollout=True,
        use_vllm=False,
        rollout_precision=rollout["precision"],
        rollout_draw=rollout["draw"],
        rollout_is_cap=rollout["is_cap"],
        vllm_mode=rollout["vllm"]["mode"],
        vllm_server_base_url=rollout["vllm"]["server_base_url"],
        vllm_gpu_memory_utilization=rollout["vllm"]["gpu_memory_utilization"],
        log_kl_to_start=True,
        shared_prefix=True,
        rollout_compact=True,
        rollout_prepack=True,
    )
    # rollout.block_short_endings and rollout.references came after the move: added at their defaults, not a change
    assert config_drift(yaml.safe_dump(saved), cfg) == ([], ["rollout.block_short_endings", "rollout.references"])
    saved["train"]["rollout_draw"] = "inverse_cdf"
    assert config_drift(yaml.safe_dump(saved), cfg)[0] == ["rollout.draw"]
