"""rlcw summarize: summary.json files -> one CSV + markdown table, joined with sweep overrides."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from rlcw.errors import RlcwError
from rlcw.recipes.summarize import cli, collect, columns, to_markdown


def _summary(folder: Path, name: str, metrics: dict, status: str = "completed", command: str = "train-rm") -> None:
    (folder / name).mkdir(parents=True)
    (folder / name / "summary.json").write_text(
        json.dumps(
            {
                "command": command,
                "run_name": name,
                "status": status,
                "started_at": 0.0,
                "finished_at": 5.0,
                "wall_time_s": 5.0,
                "git_sha": None,
                "metrics": metrics,
                "artifacts": {},
                "error": None,
            }
        )
    )


def test_table_from_summaries_and_sweep(tmp_path):
    _summary(tmp_path, "s-000", {"eval/accuracy": 0.75, "train/loss": 0.5})
    _summary(tmp_path, "s-001", {"eval/accuracy": 0.5}, status="failed")
    (tmp_path / "s-000" / "checkpoints" / "x").mkdir(parents=True)  # summaries inside checkpoints are skipped
    (tmp_path / "s-000" / "checkpoints" / "x" / "summary.json").write_text("{}")
    (tmp_path / "sweep.json").write_text(
        json.dumps(
            {
                "runs": [
                    {"index": 0, "run_name": "s-000", "overrides": {"lora.r": 8}},
                    {"index": 1, "run_name": "s-001", "overrides": {"lora.r": 16}},
                ]
            }
        )
    )
    assert cli([str(tmp_path), "--out", str(tmp_path / "t")]) == 0
    rows = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert [r["run"] for r in rows] == ["s-000", "s-001"]
    assert list(rows[0]) == [
        "run",
        "command",
        "status",
        "wall_time_s",
        "override:lora.r",
        "eval/accuracy",
        "train/loss",
    ]
    assert (rows[0]["override:lora.r"], rows[0]["eval/accuracy"], rows[0]["train/loss"]) == ("8", "0.75", "0.5")
    assert (rows[1]["status"], rows[1]["train/loss"]) == ("failed", "")  # blank where a run lacks a metric
    md = (tmp_path / "t.md").read_text().splitlines()
    assert md[0] == "| run | command | status | wall_time_s | override:lora.r | eval/accuracy | train/loss |"
    assert md[2] == "| s-000 | train-rm | completed | 5 | 8 | 0.75 | 0.5 |"


def test_json_output(tmp_path, capsys):
    _summary(tmp_path, "a", {"m": 1.0})
    assert cli([str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["m"] == 1.0
    assert (tmp_path / "summary_table.csv").is_file()


def test_errors_name_the_file(tmp_path):
    with pytest.raises(RlcwError, match="no summary.json"):
        collect(tmp_path)
    with pytest.raises(RlcwError, match="not found"):
        collect(tmp_path / "nope")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "summary.json").write_text('{"command": "x"}')
    with pytest.raises(RlcwError) as info:
        collect(tmp_path)
    assert "lacks 'run_name'" in str(info.value) and str(tmp_path / "r" / "summary.json") in str(info.value)


def test_markdown_escapes_pipes():
    rows = [{"run": "a|b", "command": "c", "status": "completed", "wall_time_s": 1.0}]
    assert "a\\|b" in to_markdown(rows, columns(rows))


def test_one_command_and_the_metrics_asked_for(tmp_path, capsys):
    # a quickstart run folder holds its stages' summaries too; --command keeps the quickstart rows
    _summary(
        tmp_path,
        "qs-0",
        {"gate/passed": 1.0, "heldout/ended_short_delta": 0.1, "rm/accuracy": 0.8},
        command="quickstart",
    )
    _summary(tmp_path, "qs-0/grpo", {"train/steps": 24.0}, command="grpo")
    _summary(tmp_path, "qs-1", {"gate/passed": 0.0, "heldout/ended_short_delta_hi": 0.2}, command="quickstart")
    (tmp_path / "sweep.json").write_text(
        json.dumps({"runs": [{"index": 0, "run_name": "qs-0", "overrides": {"seed": 0}}]})
    )
    out = tmp_path / "t"
    assert (
        cli(
            [
                str(tmp_path),
                "--out",
                str(out),
                "--command",
                "quickstart",
                "--metrics",
                "gate/*",
                "heldout/ended_short*",
            ]
        )
        == 0
    )
    rows = list(csv.DictReader(out.with_suffix(".csv").open()))
    assert [r["run"] for r in rows] == ["qs-0", "qs-1"]
    assert list(rows[0]) == [
        "run",
        "command",
        "status",
        "wall_time_s",
        "override:seed",
        "gate/passed",
        "heldout/ended_short_delta",
        "heldout/ended_short_delta_hi",
    ]
    with pytest.raises(RlcwError, match="no metric matches 'slop/\\*'"):
        cli([str(tmp_path), "--out", str(out), "--metrics", "slop/*"])
    with pytest.raises(RlcwError, match="no run of command 'ppo'") as err:
        cli([str(tmp_path), "--out", str(out), "--command", "ppo"])
    assert "grpo" in str(err.value) and "quickstart" in str(err.value)
