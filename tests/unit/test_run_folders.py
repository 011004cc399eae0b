"""Run folders never mix runs: refuse, move aside (`overwrite`), or continue (`train.resume`, which keeps the settings
that define the experiment unless `train.resume=changed`) (rlcw.runs, rlcw.run_guard)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import pytest

from rlcw.errors import RlcwError
from rlcw.io import atomic_folder
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import RunKeys
from rlcw.run_guard import experiment_changes
from rlcw.runs import drop_rows_after, prepare_run_folder, purge_tensorboard


@dataclass
class _Train:
    resume: str = "false"
    learning_rate: float = 1e-5
    batch_size: int = 8
    max_steps: int = 4
    save_steps: int = 2


@dataclass
class _Cfg(RunKeys):
    run_name: str = "r"
    train: _Train = field(default_factory=_Train)


def _used_run(root, steps=(1, 2, 3, 4, 5), ckpt=None):
    run = root / "r"
    (run / "checkpoints").mkdir(parents=True)
    (run / "samples").mkdir()
    if ckpt:
        (run / "checkpoints" / ckpt).mkdir()
        (run / "checkpoints" / ckpt / "trainer_state.json").write_text("{}")
    rows = "".join(json.dumps({"step": s, "loss": s / 10}) + "\n" for s in steps)
    (run / "metrics.jsonl").write_text(rows + '{"step": 6, "lo')  # torn by a SIGKILL
    (run / "samples" / "data_order.jsonl").write_text(rows)
    (run / "samples" / "train_step_000005.jsonl").write_text(json.dumps({"id": "a", "step": 5}) + "\n")
    (run / "samples" / "no_steps.jsonl").write_text(json.dumps({"id": "a"}) + "\n")
    return run


def _steps(path):
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_a_used_run_folder_is_refused_and_left_untouched(tmp_path):
    run = _used_run(tmp_path, ckpt="checkpoint-3")
    before = (run / "metrics.jsonl").read_text()
    with pytest.raises(
        RlcwError, match=r"already holds another run: checkpoints/ \(checkpoint-3\); metrics.jsonl"
    ) as e:
        with stage_run(_Cfg(output_dir=str(tmp_path)), "grpo"):
            pytest.fail("the body must not run")
    assert "overwrite=true" in e.value.hint and "train.resume" in e.value.hint
    assert (run / "metrics.jsonl").read_text() == before
    assert not (run / "summary.json").exists() and not (run / "config.yaml").exists()


def test_a_folder_without_checkpoints_or_rows_is_reused(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.yaml").write_text("# a run that failed validation\n")
    with stage_run(_Cfg(output_dir=str(tmp_path)), "grpo") as run:
        assert (run.path / "config.yaml").read_text().startswith("# rlcw grpo")


def test_overwrite_moves_the_old_folder_aside(tmp_path):
    _used_run(tmp_path, ckpt="checkpoint-3")
    with stage_run(_Cfg(output_dir=str(tmp_path), overwrite=True), "grpo") as run:
        assert not (run.path / "metrics.jsonl").exists()
        assert list(run.checkpoints.iterdir()) == []
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("r.replaced-")]
    assert len(aside) == 1 and (aside[0] / "checkpoints" / "checkpoint-3").is_dir()
    _used_run(tmp_path / "again")  # a second replacement in the same second gets its own name
    (tmp_path / "again" / "r").rename(tmp_path / "r2")
    (tmp_path / "r").rename(tmp_path / "r.keep")
    (tmp_path / "r2").rename(tmp_path / "r")
    with stage_run(_Cfg(output_dir=str(tmp_path), overwrite=True), "grpo"):
        pass
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("r.replaced-")]) == 2


def test_overwrite_and_resume_true_contradict(tmp_path):
    with pytest.raises(RlcwError, match="contradict"):
        prepare_run_folder(tmp_path / "r", "true", overwrite=True)


def test_resume_drops_rows_after_the_checkpoint_everywhere(tmp_path):
    run = _used_run(tmp_path, ckpt="checkpoint-3")
    with stage_run(_Cfg(output_dir=str(tmp_path), train=_Train("auto")), "grpo") as r:
        r.log(4, {"loss": 0.0})
    assert _steps(run / "metrics.jsonl") == [1, 2, 3, 4]  # the torn row and 4, 5 of the killed run are gone
    assert _steps(run / "samples" / "data_order.jsonl") == [1, 2, 3]
    assert not (run / "samples" / "train_step_000005.jsonl").exists()
    assert (run / "samples" / "no_steps.jsonl").read_text() == '{"id": "a"}\n'


def test_resume_auto_without_checkpoint_drops_every_step_row(tmp_path):
    run = _used_run(tmp_path)
    assert prepare_run_folder(run, "auto") == -1
    assert not (run / "metrics.jsonl").exists()


def test_drop_rows_after_skips_checkpoints(tmp_path):
    (tmp_path / "checkpoints" / "checkpoint-1").mkdir(parents=True)
    log = tmp_path / "checkpoints" / "checkpoint-1" / "log.jsonl"
    log.write_text('{"step": 9}\n')
    assert drop_rows_after(tmp_path, 1) == {}
    assert log.read_text() == '{"step": 9}\n'


def test_tensorboard_is_purged_from_the_resumed_step(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp_path))
    for step in range(1, 6):
        writer.add_scalar("loss", step, step)
    writer.close()
    purge_tensorboard(tmp_path, 4)
    writer = SummaryWriter(log_dir=str(tmp_path))
    writer.add_scalar("loss", 40, 4)
    writer.close()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(1, 1), (2, 2), (3, 3), (4, 40)]


def test_stage_run_writes_nothing_until_entered(tmp_path):
    stage_run(_Cfg(output_dir=str(tmp_path)), "grpo")
    assert list(tmp_path.iterdir()) == []


def test_atomic_folder_keeps_the_old_folder_on_failure_and_replaces_it_on_success(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "adapter_config.json").write_text("{}")
    with pytest.raises(RuntimeError), atomic_folder(target) as tmp:
        (tmp / "model.safetensors").write_text("half")
        raise RuntimeError("killed")
    assert sorted(p.name for p in target.iterdir()) == ["adapter_config.json"]
    with atomic_folder(target) as tmp:
        (tmp / "model.safetensors").write_text("whole")
        assert not (target / "model.safetensors").exists()
    assert sorted(p.name for p in target.iterdir()) == ["model.safetensors"]  # no stale adapter_config.json
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_quickstart_stages_leave_their_folders_to_the_stage_runner():
    """The quickstart's stage runner reuses a stage folder or moves it aside: a stage's own overwrite would move
    aside the folder of a killed training stage the runner continues."""
    from rlcw.recipes.quickstart import QuickstartConfig, wire

    cfg = QuickstartConfig()
    wire(cfg, "runs/q")
    assert not any(getattr(cfg, n).overwrite for n in ("build_pairs", "train_rm", "grpo", "generate", "export"))


def test_a_user_error_before_any_result_removes_the_new_folder(tmp_path):
    with pytest.raises(RlcwError, match="template"):
        with stage_run(_Cfg(output_dir=str(tmp_path)), "grpo") as run:
            (run.path / "tensorboard").mkdir()
            (run.path / "tensorboard" / "events.out.tfevents.1.host").write_bytes(b"header")
            raise RlcwError("chat template file not found")
    assert not (tmp_path / "r").exists()


def test_a_user_error_after_a_result_keeps_the_folder_marked_failed(tmp_path):
    with pytest.raises(RlcwError):
        with stage_run(_Cfg(output_dir=str(tmp_path)), "judge") as run:
            (run.path / "cache").mkdir()
            (run.path / "cache" / "replies.jsonl").write_text('{"reply": "A"}\n')  # paid-for replies
            raise RlcwError("budget spent")
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["status"] == "failed"
    assert (tmp_path / "r" / "cache" / "replies.jsonl").is_file()


def test_a_crash_keeps_the_folder_for_its_traceback(tmp_path):
    with pytest.raises(ZeroDivisionError):
        with stage_run(_Cfg(output_dir=str(tmp_path)), "grpo"):
            1 / 0  # noqa: B018
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["status"] == "failed"


def test_resume_true_without_a_checkpoint_writes_nothing(tmp_path):
    with pytest.raises(RlcwError, match="no complete checkpoint"):
        with stage_run(_Cfg(output_dir=str(tmp_path), train=_Train("true")), "grpo"):
            pass
    assert not any(tmp_path.iterdir())


def test_a_tracker_that_is_not_installed_writes_nothing(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a))

    @dataclass
    class _T(_Train):
        report_to: list = field(default_factory=lambda: ["tensorboard", "trackio"])

    with pytest.raises(RlcwError, match="report_to=trackio needs the 'trackio' package"):
        with stage_run(_Cfg(output_dir=str(tmp_path), train=_T()), "grpo"):
            pass
    assert not any(tmp_path.iterdir())


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


def test_resume_keeps_a_story_that_holds_a_unicode_line_separator(tmp_path):
    # generated stories contain U+2028 / U+2029 / U+0085; json.dumps(ensure_ascii=False) writes them raw, and
    # str.splitlines would cut such a row in two and drop both halves as torn lines
    from rlcw.io import jsonl_lines, read_jsonl

    story = "A keeper\u2028lost her\u2029wedding\x85day."
    samples = tmp_path / "samples"
    samples.mkdir()
    rows = [{"step": 1, "story": story}, {"step": 5, "story": "later"}]
    (samples / "train.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    assert len(jsonl_lines((samples / "train.jsonl").read_text())) == 2
    assert drop_rows_after(tmp_path, 3) == {"samples/train.jsonl": 1}
    assert read_jsonl(samples / "train.jsonl") == rows[:1]  # the story intact, only the later row gone
