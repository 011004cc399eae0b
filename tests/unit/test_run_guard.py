"""What a run checks on this machine before its folder is written (rlcw.recipes.common.run.check_machine): a
writable output_dir that is a folder, a writable $RLCW_CACHE when the embedded model must be converted, wandb
logged in, config numbers in bounds; and the run folder's lock within one process (rlcw.run_guard). Every
refusal leaves nothing behind."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

from rlcw.config import at_least
from rlcw.errors import RlcwError
from rlcw.recipes.common.run import stage_run
from rlcw.recipes.common.sections import RunKeys
from rlcw.run_guard import LOCK_FILE, check_writable, lock_run_folder
from rlcw.tracking import check_trackers, wandb_logged_in


@dataclass
class _Train:
    resume: str = "false"
    report_to: list[str] = field(default_factory=list)
    max_steps: int = at_least(1, 3)


@dataclass
class _Cfg(RunKeys):
    run_name: str = "r"
    model: str = "some/model"
    train: _Train = field(default_factory=_Train)


def _refused(cfg: _Cfg, match: str) -> RlcwError:
    with pytest.raises(RlcwError, match=match) as info:
        with stage_run(cfg, "test"):
            pytest.fail("the run started")
    return info.value


def test_an_output_dir_that_is_a_file_is_named(tmp_path):
    target = tmp_path / "runs.txt"
    target.write_text("not a folder")
    err = _refused(_Cfg(output_dir=str(target)), "is a file, not a folder")
    assert "output_dir" in str(err) and str(target) in str(err)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "r").write_text("a file where the run folder goes")
    _refused(_Cfg(output_dir=str(tmp_path / "runs")), "is a file, not a folder")
    assert target.read_text() == "not a folder" and sorted(p.name for p in tmp_path.iterdir()) == ["runs", "runs.txt"]


def _read_only(monkeypatch, folder):
    """`folder` cannot be written: by its mode, and for root (who writes anyway) as a read-only mount answers."""
    folder.chmod(0o555)
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(folder) else real(p, mode))


def test_an_output_dir_that_cannot_be_written_is_named(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    _read_only(monkeypatch, locked)
    err = _refused(_Cfg(output_dir=str(locked / "runs")), "cannot write in")
    assert "output_dir" in str(err) and str(locked) in str(err)
    assert list(locked.iterdir()) == []


def test_an_unwritable_cache_is_named_when_the_embedded_model_must_be_converted(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    _read_only(monkeypatch, cache)
    monkeypatch.setenv("RLCW_CACHE", str(cache))
    runs = tmp_path / "runs"
    _refused(_Cfg(output_dir=str(runs), model="smollm2-135m-instruct"), r"\$RLCW_CACHE")
    assert not runs.exists()
    monkeypatch.setenv("RLCW_CACHE", str(tmp_path / "cache-file"))
    (tmp_path / "cache-file").write_text("")
    _refused(_Cfg(output_dir=str(runs), model="smollm2-135m-instruct"), "is a file, not a folder")
    with stage_run(_Cfg(output_dir=str(runs)), "test") as run:  # another model: the cache is not needed
        assert run.path.is_dir()


def test_check_writable_creates_nothing(tmp_path):
    check_writable(tmp_path / "a" / "b" / "c", "output_dir")
    assert list(tmp_path.iterdir()) == []


def _no_wandb_login(monkeypatch, tmp_path):
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_DISABLED", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))


def test_wandb_without_a_login_is_an_error_before_the_run_folder(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    _no_wandb_login(monkeypatch, tmp_path)
    runs = tmp_path / "runs"
    err = _refused(_Cfg(output_dir=str(runs), train=_Train(report_to=["wandb"])), "wandb is not logged in")
    assert "train.report_to" in str(err) and "WANDB_MODE=offline" in str(err)
    assert not runs.exists()
    monkeypatch.setenv("WANDB_MODE", "offline")
    check_trackers(["wandb"])


def test_wandb_login_is_read_from_the_environment_and_netrc(tmp_path, monkeypatch):
    _no_wandb_login(monkeypatch, tmp_path)
    assert not wandb_logged_in()
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password k" + "0" * 39 + "\n")
    assert wandb_logged_in()
    assert not wandb_logged_in({"NETRC": str(tmp_path / "netrc"), "WANDB_BASE_URL": "https://wandb.example.org"})
    assert wandb_logged_in({"WANDB_API_KEY": "x" * 40}) and wandb_logged_in({"WANDB_MODE": "disabled"})


def test_bounds_hold_for_a_config_built_in_code(tmp_path):
    runs = tmp_path / "runs"
    _refused(_Cfg(output_dir=str(runs), train=_Train(max_steps=0)), "train.max_steps must be at least 1, got 0")
    assert not runs.exists()


def test_a_run_holds_its_folder_lock_and_releases_it(tmp_path):
    import fcntl

    with stage_run(_Cfg(output_dir=str(tmp_path)), "test") as run:
        lock = run.path / LOCK_FILE
        assert lock.read_text().strip() == str(os.getpid())
        fd = os.open(lock, os.O_RDWR)  # another open file: the lock conflicts with it as with another process
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the run ended
    os.close(fd)


def test_a_folder_refused_after_locking_is_removed_when_this_run_made_it(tmp_path):
    from rlcw.runs import RunDir

    with pytest.raises(RlcwError, match="contradict"):
        RunDir.create(str(tmp_path), "r", "test", "", resume="true", overwrite=True)
    assert list(tmp_path.iterdir()) == []  # the folder (and its lock file) the lock had created is gone
    (tmp_path / "r" / "checkpoints" / "checkpoint-1").mkdir(parents=True)
    (tmp_path / "r" / "checkpoints" / "checkpoint-1" / "trainer_state.json").write_text("{}")
    with pytest.raises(RlcwError, match="contradict"):
        RunDir.create(str(tmp_path), "r", "test", "", resume="true", overwrite=True)
    assert (tmp_path / "r" / "checkpoints" / "checkpoint-1").is_dir()  # a used folder is kept as it was
    lock = lock_run_folder(tmp_path / "r")  # released: this process may take it again, and a nested stage too
    assert lock_run_folder(tmp_path / "r").fd is None
    lock.release()


@dataclass
class _Model:
    name: str = "some/model"


@dataclass
class _CfgWithModel(RunKeys):
    run_name: str = "export"
    model: _Model = field(default_factory=_Model)


def test_an_unfinished_run_given_as_the_model_names_its_status_and_the_resume_before_a_run_folder(tmp_path):
    run = tmp_path / "grpo"
    (run / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (run / "checkpoints" / "checkpoint-2" / "trainer_state.json").write_text("{}")
    (run / "summary.json").write_text('{"status": "interrupted"}')
    runs = tmp_path / "runs"
    cfg = _CfgWithModel(output_dir=str(runs), model=_Model(name=str(run / "checkpoints" / "final")))
    err = _refused(cfg, r"checkpoints/final: the run has not finished \(status interrupted\)")
    assert "rerun its command with train.resume=true (it continues from checkpoint-2)" in str(err)
    assert not runs.exists()
