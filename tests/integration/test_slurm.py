"""The slurm/ scripts on a real one-node Slurm cluster (scripts/slurm_local.sh: munge, slurmctld, slurmd).

1. `sbatch slurm/grpo.sh ...` with NPROC=2: GRPO on 2 CPU ranks on the tiny policy and RM; the
   job must end COMPLETED with exit code 0, both ranks must report world size 2 and identical
   trainable parameters (the test-only hash hook of test_distributed.py), and rank 0 must leave
   the run folder. The job's wall time is printed.
2. A 4-run sweep (`rlcw sweep FILE --slurm`) goes through a job array (the sweep YAML is broken
   right after submission: the tasks read the frozen sweep.json), then `rlcw summarize` collects the
   4 summaries into one CSV/markdown table.
3. Requeue: a PPO job with `--requeue` is requeued by `scontrol requeue` and then by USR1 to its
   batch shell (the time-limit signal); each start resumes from the last checkpoint.
4. slurm/submit.sh makes a missing log folder before sbatch opens the job's output there.
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


def test_sbatch_grpo_two_ranks(slurm, tiny_model_dir, tmp_path, short_references):
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
    # the shipped CPU config at the tiny sizes: its fast rollout with reference injection on 2 DDP ranks (the bundled
    # references do not fit the 8-token cap: short ones instead)
    overrides = ["--config", str(ROOT / "configs/grpo/cpu.yaml")]
    overrides += [
        *tiny_grpo_overrides(tiny_model_dir, rm, tmp_path / "runs", "slurm-grpo"),
        f"rollout.references={short_references}",
    ]
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
    # Slurm >= 22.05 does not hand --cpus-per-task down to srun: lib.sh passes it on
    launch = re.search(r"^rlcw launch: (.*)$", log, re.M).group(1).split()
    assert launch[:2] == ["srun", "--ntasks-per-node=1"] and "--cpus-per-task=2" in launch, launch
    assert launch[launch.index("torchrun") :][:5] == ["torchrun", "--nnodes", "1", "--nproc_per_node", "2"], launch
    check_ranks(hashes, deepspeed=False)
    run = tmp_path / "runs" / "slurm-grpo"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["metrics"]["train/steps"] == 2.0
    assert (run / "checkpoints" / "final" / "adapter_model.safetensors").is_file()
    assert "fast rollout" in log and "cover 8 of 8 training prompts" in log
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout/references"] for r in metrics if "rollout/references" in r] == [2.0, 2.0]


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
    # edited while the tasks wait in the queue: they must run the sweep as submitted (the frozen sweep.json)
    sweep.write_text("name: tiny-pairs\ncommand: build-pairs\ngrid: {seed: [not-a-number]}\n", encoding="utf-8")
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


def checkpoints(folder: Path) -> list[int]:
    """Steps of the complete PPO checkpoints (`step_NNNNNN`; trainer_state.json is written last)."""
    return sorted(int(p.parent.name.split("_")[1]) for p in folder.glob("step_*/trainer_state.json"))


def wait_until(what: str, check, job: str, env: dict, timeout: float = 600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    subprocess.run(["scancel", job], env=env)
    pytest.fail(f"job {job}: {what} did not happen in {timeout} s")


def test_requeue_resumes_from_checkpoint(slurm, tiny_model_dir, tmp_path):
    """One submission, three starts: `scontrol requeue` (what preemption does) mid-run, then USR1 to
    the batch shell (what `#SBATCH --signal=B:USR1@300` sends before the time limit; the script
    requeues itself). Each restart continues from the last checkpoint; the run ends at max_steps.
    Slurm holds a requeued job for 120 s before it may start again, so this takes ~5 minutes."""
    rm = make_tiny_rm(tiny_model_dir, tmp_path / "rm")
    env = {**slurm, "NPROC": "1", "OMP_NUM_THREADS": "1"}
    run = tmp_path / "runs" / "ppo"
    steps = 60
    overrides = [
        f"model.name={tiny_model_dir}",
        f"reward.rm_path={rm}",
        f"output_dir={tmp_path / 'runs'}",
        "run_name=ppo",
        f"train.max_steps={steps}",
        "train.batch_size=4",
        "train.minibatch_size=2",
        "train.micro_batch_size=2",
        "train.max_new_tokens=8",
        "train.save_steps=2",
        "train.resume=auto",
        "eval.every_steps=0",
        "lora.r=4",
        "value.lora.r=4",
        "data.max_train_prompts=8",
    ]
    start = time.time()
    sub = subprocess.run(
        ["sbatch", "--parsable", f"--output={tmp_path}/%x-%j.out", "--cpus-per-task=1", "slurm/ppo.sh", *overrides],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    log = tmp_path / f"rlcw-ppo-{job}.out"
    first = wait_until("a first checkpoint", lambda: checkpoints(run / "checkpoints"), job, env)[-1]
    assert subprocess.run(["scontrol", "requeue", job], env=env).returncode == 0
    t_requeue = time.time()

    def resumed(n: int):
        found = re.findall(r"resumed from \S+step_(\d+) at step (\d+)", log.read_text())
        return int(found[n - 1][1]) if len(found) >= n else None

    resumed_1 = wait_until("restart 1 resuming", lambda: resumed(1), job, env)
    print(f"\nrequeue at checkpoint {first}: resumed at step {resumed_1}, {time.time() - t_requeue:.0f} s later")
    assert resumed_1 >= first and "restarts=1" in log.read_text()
    wait_until("a newer checkpoint", lambda: checkpoints(run / "checkpoints")[-1] > resumed_1, job, env)
    assert (
        subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True).stdout.strip()
        == "RUNNING"
    )
    sig = subprocess.run(["scancel", "--batch", "--signal=USR1", job], env=env, capture_output=True, text=True)
    assert sig.returncode == 0, sig.stderr
    info = wait_for(job, env)
    text = log.read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", info["raw"] + text[-4000:]
    print(f"requeue test job {job}: Restarts={info.get('Restarts')}, submit-to-done {time.time() - start:.0f} s")
    assert info.get("Restarts") == "2", info["raw"]
    assert all(f"restarts={i}" in text for i in range(3)), text[-4000:]
    assert "USR1" in text and "requeueing job" in text
    resumed_2 = resumed(2)
    assert resumed_2 > resumed_1 and resumed(3) is None  # the third start went on from where the second got to
    assert checkpoints(run / "checkpoints")[-1] == steps
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["metrics"]["train/steps"] == steps
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in rows if "reward" in r) == steps


def test_submit_makes_the_log_folder(slurm, tmp_path):
    """sbatch opens --output before the script runs: straight sbatch into a missing folder leaves no
    log at all, slurm/submit.sh makes the folder first and the job's log lands in it."""
    env = {**slurm, "OMP_NUM_THREADS": "1"}
    missing = tmp_path / "no-such-logs"
    plain = subprocess.run(
        ["sbatch", "--parsable", f"--output={missing}/%x-%j.out", "slurm/generate.sh", "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert plain.returncode == 0, plain.stderr
    wait_for(plain.stdout.strip().split(";")[0], env, timeout=120)
    assert not missing.exists()  # the job ran (or failed) without any log
    logs = tmp_path / "made-logs"
    sub = subprocess.run(
        ["bash", "slurm/submit.sh", "--parsable", "slurm/generate.sh", "--help"],
        cwd=ROOT,
        env={**env, "RLCW_LOGS": str(logs)},
        capture_output=True,
        text=True,
    )
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    info = wait_for(job, env, timeout=300)
    log = (logs / f"rlcw-generate-{job}.out").read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", info["raw"] + log[-3000:]
    assert f"rlcw job {job}" in log and "rlcw generate --help" in log and "Sample one story per prompt" in log


WRAPPERS = sorted(p for p in (ROOT / "slurm").glob("*.sh") if p.name not in ("lib.sh", "submit.sh"))


@pytest.mark.parametrize("script", WRAPPERS, ids=lambda p: p.name)
def test_scripts_follow_the_slurm_style(script):
    """STYLE.md's Slurm section: log path, strict mode, lib.sh, exactly one launch line ending in "$@"."""
    text = script.read_text()
    lines = text.splitlines()
    assert lines[0] == "#!/usr/bin/env bash" and os.access(script, os.X_OK)
    assert re.search(r"^#SBATCH --output=logs/%x-%[jA]", text, re.M) and "#SBATCH --job-name=rlcw-" in text
    assert "set -euo pipefail" in lines and ". slurm/lib.sh" in lines
    launch = [line for line in lines if not line.startswith("#") and line.rstrip().endswith('"$@"')]
    assert len(launch) == 1 and launch[0].startswith("rlcw_run "), launch
    name = script.stem.replace("_", "-")
    if script.stem != "sweep_array":
        assert f'rlcw {name} "$@"' in launch[0] and f"#SBATCH --job-name=rlcw-{name}" in text
    if script.stem in ("grpo", "ppo", "train_rm", "dpo"):
        assert "#SBATCH --requeue" in lines and "#SBATCH --signal=B:USR1@300" in lines and "train.resume=auto" in text
        assert "--gpus-per-node=8" in text and "--exclusive" in text  # a GPU example line
    if shutil.which("shellcheck"):
        out = subprocess.run(["shellcheck", "-x", str(script)], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout
