"""Kill a real grpo run with SIGKILL, resume it with `train.resume=true`, and compare the steps after
its last checkpoint with an uninterrupted run under the same seed: losses, rewards, KL and the
sampled prompt order must match. 8 prompts at 2 per step = 4 steps per epoch, so steps 5-7 check
that the prompt order of a later epoch is restored too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlcw.config import load_config

MAX_STEPS = 7
KEYS = (
    "loss",
    "reward",
    "rewards/rm/mean",
    "rewards/length_range/mean",
    "rewards/cost/mean",
    "constraint/cost/multiplier",
    "monitor/kl_to_start",
    "monitor/words_mean",
)
HERE = Path(__file__).parent  # learning_reward.py, the constrained cost's module


def _overrides(root: Path, name: str, model: Path, rm: str) -> list[str]:
    return [
        f"output_dir={root}",
        f"run_name={name}",
        f"model.name={model}",
        f"reward.rm_path={rm}",
        f"train.max_steps={MAX_STEPS}",
        "train.save_steps=1",
        "train.save_total_limit=null",
        "train.batch_size=4",
        "train.num_generations=2",
        "train.max_completion_length=8",
        "train.learning_rate=1e-2",
        "lora.r=4",
        "data.max_train_prompts=8",
        "eval.every_steps=0",
        "train.samples_every=0",
        # a constrained cost (rlcw.rewards.constrained): its multiplier is state the checkpoint must carry
        "reward.specs.cost.type=python",
        "reward.specs.cost.target=learning_reward:completion_tokens",
        "reward.specs.cost.constrain.limit=0.0",
        "reward.specs.cost.constrain.lr=0.01",
    ]


def _pythonpath() -> str:
    return os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)


def _by_step(path: Path, key: str | None = None) -> dict[int, dict]:
    """Last row per step (a resumed run appends the re-run steps after the killed ones)."""
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return {r["step"]: r for r in rows if key is None or key in r}


def _complete(ckpts: Path) -> list[int]:
    return sorted(
        int(p.name.split("-")[1]) for p in ckpts.glob("checkpoint-*") if (p / "trainer_state.json").is_file()
    )


def test_killed_run_resumes_like_an_uninterrupted_one(runs_root, rm_run, tiny_model_dir, capsys):
    from rlcw.recipes.grpo import GRPORecipeConfig, main
    from rlcw.rewards.constrained import CONSTRAINED_UNDER_GROUP

    rm = rm_run["artifacts"]["model"]
    full = main(load_config(GRPORecipeConfig, None, _overrides(runs_root, "resume_full", tiny_model_dir, rm)))
    assert full["status"] == "completed"
    assert CONSTRAINED_UNDER_GROUP in capsys.readouterr().out  # the constraint under group scaling is called out

    args = _overrides(runs_root, "resume_killed", tiny_model_dir, rm)
    killed_dir = runs_root / "resume_killed"
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), PYTHONPATH=_pythonpath())
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlcw", "grpo", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and not _complete(killed_dir / "checkpoints")[-1:] >= [2]:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = _complete(killed_dir / "checkpoints")
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    assert done and 2 <= done[-1] < MAX_STEPS - 1, f"kill landed too late to test anything: checkpoints {done}"
    assert json.loads((killed_dir / "summary.json").read_text())["status"] == "running"  # no clean shutdown

    resumed = main(load_config(GRPORecipeConfig, None, args + ["train.resume=true"]))
    assert resumed["status"] == "completed" and resumed["metrics"]["train/steps"] == MAX_STEPS

    a = _by_step(runs_root / "resume_full" / "metrics.jsonl", "loss")
    b = _by_step(killed_dir / "metrics.jsonl", "loss")
    after = list(range(done[-1] + 1, MAX_STEPS + 1))
    for step in after:
        for key in KEYS:
            assert b[step][key] == pytest.approx(a[step][key], rel=1e-5, abs=1e-7), (step, key)
        assert b[step]["constraint/cost/multiplier"] > 0  # a restarted multiplier would differ: the check can fail
    order_a = _by_step(runs_root / "resume_full" / "samples" / "data_order.jsonl")
    order_b = _by_step(killed_dir / "samples" / "data_order.jsonl")
    assert [order_b[s]["prompt_ids"] for s in range(1, MAX_STEPS + 1)] == [
        order_a[s]["prompt_ids"] for s in range(1, MAX_STEPS + 1)
    ]
    # epochs draw different orders (the sampler is reseeded per epoch, not frozen)
    epoch0 = [i for s in range(1, 5) for i in order_a[s]["prompt_ids"][::2]]
    epoch1 = [i for s in range(5, 8) for i in order_a[s]["prompt_ids"][::2]]
    assert sorted(set(epoch0)) == sorted(epoch0) and epoch1 != epoch0[: len(epoch1)]


def test_resume_without_a_checkpoint_is_a_clear_error(tmp_path):
    from rlcw.errors import RlcwError
    from rlcw.runs import last_checkpoint, resume_checkpoint

    (tmp_path / "checkpoint-3").mkdir()  # killed mid-save: no trainer_state.json
    with pytest.raises(RlcwError, match="no complete checkpoint"):
        resume_checkpoint("true", tmp_path)
    assert resume_checkpoint("auto", tmp_path) is None  # auto starts fresh when there is none
    for n in (1, 2):
        (tmp_path / f"checkpoint-{n}").mkdir()
        (tmp_path / f"checkpoint-{n}" / "trainer_state.json").write_text("{}")
    assert last_checkpoint(tmp_path).name == "checkpoint-2"


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher and every process under it. torchrun starts its workers in sessions of their own,
    so killing the launcher's process group leaves the ranks training (and writing checkpoints) as orphans."""
    import psutil

    launcher = psutil.Process(proc.pid)
    procs = launcher.children(recursive=True) + [launcher]
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=60)
    assert not alive, f"still running after SIGKILL: {alive}"
    proc.wait()


