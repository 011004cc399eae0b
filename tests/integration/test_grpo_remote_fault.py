"""Fault test: the reward server is SIGKILLed while a GRPO run scores through the `remote` reward.

The run must end `failed` with the server URL in its error after the client's retries (never a
made-up reward: no step is logged past the last one the server scored), and after the server is
restarted, `train.resume=true` continues from the last checkpoint with contiguous steps, each
logged once (rows the killed run wrote after its checkpoint are dropped on resume).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from test_serve_rm import free_port, make_tiny_rm  # the reward-server tests' tiny RM, as test_slurm does

from rlcw.config import load_config

TOKEN_ENV = "RLCW_FAULT_RM_TOKEN"
MAX_STEPS = 8


def _serve(rm: Path, port: int, root: Path, name: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "rlcw", "serve-rm", f"rm_path={rm}", f"port={port}", f"token_env={TOKEN_ENV}"]
    cmd += [f"output_dir={root}", f"run_name={name}", "log_level=warning"]
    env = {**os.environ, TOKEN_ENV: "fault-token", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        assert proc.poll() is None, "serve-rm exited early"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    pytest.fail("serve-rm did not become healthy")


def _complete(ckpts: Path) -> list[int]:
    return sorted(
        int(p.name.split("-")[1]) for p in ckpts.glob("checkpoint-*") if (p / "trainer_state.json").is_file()
    )


def _loss_steps(run: Path) -> list[int]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [r["step"] for r in rows if "loss" in r]


def test_server_killed_mid_run_fails_the_run_then_resume_continues(tmp_path, tiny_model_dir, monkeypatch):
    from rlcw.recipes.grpo import GRPORecipeConfig, main

    rm = make_tiny_rm(tiny_model_dir, tmp_path / "rm")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [
        f"output_dir={tmp_path}",
        "run_name=grpo_remote",
        f"model.name={tiny_model_dir}",
        f"reward.rm_path={rm}",  # the default RM folder (the rm evaluator); rewards come from the server
        "reward.specs.rm.type=remote",
        f"reward.specs.rm.urls=[{url}]",
        f"reward.specs.rm.token_env={TOKEN_ENV}",
        "reward.specs.rm.max_retries=2",
        "reward.specs.rm.timeout_s=5",
        "reward.specs.rm.backoff_s=0.2",
        f"train.max_steps={MAX_STEPS}",
        "train.save_steps=1",
        "train.save_total_limit=null",
        "train.batch_size=4",
        "train.num_generations=2",
        "train.max_completion_length=8",
        "lora.r=4",
        "data.max_train_prompts=8",
        "eval.every_steps=0",
        "train.samples_every=0",
    ]
    run = tmp_path / "grpo_remote"
    server = _serve(rm, port, tmp_path, "srv1")
    env = {**os.environ, TOKEN_ENV: "fault-token", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlcw", "grpo", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not _complete(run / "checkpoints")[-1:] >= [2]:
        time.sleep(0.05)
    server.send_signal(signal.SIGKILL)
    server.wait()
    err = proc.communicate(timeout=300)[1].decode()
    done = _complete(run / "checkpoints")
    assert proc.returncode == 2, err[-3000:]  # a clear RlcwError, not a crash and not a finished run
    assert done and done[-1] < MAX_STEPS, f"the kill landed after the run: {done}\n{err[-3000:]}"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed" and url in summary["error"], summary["error"]
    assert "no reward was produced" in summary["error"]
    logged = _loss_steps(run)
    assert logged == list(range(1, len(logged) + 1)) and logged[-1] <= done[-1] + 1  # nothing past the failure

    server = _serve(rm, port, tmp_path, "srv2")
    try:
        monkeypatch.setenv(TOKEN_ENV, "fault-token")
        resumed = main(load_config(GRPORecipeConfig, None, args + ["train.resume=true"]))
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert resumed["status"] == "completed" and resumed["metrics"]["train/steps"] == MAX_STEPS
    assert _loss_steps(run) == list(range(1, MAX_STEPS + 1))  # contiguous, each step once
    print(
        f"[fault] killed after checkpoint {done[-1]}; steps logged before the failure {logged}; error: {summary['error']}"
    )
