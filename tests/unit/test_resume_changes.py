"""A resume continues the experiment its checkpoints belong to: changed settings that define it are refused unless
`train.resume=changed` (rlcw.run_guard.experiment_changes, rlcw.recipes.common.run.check_same_experiment)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from rlcw.errors import RlcwError
from rlcw.recipes.common.run import stage_run
from rlcw.run_guard import experiment_changes


@dataclass
class _Train:
    learning_rate: float = 1e-5
    batch_size: int = 8
    max_steps: int = 4
    save_steps: int = 2
    resume: str = "false"


@dataclass
class _Cfg:
    output_dir: str = "runs"
    run_name: str = "r"
    seed: int = 0
    overwrite: bool = False
    train: _Train = field(default_factory=_Train)


def _trained(tmp_path) -> _Cfg:
    """A run folder with a complete checkpoint at step 2 and metric rows up to step 3."""
    cfg = _Cfg(output_dir=str(tmp_path))
    with stage_run(cfg, "grpo") as run:
        (run.checkpoints / "checkpoint-2").mkdir()
        (run.checkpoints / "checkpoint-2" / "trainer_state.json").write_text("{}")
        for step in (1, 2, 3):
            run.log(step, {"loss": 0.1})
    return cfg


def _resumed(cfg: _Cfg, resume: str, **train) -> _Cfg:
    return replace(cfg, train=replace(cfg.train, resume=resume, **train))


def test_a_resume_that_changes_the_experiment_is_refused_naming_old_and_new(tmp_path):
    cfg = _trained(tmp_path)
    saved = (tmp_path / "r" / "config.yaml").read_text()
    with pytest.raises(RlcwError) as err:
        with stage_run(_resumed(cfg, "auto", learning_rate=1e-3, batch_size=4), "grpo"):
            pytest.fail("the run started")
    text = str(err.value)
    assert "train.learning_rate 1e-05 -> 0.001" in text and "train.batch_size 8 -> 4" in text
    assert "config.yaml" in text and "train.resume=changed" in text
    assert (tmp_path / "r" / "config.yaml").read_text() == saved  # nothing rewritten, no rows dropped
    assert len((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()) == 3


def test_logging_saving_and_more_steps_may_change(tmp_path, capsys):
    cfg = _trained(tmp_path)
    with stage_run(_resumed(cfg, "true", max_steps=8, save_steps=4), "grpo") as run:
        assert "[rlcw] resuming from" in capsys.readouterr().out
        assert "max_steps: 8" in (run.path / "config.yaml").read_text()


def test_resume_changed_keeps_the_old_config_and_writes_the_new_one_beside_it(tmp_path, capsys):
    cfg = _trained(tmp_path)
    saved = (tmp_path / "r" / "config.yaml").read_text()
    with stage_run(_resumed(cfg, "changed", learning_rate=1e-3), "grpo") as run:
        out = capsys.readouterr().out
        assert "resuming with changed settings: train.learning_rate 1e-05 -> 0.001" in out
        assert (run.path / "config.yaml").read_text() == saved
        (aside,) = run.path.glob("config.resumed-*.yaml")
        assert "learning_rate: 0.001" in aside.read_text()


def test_a_spec_added_on_one_side_reads_as_unset():
    old = "reward:\n  specs:\n    rm: {weight: 1.0}\n"
    new = "reward:\n  specs:\n    rm: {weight: 1.0}\n    len: {weight: 0.5}\n"
    assert experiment_changes(old, new) == [("reward.specs.len.weight", "(unset)", 0.5)]
    assert experiment_changes(new, new) == []
