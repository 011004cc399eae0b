"""The outcome study reuses a finished stage whose config lacks only keys rlcw added since (at their defaults),
and reruns one whose values changed or whose new key was set away from its default."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

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
    changed = Stage(train=Train(learning_rate=2e-3), output_dir=str(tmp_path))
    Stages(resume=True, label="outcome").run("grpo", lambda c: ran.append(c) or {"status": "completed"}, changed)
    assert ran == [changed] and "config changed" in capsys.readouterr().out