def _torchrun(args: list[str], port: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port)] + [
        "-m",
        "rlcw",
        "grpo",
        *args,
    ]


def test_two_rank_resume_in_a_later_epoch_replays_the_same_order(runs_root, rm_run, tiny_model_dir):
    """2 ranks (gloo): 8 prompts at 2 per rank per step = 2 steps per epoch. SIGKILL after checkpoint 3, resume
    from checkpoint-3 (mid epoch 1: the SkipBatchSampler -> BatchSamplerShard path), and the prompt order and
    rewards of steps 4-7 equal an uninterrupted 2-rank run's."""
    rm = rm_run["artifacts"]["model"]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=_pythonpath())
    full = subprocess.run(
        _torchrun(_overrides(runs_root, "resume2_full", tiny_model_dir, rm), 29613),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert full.returncode == 0, full.stderr[-3000:]
    args = _overrides(runs_root, "resume2_killed", tiny_model_dir, rm)
    killed_dir = runs_root / "resume2_killed"
    proc = subprocess.Popen(
        _torchrun(args, 29614), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not _complete(killed_dir / "checkpoints")[-1:] >= [3]:
        time.sleep(0.05)
    _kill_tree(proc)  # the launcher and both ranks
    done = _complete(killed_dir / "checkpoints")
    assert done and 3 <= done[-1] < MAX_STEPS, f"kill landed too late to test anything: checkpoints {done}"
    for n in done:  # resume from checkpoint-3: one step into epoch 1, so the first batches are skipped
        if n > 3:
            import shutil

            shutil.rmtree(killed_dir / "checkpoints" / f"checkpoint-{n}")
    resumed = subprocess.run(
        _torchrun(args + ["train.resume=true"], 29615), env=env, capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    order_a = _by_step(runs_root / "resume2_full" / "samples" / "data_order.jsonl")
    order_b = _by_step(killed_dir / "samples" / "data_order.jsonl")
    assert [order_b[s]["prompt_ids"] for s in range(4, MAX_STEPS + 1)] == [
        order_a[s]["prompt_ids"] for s in range(4, MAX_STEPS + 1)
    ]
    a = _by_step(runs_root / "resume2_full" / "metrics.jsonl", "loss")
    b = _by_step(killed_dir / "metrics.jsonl", "loss")
    for step in range(4, MAX_STEPS + 1):
        assert b[step]["reward"] == pytest.approx(a[step]["reward"], rel=1e-5, abs=1e-7), step
        multiplier = b[step]["constraint/cost/multiplier"]  # the batch mean over both ranks, resumed not restarted
        assert multiplier > 0 and multiplier == pytest.approx(a[step]["constraint/cost/multiplier"], rel=1e-6), step
