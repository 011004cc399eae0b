"""rlcw sweep: grid/zip expansion, validation of every run before anything runs, dry run, --index."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcw.errors import RlcwError
from rlcw.recipes import sweep as sw

SWEEPS = Path(__file__).resolve().parents[2] / "configs" / "sweeps"


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_expand_product_and_zip():
    runs = sw.expand({"a": [1, 2], "b": ["x", "y"]}, {"lr": [0.1, 0.2, 0.3], "steps": [30, 20, 10]})
    assert len(runs) == 2 * 2 * 3
    assert runs[0] == {"a": 1, "b": "x", "lr": 0.1, "steps": 30}
    assert runs[1] == {"a": 1, "b": "x", "lr": 0.2, "steps": 20}  # zip axis varies fastest, lr and steps move together
    assert runs[-1] == {"a": 2, "b": "y", "lr": 0.3, "steps": 10}
    assert {(r["lr"], r["steps"]) for r in runs} == {(0.1, 30), (0.2, 20), (0.3, 10)}
    assert sw.expand({}, {}) == [{}]  # no axes: one run with the base config


def test_format_value_is_yaml_flow():
    assert [sw.format_value(v) for v in (True, None, 3, 1e-4, "abc", [1, "a"], {"k": 1})] == [
        "true",
        "null",
        "3",
        "0.0001",
        "abc",
        '[1, "a"]',
        '{"k": 1}',
    ]


def test_load_sweep_names_runs_and_argv(tmp_path):
    path = _file(
        tmp_path,
        "name: t\ncommand: build-pairs\noutput_dir: OUT\noverrides: [data.eval_fraction=0.2]\n"
        "grid: {seed: [0, 1]}\nzip: {data.chunk_sentences: [3, 4], data.tolerance: [0.1, 0.2]}\n",
    )
    s = sw.load_sweep(path)
    assert [r["run_name"] for r in s.runs] == ["t-000", "t-001", "t-002", "t-003"]
    assert s.argv(s.runs[3]) == [
        "build-pairs",
        "data.eval_fraction=0.2",
        "seed=1",
        "data.chunk_sentences=4",
        "data.tolerance=0.2",
        "output_dir=OUT/t",
        "run_name=t-003",
    ]


@pytest.mark.parametrize(
    "text, words",
    [
        ("name: t\ncommand: build-pairs\ngrid: {data.chunk_sentence: [3]}\n", "data.chunk_sentence"),  # misspelt key
        ("name: t\ncommand: build-pairs\ngrid: {seed: [0, many]}\n", "seed"),  # wrong type in run 1
        ("name: t\ncommand: build-pairs\noverrides: [nosuch=1]\n", "nosuch"),
        ("name: t\ncommand: build-pairz\n", "build-pairz"),
        ("name: t\ncommand: summarize\n", "not a command with a config"),
        ("name: t\ncommand: build-pairs\nzip: {seed: [0, 1], data.tolerance: [0.1]}\n", "same length"),
        ("name: t\ncommand: build-pairs\ngrid: {run_name: [a, b]}\n", "cannot be swept"),
        ("name: t\ncommand: build-pairs\ngrid: {seed: []}\n", "non-empty list"),
        ("name: t\ncommand: build-pairs\ngird: {seed: [0]}\n", "unknown sweep key 'gird'"),
        ("command: build-pairs\n", "'name' is required"),
        ("name: a b\ncommand: build-pairs\n", "letters, digits"),
    ],
)
def test_bad_sweeps_fail_before_anything_runs(tmp_path, monkeypatch, text, words):
    ran = []
    monkeypatch.setattr(sw.subprocess, "run", lambda *a, **k: ran.append(a))
    path = _file(tmp_path, text + f"output_dir: {tmp_path / 'runs'}\n")
    with pytest.raises(RlcwError) as info:
        sw.cli([str(path)])
    assert words in str(info.value)
    assert ran == [] and not (tmp_path / "runs").exists()  # nothing ran, nothing written


def test_dry_run_prints_and_runs_nothing(tmp_path, monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(sw.subprocess, "run", lambda *a, **k: ran.append(a))
    path = _file(tmp_path, f"name: t\ncommand: build-pairs\noutput_dir: {tmp_path}\ngrid: {{seed: [0, 1, 2]}}\n")
    assert sw.cli([str(path), "--dry-run", "--slurm"]) == 0
    out = capsys.readouterr().out
    assert "3 run(s) of 'build-pairs', all configs valid" in out and "run_name=t-002" in out
    assert "sbatch --parsable --array=0-2" in out
    assert ran == [] and not (tmp_path / "t").exists()


def test_dry_run_through_the_rlcw_command(tmp_path, monkeypatch, capsys):
    # `rlcw sweep FILE --dry-run` as the docs write it: --dry-run is the sweep's own flag, not --check
    from rlcw import cli

    ran = []
    monkeypatch.setattr(sw.subprocess, "run", lambda *a, **k: ran.append(a))
    assert cli.run(["sweep", str(SWEEPS / "quickstart_seeds.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "6 run(s) of 'quickstart', all configs valid" in out and "seed=5" in out
    assert ran == []
    with pytest.raises(RlcwError, match="'rlcw sweep' has no --check"):
        cli.run(["sweep", str(SWEEPS / "quickstart_seeds.yaml"), "--check"])


def test_index_runs_only_that_run(tmp_path, monkeypatch):
    calls = []

    class Done:
        returncode = 0

    monkeypatch.setattr(sw.subprocess, "run", lambda argv, **k: calls.append(argv) or Done())
    path = _file(tmp_path, f"name: t\ncommand: build-pairs\noutput_dir: {tmp_path}\ngrid: {{seed: [5, 6, 7]}}\n")
    assert sw.cli([str(path), "--index", "1"]) == 0
    assert len(calls) == 1 and "seed=6" in calls[0] and "run_name=t-001" in calls[0]
    with pytest.raises(RlcwError, match="out of range"):
        sw.cli([str(path), "--index", "3"])


def test_local_run_reports_failures(tmp_path, monkeypatch):
    codes = iter([0, 1])

    class Result:
        def __init__(self):
            self.returncode = next(codes)

    monkeypatch.setattr(sw.subprocess, "run", lambda argv, **k: Result())
    path = _file(tmp_path, f"name: t\ncommand: build-pairs\noutput_dir: {tmp_path}\ngrid: {{seed: [0, 1]}}\n")
    assert sw.cli([str(path)]) == 1
    assert (tmp_path / "t" / "sweep.json").is_file()


@pytest.mark.parametrize("path", sorted(SWEEPS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_sweeps_are_valid(path):
    s = sw.load_sweep(path)
    assert len(s.runs) >= 2 and len({r["run_name"] for r in s.runs}) == len(s.runs)
    assert path.read_text().startswith("#")  # says how to launch it


def test_slurm_submits_the_frozen_sweep(tmp_path, monkeypatch):
    """--slurm copies the base config and hands the array the manifest: later edits of the sweep
    YAML or the base config do not change what the tasks run."""
    calls = []

    class Submitted:
        returncode, stdout, stderr = 0, "41\n", ""

    monkeypatch.setattr(sw.subprocess, "run", lambda argv, **k: calls.append(argv) or Submitted())
    base = tmp_path / "base.yaml"
    base.write_text("data:\n  eval_fraction: 0.3\n", encoding="utf-8")
    text = f"name: t\ncommand: build-pairs\nconfig: {base}\noutput_dir: {tmp_path / 'out'}\ngrid: {{seed: [5, 6]}}\n"
    path = _file(tmp_path, text)
    logs = tmp_path / "newlogs"
    assert sw.cli([str(path), "--slurm", "--logs", str(logs)]) == 0
    manifest = tmp_path / "out" / "t" / "sweep.json"
    assert calls[0][-2:] == [str(sw.REPO / "slurm" / "sweep_array.sh"), str(manifest)]
    assert f"--output={logs}/%x-%A_%a.out" in calls[0] and logs.is_dir()  # made before sbatch opens it
    # edit both files after submission, as a user may while the array waits in the queue
    path.write_text(text.replace("[5, 6]", "[7, 8, 9]"), encoding="utf-8")
    base.write_text("data:\n  eval_fraction: 0.9\n", encoding="utf-8")
    frozen = sw.load_sweep(manifest)
    argv = frozen.argv(frozen.runs[1])
    assert [r["overrides"] for r in frozen.runs] == [{"seed": 5}, {"seed": 6}]
    assert argv[:3] == ["build-pairs", "--config", str(tmp_path / "out" / "t" / "sweep_config.yaml")]
    assert "eval_fraction: 0.3" in (tmp_path / "out" / "t" / "sweep_config.yaml").read_text()
    assert "seed=6" in argv and f"output_dir={tmp_path / 'out' / 't'}" in argv and "run_name=t-001" in argv
    ran = []

    class Done:
        returncode = 0

    monkeypatch.setattr(sw.subprocess, "run", lambda argv, **k: ran.append(argv) or Done())
    assert sw.cli([str(manifest), "--index", "1"]) == 0  # what array task 1 runs
    assert ran[0][3:] == argv


def test_frozen_manifest_must_be_whole(tmp_path):
    bad = tmp_path / "sweep.json"
    bad.write_text('{"name": "t", "runs": []}', encoding="utf-8")
    with pytest.raises(RlcwError, match="not a frozen sweep manifest"):
        sw.load_sweep(bad)
