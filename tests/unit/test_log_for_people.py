"""A log for people: `[rlcw] stage: ...` lines, headline numbers per trainer log instead of its whole dict."""

from __future__ import annotations

from types import SimpleNamespace

from rlcw.logs import headline, headline_progress, say


def test_say_prints_one_rlcw_line_on_rank_0_only(capsys, monkeypatch):
    say("grpo", "loading the policy")
    monkeypatch.setenv("RANK", "1")
    say("grpo", "not printed")
    assert capsys.readouterr().out == "[rlcw] grpo: loading the policy\n"


def test_headline_keeps_a_few_numbers_in_a_fixed_order():
    logs = {f"rewards/x{i}/mean": 0.1 for i in range(40)}
    logs.update({"kl": 0.012345, "reward": -0.81234, "loss": 0.5, "completions/mean_length": 61.0, "epoch": 0.3})
    assert headline(logs) == "loss 0.5, reward -0.8123, kl 0.01235, mean_length 61"


def test_the_progress_callback_writes_the_headline_not_the_dict(capsys):
    cb = headline_progress("grpo")
    state = SimpleNamespace(is_world_process_zero=True, global_step=3, max_steps=24)
    cb.on_log(None, state, None, logs={"reward": 0.5, "kl": 0.1, "rewards/rm/mean": 0.2, "step_time": 20.0})
    assert capsys.readouterr().out == "[rlcw] grpo: step 3/24: reward 0.5, kl 0.1\n"
