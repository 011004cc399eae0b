"""The shared stage runner (rlcw.pipelines.stages): a finished stage is cached, a changed one re-runs and, in a
chained pipeline, so does every stage after it; resume off (a pipeline's overwrite=true) runs every stage again."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from rlcw.pipelines.stages import Stages
from rlcw.recipes.common.run import stage_run


@dataclass
class _StageTrain:
    resume: str = "false"


@dataclass
class _ResumableStage:  # module level: OmegaConf resolves the annotations of a structured config by name
    value: int = 1
    output_dir: str = "."
    run_name: str = "stage"
    seed: int = 0
    train: _StageTrain = field(default_factory=_StageTrain)


def _pipeline(tmp_path, ran: list[str], a: int = 1, b: int = 1, step: int = 1, resume: bool = True, chain=True):
    """Three stages in order: recipe a, recipe b, then a cached step c; `ran` collects what ran."""

    def recipe(cfg):
        with stage_run(cfg, "demo") as run:
            ran.append(cfg.run_name)
            return run.write_summary("completed", {"value": cfg.value})

    def make(folder):
        ran.append("c")
        (folder / "out.txt").write_text("made")
        return {"made": step}

    st = Stages(resume, "demo", chain=chain)
    st.run("a", recipe, _ResumableStage(value=a, output_dir=str(tmp_path), run_name="a"))
    st.run("b", recipe, _ResumableStage(value=b, output_dir=str(tmp_path), run_name="b"))
    return st, st.cached("c", tmp_path / "c", {"step": step}, make)


def test_a_second_run_with_the_same_settings_is_cached(tmp_path, capsys):
    ran: list[str] = []
    _pipeline(tmp_path, ran)
    assert ran == ["a", "b", "c"]
    st, result = _pipeline(tmp_path, ran)
    assert ran == ["a", "b", "c"] and result == {"made": 1}  # the step's result comes back from done.json
    out = capsys.readouterr().out
    assert out.count(": cached (") == 3 and "[demo] b: cached (completed before, reused)" in out
    assert set(st.timings) == {"a", "b", "c"}


def test_a_changed_stage_reruns_with_every_stage_after_it(tmp_path, capsys):
    ran: list[str] = []
    _pipeline(tmp_path, ran)
    _pipeline(tmp_path, ran, b=2)  # b's setting changed: b and c run again, a is cached
    assert ran == ["a", "b", "c", "b", "c"]
    assert "c (c): an earlier stage ran again since" in capsys.readouterr().out
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["metrics"] == {"value": 2}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("b.replaced-")]  # the old b kept aside
    _pipeline(tmp_path, ran, b=2)
    assert ran == ["a", "b", "c", "b", "c"]  # now all cached again
    _pipeline(tmp_path, ran, b=2, step=3)  # the last step's own key changed: it alone runs
    assert ran[5:] == ["c"]


def test_a_stage_left_stale_by_a_kill_reruns_on_the_next_run(tmp_path):
    ran: list[str] = []
    _pipeline(tmp_path, ran)
    st = Stages(True, "demo", chain=True)

    def recipe(cfg):
        with stage_run(cfg, "demo") as run:
            ran.append(cfg.run_name)
            return run.write_summary("completed", {"value": cfg.value})

    st.run(
        "a", recipe, _ResumableStage(value=5, output_dir=str(tmp_path), run_name="a")
    )  # a re-run, then killed before b
    _pipeline(tmp_path, ran, a=5)  # a is cached now, but b and c started before it finished: they run again
    assert ran == ["a", "b", "c", "a", "b", "c"]


def test_without_chain_later_stages_are_reused(tmp_path):
    ran: list[str] = []
    _pipeline(tmp_path, ran, chain=False)
    _pipeline(tmp_path, ran, b=2, chain=False)
    assert ran == ["a", "b", "c", "b"]  # the outcome study's recipe stages: each judged by its own settings


def test_resume_off_runs_every_stage_again_and_keeps_the_old_folders(tmp_path):
    ran: list[str] = []
    _pipeline(tmp_path, ran)
    _pipeline(tmp_path, ran, resume=False)
    assert ran == ["a", "b", "c", "a", "b", "c"]
    aside = sorted(p.name.split(".")[0] for p in tmp_path.iterdir() if ".replaced-" in p.name)
    assert aside == ["a", "b"]


def test_an_old_done_record_without_times_is_still_reused(tmp_path):
    """done.json as an rlcw before the shared runner wrote it ({"key", "wall_time_s"}) keeps its step cached."""
    folder = tmp_path / "pool"
    folder.mkdir()
    (folder / "done.json").write_text(json.dumps({"key": {"n": 4}, "wall_time_s": 3.5}))
    calls = []
    st = Stages(True, "outcome")
    assert st.cached("pool", folder, {"n": 4}, calls.append) is None
    assert calls == [] and st.timings == {"pool": 3.5}


def test_stages_reuse_same_config_and_move_a_changed_one_aside(tmp_path):
    @dataclass
    class Cfg:
        value: int = 1
        output_dir: str = str(tmp_path)
        run_name: str = "stage"
        seed: int = 0

    calls = []

    def fn(cfg):
        with stage_run(cfg, "demo") as run:
            calls.append(cfg.value)
            (run.path / "checkpoints" / f"made-by-{cfg.value}").mkdir()
            return run.write_summary("completed", {"value": cfg.value})

    st = Stages(resume=True, label="outcome")
    st.run("stage", fn, Cfg())
    assert st.run("stage", fn, Cfg())["metrics"] == {"value": 1} and calls == [1]  # same config: reused
    st.run("stage", fn, Cfg(value=2))  # changed: run again in a clean folder, the old one kept aside
    assert calls == [1, 2] and [p.name for p in (tmp_path / "stage" / "checkpoints").iterdir()] == ["made-by-2"]
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("stage.replaced-")]
    assert len(aside) == 1 and (aside[0] / "checkpoints" / "made-by-1").is_dir()


def test_a_stage_killed_under_the_same_config_continues_from_its_last_checkpoint(tmp_path):
    def Cfg(value=1):  # noqa: N802 - reads like the dataclass it builds
        return _ResumableStage(value=value, output_dir=str(tmp_path))

    calls = []

    def fn(cfg, die=False):
        with stage_run(cfg, "demo") as run:
            calls.append(cfg.train.resume)
            done = sorted(p.name for p in run.checkpoints.glob("checkpoint-*"))
            for step in (2, 4):
                if f"checkpoint-{step}" not in done:
                    (run.checkpoints / f"checkpoint-{step}").mkdir(parents=True)
                    (run.checkpoints / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
                    if die:
                        raise KeyboardInterrupt  # killed after its first checkpoint
            return run.write_summary("completed", {"checkpoints": len(list(run.checkpoints.iterdir()))})

    st = Stages(resume=True, label="outcome")
    with pytest.raises(KeyboardInterrupt):
        st.run("stage", lambda c: fn(c, die=True), Cfg())
    out = st.run("stage", fn, Cfg())  # same config: continued in the same folder, checkpoint-2 kept
    assert calls == ["false", "auto"] and out["metrics"] == {"checkpoints": 2}
    assert not [p for p in tmp_path.iterdir() if ".replaced-" in p.name]
    assert st.run("stage", fn, Cfg())["status"] == "completed" and len(calls) == 2  # then reused as completed
    with pytest.raises(KeyboardInterrupt):  # a killed stage whose config changed starts clean, old folder aside
        st.run("stage", lambda c: fn(c, die=True), Cfg(value=2))
    st.run("stage", fn, Cfg(value=3))
    assert calls[-1] == "false" and len([p for p in tmp_path.iterdir() if ".replaced-" in p.name]) == 2


def test_cached_steps_rerun_when_killed_or_changed_and_are_reused_otherwise(tmp_path):
    calls = []

    def make(folder):
        calls.append(folder.name)
        (folder / "out.txt").write_text(str(len(calls)))

    st = Stages(resume=True, label="outcome")
    st.cached("step", tmp_path / "a", {"n": 1}, make)
    st.cached("step", tmp_path / "a", {"n": 1}, make)  # same settings: reused
    assert calls == ["a"] and (tmp_path / "a" / "done.json").is_file()
    st.cached("step", tmp_path / "a", {"n": 2}, make)  # new settings: made again
    assert calls == ["a", "a"] and (tmp_path / "a" / "out.txt").read_text() == "2"
    (tmp_path / "a" / "done.json").unlink()  # killed before done.json was written
    st.cached("step", tmp_path / "a", {"n": 2}, make)
    assert len(calls) == 3
    Stages(resume=False, label="outcome").cached("step", tmp_path / "a", {"n": 2}, make)  # resume=false always makes
    assert len(calls) == 4
