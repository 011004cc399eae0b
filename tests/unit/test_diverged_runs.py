"""A logged loss or reward that is not finite ends the run as failed (rlcw.measure.callbacks, rlcw.errors.RunFailed)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from rlcw.errors import RunFailed
from rlcw.measure.callbacks import JsonlMetricsCallback
from rlcw.runs import RunDir


@pytest.mark.parametrize("key,value", [("loss", math.nan), ("reward", math.inf), ("loss", -math.inf)])
def test_a_non_finite_loss_or_reward_ends_the_run(tmp_path, key, value):
    run = RunDir(tmp_path, "grpo")
    state = SimpleNamespace(global_step=7, is_world_process_zero=True)
    callback = JsonlMetricsCallback(run)
    callback.on_log(None, state, None, logs={"loss": 0.5, "reward": 0.1})
    with pytest.raises(RunFailed, match=f"training diverged: {key} became {value} at step 7") as e:
        callback.on_log(None, state, None, logs={"loss": 0.4, key: value})
    assert "train.learning_rate" in str(e.value) and str(tmp_path) in str(e.value)
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2  # the last row is kept


def test_other_non_finite_values_are_left_out_of_the_row_not_fatal(tmp_path):
    run = RunDir(tmp_path, "grpo")
    state = SimpleNamespace(global_step=1, is_world_process_zero=True)
    JsonlMetricsCallback(run).on_log(None, state, None, logs={"loss": 0.5, "grad_norm": math.nan})
    assert "grad_norm" not in (tmp_path / "metrics.jsonl").read_text()
