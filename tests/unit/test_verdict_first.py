"""The verdict first: the quickstart report's first line, the gate in summary.json, the exit status, and what
every finished command prints (report path and its first line, never a JSON dump)."""

from __future__ import annotations

import math

import pytest

from rlcw import cli
from rlcw.runs import RunDir


def _h(**kw) -> dict:
    h = {"rm_delta": 0.21, "rm_delta_lo": 0.05, "rm_delta_hi": 0.37, "in_range_start": 0.33, "in_range_final": 0.52}
    h.update(in_range_delta=0.19, in_range_delta_lo=0.08, in_range_delta_hi=0.3)
    h.update(ended_short_start=0.12, ended_short_final=0.43)
    return {**h, **kw}


def test_the_headline_says_pass_or_fail_with_the_in_range_and_too_short_changes():
    from rlcw.pipelines.quickstart_gates import Check
    from rlcw.pipelines.quickstart_report import headline

    ok = [Check("RM held-out accuracy", True, ""), Check("held-out gain: RM change (95%)", True, "")]
    line = headline(ok, _h())
    assert line.startswith("PASS: held-out RM change +0.21 [+0.05, +0.37]")
    assert "inside the asked range 0.33 -> 0.52 (+0.19 [+0.08, +0.30])" in line
    assert line.endswith("ending too short 0.12 -> 0.43 (+0.31)")
    bad = [Check("RM held-out accuracy on length-matched pairs", False, ""), ok[1]]
    assert headline(bad, _h()).startswith("FAIL (RM held-out accuracy on length-matched pairs): held-out RM")
    assert "nan" in headline(ok, {**_h(), "ended_short_start": math.nan})


@pytest.mark.parametrize(
    ("status", "flag", "code"), [("failed", None, 1), ("failed", "false", 0), ("completed", None, 0)]
)
def test_quickstart_exits_1_when_a_gate_fails_unless_told_not_to(tmp_path, monkeypatch, capsys, status, flag, code):
    import rlcw.recipes.quickstart as qs

    def fake_main(cfg):
        run = RunDir.create(cfg.output_dir, cfg.run_name, "quickstart", "")
        run.write_report("# FAIL (held-out gain): held-out RM change +0.01 [-0.10, +0.12]\n\nmore\n")
        return run.write_summary(status, {"gate/passed": float(status == "completed")}, error="quality gates not met")

    monkeypatch.setattr(qs, "main", fake_main)
    argv = ["quickstart", f"output_dir={tmp_path}"] + ([f"gates.exit_on_fail={flag}"] if flag else [])
    assert cli.run(argv) == code
    out = capsys.readouterr().out
    assert f"[rlcw] report: {tmp_path / 'quickstart' / 'report.md'}" in out
    assert "[rlcw] FAIL (held-out gain): held-out RM change +0.01" in out
    assert "{" not in out  # no JSON dump


def test_a_command_without_a_report_prints_headline_metrics(tmp_path):
    summary = {"command": "generate", "status": "completed", "metrics": {"stories": 8.0, "words/mean": 61.25}}
    text = cli.ending(summary, tmp_path / "gen")
    assert text.splitlines()[0] == f"[rlcw] generate: completed -> {tmp_path / 'gen'}"
    assert "stories 8, words/mean 61.25" in text


def test_other_reports_open_with_done_and_headline_numbers(tmp_path):
    from rlcw.runs import done_line

    metrics = {"train/steps": 24.0, "eval/accuracy": 0.78125, "eval/loss": float("nan"), "time/s": 12.5}
    line = done_line(metrics, {"held-out accuracy": "eval/accuracy", "loss": "eval/loss", "steps": "train/steps"})
    assert line == "DONE: held-out accuracy 0.7812, steps 24"
    assert done_line(metrics, {}, "STOPPED by a monitor", more=1) == "STOPPED by a monitor: train/steps 24"
    run = RunDir.create(str(tmp_path), "r", "train-rm", "")
    run.write_report("# Reward model (bt)\n", line)
    assert (tmp_path / "r" / "report.md").read_text().splitlines()[:3] == [f"# {line}", "", "# Reward model (bt)"]
