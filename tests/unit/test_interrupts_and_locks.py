"""Stopping a command and sharing a run folder, with real processes running `rlcw` on a stage that logs one step
and then waits (a recipe as small as a recipe can be: stage_run, a metric row, a loop).

Ctrl-C (SIGINT) and SIGTERM (what Slurm sends) each end the command with one line and no traceback, mark
summary.json `interrupted`, print the command that resumes it, and exit 130 / 143; `rlcw summarize` shows the
status. A second process that tries the same run folder is refused, naming the folder and the PID holding it; a
run killed with SIGKILL leaves no lock that blocks the next one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlcw import cli

STAGE = '''"""A stage that logs one step, says so, and waits."""

import time
from dataclasses import dataclass, field

from rlcw.recipes.common.run import stage_run


@dataclass
class SlowTrain:
    resume: str = "false"
    steps: int = 2000  # 0.05 s each


@dataclass
class SlowConfig:
    train: SlowTrain = field(default_factory=SlowTrain)
    output_dir: str = "runs"
    run_name: str = "slow"
    seed: int = 0
    overwrite: bool = False


def main(cfg):
    with stage_run(cfg, "slow") as run:
        run.log(1, {"loss": 1.0})
        print("started", flush=True)
        for _ in range(cfg.train.steps):
            time.sleep(0.05)
        return run.write_summary("completed")
'''
LAUNCH = (
    "import sys\nfrom rlcw import cli\n"
    "cli.COMMANDS['slow'] = ('slow_stage', 'SlowConfig', 'logs a step, then waits')\ncli.main(sys.argv[1:])\n"
)


@pytest.fixture
def rlcw_slow(tmp_path):
    """Start `rlcw slow ARGS` in a new process (the stage module importable), returning the Popen."""
    (tmp_path / "slow_stage.py").write_text(STAGE, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1"}
    started = []

    def start(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, "slow", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # a shell's background job ignores SIGINT and Python then keeps ignoring it: a terminal's process does not
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_started(proc: subprocess.Popen, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    line = b""
    while time.monotonic() < deadline and b"started" not in line:
        line = proc.stdout.readline()
        assert line or proc.poll() is None, proc.stderr.read().decode()
    assert b"started" in line, "the stage did not start in time"


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_marks_the_run_and_prints_how_to_resume(rlcw_slow, tmp_path, capsys, signum, code):
    out = tmp_path / "runs"
    proc = rlcw_slow(f"output_dir={out}", "train.resume=false")
    _wait_started(proc)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    err = err.decode()
    assert proc.returncode == code
    assert "Traceback" not in err
    name = signal.Signals(signum).name
    lines = err.strip().splitlines()
    assert (
        lines[0] == f"rlcw: interrupted ({name}): slow stopped; {out / 'slow'}/summary.json says status 'interrupted'"
    )
    assert lines[1].startswith(f"rlcw: resume with: rlcw slow output_dir={out} train.resume=auto")
    assert "train.resume=false" not in lines[1]
    summary = _summary(out / "slow")
    assert summary["status"] == "interrupted" and summary["error"] == f"interrupted by {name}"
    assert cli.run(["summarize", str(out)]) == 0
    assert "| interrupted |" in capsys.readouterr().out


def test_a_second_process_is_refused_and_a_killed_run_leaves_no_lock(rlcw_slow, tmp_path):
    out = tmp_path / "runs"
    first = rlcw_slow(f"output_dir={out}")
    _wait_started(first)
    second = rlcw_slow(f"output_dir={out}", "train.resume=auto", "train.steps=0")
    _, err = second.communicate(timeout=240)
    err = err.decode()
    assert second.returncode == 2 and "Traceback" not in err
    assert err.startswith(f"rlcw: error: {out / 'slow'}: the run folder is in use by another rlcw process")
    assert f"(PID {first.pid})" in err
    assert _summary(out / "slow")["status"] == "running"  # the first run's folder is untouched
    first.send_signal(signal.SIGKILL)  # no cleanup at all: only the kernel releases the lock
    first.wait(timeout=60)
    third = rlcw_slow(f"output_dir={out}", "train.resume=auto", "train.steps=0")
    _, err = third.communicate(timeout=240)
    assert third.returncode == 0, err.decode()
    assert _summary(out / "slow")["status"] == "completed"
