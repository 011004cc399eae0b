"""`train.resume` means one thing for every training stage: false | true | auto (rlcw.runs)."""

from __future__ import annotations

import pytest

from rlcw.errors import RlcwError
from rlcw.runs import last_checkpoint, resume_checkpoint, resume_mode


def _ckpt(root, name, complete=True):
    (root / name).mkdir(parents=True)
    if complete:
        (root / name / "trainer_state.json").write_text("{}")


def test_last_checkpoint_takes_the_highest_complete_step(tmp_path):
    _ckpt(tmp_path, "checkpoint-2")
    _ckpt(tmp_path, "checkpoint-10")
    _ckpt(tmp_path, "checkpoint-12", complete=False)  # killed mid-save
    _ckpt(tmp_path, "checkpoint-x")
    assert last_checkpoint(tmp_path).name == "checkpoint-10"


def test_a_checkpoint_cut_before_its_aux_state_is_skipped_or_taken_with_a_warning(tmp_path, capsys):
    # the trainer writes trainer_state.json last, the aux-state callback after it: a kill between the two leaves a
    # checkpoint the trainer finished and the stage did not
    _ckpt(tmp_path, "checkpoint-2")
    (tmp_path / "checkpoint-2" / "aux.json").write_text("{}")
    _ckpt(tmp_path, "checkpoint-3")
    assert last_checkpoint(tmp_path).name == "checkpoint-3"
    assert last_checkpoint(tmp_path, needs=("aux.json",)).name == "checkpoint-2"
    assert resume_checkpoint("true", tmp_path, needs=("aux.json",)).name == "checkpoint-2"
    assert "warning" not in capsys.readouterr().out
    (tmp_path / "checkpoint-2" / "aux.json").unlink()  # none has it: the trainer's last, said out loud
    assert resume_checkpoint("auto", tmp_path, needs=("aux.json",)).name == "checkpoint-3"
    assert "checkpoint-3 has no aux.json: resuming without it" in capsys.readouterr().out


def test_last_checkpoint_reads_ppo_step_folders(tmp_path):
    _ckpt(tmp_path, "step_000003")
    _ckpt(tmp_path, "step_000011")
    _ckpt(tmp_path, "step_000011.tmp")
    assert last_checkpoint(tmp_path).name == "step_000011"
    assert last_checkpoint(tmp_path / "missing") is None


@pytest.mark.parametrize("value,mode", [(False, "false"), (True, "true"), ("auto", "auto"), ("TRUE", "true")])
def test_resume_mode_accepts_yaml_booleans(value, mode):
    assert resume_mode(value) == mode


def test_resume_mode_rejects_other_words():
    with pytest.raises(RlcwError, match="train.resume='yes' is not one of false, true, auto"):
        resume_mode("yes")


def test_resume_true_without_checkpoint_is_an_error_auto_starts_fresh(tmp_path):
    with pytest.raises(RlcwError, match="no complete checkpoint"):
        resume_checkpoint(True, tmp_path)
    assert resume_checkpoint("auto", tmp_path) is None
    _ckpt(tmp_path, "checkpoint-4")
    assert resume_checkpoint("auto", tmp_path).name == "checkpoint-4"
    assert resume_checkpoint("true", tmp_path).name == "checkpoint-4"
    assert resume_checkpoint(False, tmp_path) is None
