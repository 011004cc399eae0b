"""The slurm/ scripts on a real one-node Slurm cluster (scripts/slurm_local.sh: munge, slurmctld, slurmd).

1. `sbatch slurm/grpo.sh ...` with NPROC=2: GRPO on 2 CPU ranks on the tiny policy and RM; the
   job must end COMPLETED with exit code 0, both ranks must report world size 2 and identical
   trainable parameters (the test-only hash hook of test_distributed.py), and rank 0 must leave
   the run folder. The job's wall time is printed.
2. A 4-run sweep (`rlcw sweep FILE --slurm`) goes through a job array, then `rlcw summarize`
   collects the 4 summaries into one CSV/markdown table.
Needs root and Debian's slurm-wlm + munge (scripts/services.sh).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_distributed import check_ranks, tiny_grpo_overrides, write_hook
from test_serve_rm import free_port, make_tiny_rm

ROOT = Path(__file__).resolve().parents[2]
NEVER_STARTS = ("PartitionConfig", "BadConstraints", "ReqNodeNotAvail", "PartitionNodeLimit")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running one-node cluster; yields the environment that points Slurm commands at it."""
    if os.geteuid() != 0 or not shutil.which("sbatch") or not shutil.which("munged"):
        pytest.skip("needs root and slurm-wlm + munge (bash scripts/services.sh)")
    state = tmp_path_factory.mktemp("slurm")
    env = {
        **os.environ,
        "RLCW_SLURM_DIR": str(state),
        "SLURMCTLD_PORT": str(free_port()),
        "SLURMD_PORT": str(free_port()),
    }
    out = subprocess.run(
        ["bash", str(ROOT / "scripts/slurm_local.sh"), "start"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    env["SLURM_CONF"] = re.search(r"SLURM_CONF=(\S+)", out.stdout).group(1)
    env["RLCW_VENV"] = sys.prefix  # the job activates the environment running these tests
    yield env
    subprocess.run(["bash", str(ROOT / "scripts/slurm_local.sh"), "stop"], env=env, timeout=60)


def wait_for(job: str, env: dict, timeout: float = 900) -> dict[str, str]:
    """Poll squeue until the job (all array tasks) left the queue; return `scontrol show job` fields."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %r"], env=env, capture_output=True, text=True)
        if queued.returncode == 0 and not queued.stdout.strip():
            break
        if any(reason in queued.stdout for reason in NEVER_STARTS):
            subprocess.run(["scancel", job], env=env)
            pytest.fail(f"job {job} can never start on this cluster: {queued.stdout.strip()}")
        time.sleep(1)
    else:
        subprocess.run(["scancel", job], env=env)
        pytest.fail(f"job {job} still queued or running after {timeout} s")
    shown = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True).stdout
    return {"raw": shown, **dict(re.findall(r"(\w+)=(\S+)", shown))}


def test_sbatch_grpo_two_ranks(slurm, tiny_model_dir, tmp_path):
    rm = make_tiny_rm(tiny_model_dir, tmp_path / "rm")
    hashes = tmp_path / "hashes"
    hashes.mkdir()
    hook = write_hook(tmp_path / "hook")
    env = {
        **slurm,
        "NPROC": "2",
        "OMP_NUM_THREADS": "1",
        "RLCW_TEST_HASH_DIR": str(hashes),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
    }
    overrides = tiny_grpo_overrides(tiny_model_dir, rm, tmp_path / "runs", "slurm-grpo")
    start = time.time()
    sub = subprocess.run(
        ["sbatch", "--parsable", f"--output={tmp_path}/%x-%j.out", "--cpus-per-task=2", "slurm/grpo.sh", *overrides],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    info = wait_for(job, env)
    log = (tmp_path / f"rlcw-grpo-{job}.out").read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", info["raw"] + log[-4000:]
    print(
        f"\nslurm grpo job {job}: {info['JobState']} exit {info['ExitCode']}, run time {info.get('RunTime')}, "
        f"submit-to-done {time.time() - start:.0f} s"
    )
    assert "procs/node=2" in log and "rlcw grpo" in log
    check_ranks(hashes, deepspeed=False)
    run = tmp_path / "runs" / "slurm-grpo"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["metrics"]["train/steps"] == 2.0
    assert (run / "checkpoints" / "final" / "adapter_model.safetensors").is_file()


def test_sweep_job_array_then_summarize(slurm, tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "name: tiny-pairs\ncommand: build-pairs\n"
        f"output_dir: {tmp_path / 'runs'}\n"
        "overrides: ['data.kinds=[shuffle,truncate]']\n"
        "grid:\n  seed: [0, 1]\n  data.chunk_sentences: [3, 4]\n",
        encoding="utf-8",
    )
    env = {**slurm, "OMP_NUM_THREADS": "1"}
    rlcw = [sys.executable, "-m", "rlcw"]
    sub = subprocess.run(
        rlcw + ["sweep", str(sweep), "--slurm", "--logs", str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert sub.returncode == 0, sub.stderr
    job = re.search(r"submitted array job (\d+): 4 task", sub.stdout).group(1)
    start = time.time()
    wait_for(job, env, timeout=600)
    print(f"\nsweep array job {job}: 4 tasks done {time.time() - start:.0f} s after submission")
    root = tmp_path / "runs" / "tiny-pairs"
    for i in range(4):
        task = subprocess.run(
            ["scontrol", "show", "job", f"{job}_{i}"], env=env, capture_output=True, text=True
        ).stdout
        assert "JobState=COMPLETED" in task and "ExitCode=0:0" in task, task + "\n".join(
            p.read_text()[-2000:] for p in tmp_path.glob("*.out")
        )
        assert json.loads((root / f"tiny-pairs-{i:03d}" / "summary.json").read_text())["status"] == "completed"
    out = subprocess.run(
        rlcw + ["summarize", str(root), "--out", str(tmp_path / "table")], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader((tmp_path / "table.csv").open()))
    assert sorted(r["run"] for r in rows) == [f"tiny-pairs-{i:03d}" for i in range(4)]
    assert {(r["override:seed"], r["override:data.chunk_sentences"]) for r in rows} == {
        ("0", "3"),
        ("0", "4"),
        ("1", "3"),
        ("1", "4"),
    }
    assert all(r["status"] == "completed" and r["command"] == "build-pairs" for r in rows)
    assert (tmp_path / "table.md").read_text().count("| tiny-pairs-") == 4
