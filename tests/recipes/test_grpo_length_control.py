"""The GRPO report states what each BT reward's length_control (auto | true | false) resolved to."""

from __future__ import annotations

from pathlib import Path


def test_report_states_resolved_length_control(grpo_run):
    report = (Path(grpo_run["artifacts"]["metrics"]).parent / "report.md").read_text()
    assert "- length control of `rm`: off (raw scores)" in report  # auto, nothing installed
