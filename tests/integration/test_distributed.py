"""GRPO on 2 CPU ranks (torchrun, gloo, one thread per rank) with DeepSpeed ZeRO-2 and ZeRO-3.

The real `rlcw grpo` command runs under torchrun with `train.deepspeed=configs/deepspeed/*.json`.
A test-only `sitecustomize` (on PYTHONPATH, active only when RLCW_TEST_HASH_DIR is set) wraps
`transformers.Trainer.train`: each rank writes the world size and a SHA-256 of its trainable
parameters before and after training (ZeRO-3 shards are gathered first). Both ranks must agree
after training, and differ from the start (it trained). The first DeepSpeed run JIT-compiles a
shared-memory op (~100 s on 2 cores, cached in $TORCH_EXTENSIONS_DIR or ~/.cache/torch_extensions).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_serve_rm import make_tiny_rm

ROOT = Path(__file__).resolve().parents[2]

HASH_HOOK = r'''
"""Test instrumentation (written by tests/integration/test_distributed.py): per-rank parameter hashes."""
import contextlib, hashlib, importlib.abc, importlib.util, json, os, sys

OUT = os.environ.get("RLCW_TEST_HASH_DIR")


def _hash(model):
    params = sorted((n.replace("module.", ""), p) for n, p in model.named_parameters() if p.requires_grad)
    sharded = [p for _, p in params if hasattr(p, "ds_id")]
    ctx = contextlib.nullcontext()
    if sharded:
        import deepspeed
        ctx = deepspeed.zero.GatheredParameters(sharded)
    h = hashlib.sha256()
    with ctx:
        for name, p in params:
            h.update(name.encode())
            h.update(p.detach().float().cpu().numpy().tobytes())
        return h.hexdigest(), sum(p.numel() for _, p in params)


def _patch(trainer_cls):
    original = trainer_cls.train

    def train(self, *args, **kwargs):
        before, _ = _hash(self.model)
        result = original(self, *args, **kwargs)
        import torch.distributed as dist
        after, n = _hash(self.model)
        rank = dist.get_rank() if dist.is_initialized() else 0
        info = {"rank": rank, "world_size": dist.get_world_size() if dist.is_initialized() else 1,
                "backend": dist.get_backend() if dist.is_initialized() else None, "before": before, "after": after,
                "n_trainable": n, "deepspeed": bool(getattr(self, "is_deepspeed_enabled", False)),
                "steps": self.state.global_step, "threads": __import__("torch").get_num_threads()}
        with open(os.path.join(OUT, f"rank{rank}.json"), "w") as fh:
            json.dump(info, fh)
        return result

    trainer_cls.train = train


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "transformers.trainer":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            _patch(module.Trainer)

        spec.loader.exec_module = exec_module
        return spec


if OUT:
    sys.meta_path.insert(0, _Finder())
'''


def write_hook(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(HASH_HOOK, encoding="utf-8")
    return folder


def tiny_grpo_overrides(policy: Path, rm: Path, output_dir: Path, run_name: str) -> list[str]:
    """A 2-step GRPO run on the tiny policy and RM (seconds per step)."""
    return [
        f"model.name={policy}",
        f"reward.rm_path={rm}",
        f"output_dir={output_dir}",
        f"run_name={run_name}",
        "train.max_steps=2",
        "train.batch_size=4",
        "train.num_generations=2",
        "train.max_completion_length=8",
        "train.learning_rate=1e-2",
        "train.log_kl_every=0",
        "eval.every_steps=0",
        "lora.r=4",
        "data.max_train_prompts=8",
        "data.fit_to_cap=warn",
    ]


def check_ranks(hash_dir: Path, deepspeed: bool) -> list[dict]:
    ranks = [json.loads((hash_dir / f"rank{i}.json").read_text()) for i in (0, 1)]
    for r in ranks:
        assert r["world_size"] == 2 and r["backend"] == "gloo" and r["threads"] == 1, r
        assert r["deepspeed"] is deepspeed and r["steps"] == 2 and r["n_trainable"] > 0, r
    assert ranks[0]["before"] == ranks[1]["before"]  # same seed, same start
    assert ranks[0]["after"] == ranks[1]["after"]  # identical trainable parameters after the steps
    assert ranks[0]["after"] != ranks[0]["before"]  # and they did train
    return ranks


@pytest.fixture(scope="module")
def tiny_rm(tiny_model_dir, tmp_path_factory) -> Path:
    return make_tiny_rm(tiny_model_dir, tmp_path_factory.mktemp("dist") / "rm")


# ZeRO-2 runs the shipped CPU config's rollout (rlcw's fast sampler with reference injection); ZeRO-3 refuses it
# (the sampler needs whole weights) and runs TRL's
ROLLOUT = {"zero2": ["rollout.kind=fast", "rollout.draw=inverse_cdf"], "zero3": []}


@pytest.mark.parametrize("zero", ["zero2", "zero3"])
def test_grpo_two_cpu_ranks_deepspeed(zero, tiny_model_dir, tiny_rm, tmp_path, short_references):
    hook, hashes = write_hook(tmp_path / "hook"), tmp_path / "hashes"
    hashes.mkdir()
    rollout = ROLLOUT[zero]
    if rollout:
        rollout = [*rollout, f"rollout.references={short_references}"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
        "RLCW_TEST_HASH_DIR": str(hashes),
        "DS_ACCELERATOR": "cpu",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "rlcw",
        "grpo",
        *tiny_grpo_overrides(tiny_model_dir, tiny_rm, tmp_path / "runs", zero),
        f"train.deepspeed={ROOT}/configs/deepspeed/{zero}.json",
        *rollout,
    ]
    start = time.time()
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    print(f"{zero}: 2 ranks, 2 GRPO steps in {time.time() - start:.0f} s")
    check_ranks(hashes, deepspeed=True)
    run = tmp_path / "runs" / zero
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    adapter = run / "checkpoints" / "final" / "adapter_model.safetensors"
    assert adapter.is_file() and adapter.stat().st_size > 1000  # ZeRO-3: gathered, not empty shards
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    injected = [r["rollout/references"] for r in metrics if "rollout/references" in r]
    assert injected == ([] if not rollout else [2.0, 2.0]), injected  # both groups on a rank held their reference


def test_train_rm_two_cpu_ranks_deepspeed_zero2(tiny_model_dir, tmp_path):
    """The BT reward model trains on 2 ranks with ZeRO-2: both ranks see world size 2 and end
    with the same trainable parameters (multi-GPU via accelerate/DeepSpeed)."""
    hook, hashes = write_hook(tmp_path / "hook"), tmp_path / "hashes"
    hashes.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
        "RLCW_TEST_HASH_DIR": str(hashes),
        "DS_ACCELERATOR": "cpu",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    pairs = subprocess.run(
        [sys.executable, "-m", "rlcw", "build-pairs", f"output_dir={tmp_path / 'runs'}", "run_name=pairs"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pairs.returncode == 0, pairs.stderr[-3000:]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "rlcw",
        "train-rm",
        f"model.name={tiny_model_dir}",
        f"data.train_file={tmp_path / 'runs/pairs/pairs/train.jsonl'}",
        "data.eval_file=null",
        "data.max_train_pairs=16",
        "train.max_steps=2",
        "train.batch_size=2",
        "train.eval_steps=0",
        "train.learning_rate=1e-2",
        "rm.max_length=64",
        "lora.r=4",
        f"output_dir={tmp_path / 'runs'}",
        "run_name=rm_zero2",
        f"train.deepspeed={ROOT}/configs/deepspeed/zero2.json",
    ]
    start = time.time()
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    print(f"train-rm zero2: 2 ranks, 2 steps in {time.time() - start:.0f} s")
    check_ranks(hashes, deepspeed=True)
    run = tmp_path / "runs" / "rm_zero2"
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert (run / "model" / "rlcw_rm.json").is_file()


def test_grpo_zero3_with_periodic_eval_and_kl(tiny_model_dir, tiny_rm, tmp_path):
    """ZeRO-3 on 2 ranks with evaluation and KL to the start every step: every rank samples its share of the
    held-out prompts (3 prompts, batch 1: rank 0 two batches, rank 1 one real + one dummy), rank 0 evaluates.
    One training row and one evaluation row per step, and the held-out baseline equals a single-process run's."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    evals = ["eval.every_steps=1", "eval.num_prompts=3", "eval.batch_size=1", "eval.max_new_tokens=8"]
    kl = ["train.log_kl_every=1"]
    base = tiny_grpo_overrides(tiny_model_dir, tiny_rm, tmp_path / "runs", "zero3_eval")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "rlcw"]
    cmd += ["grpo", *base, *evals, *kl, f"train.deepspeed={ROOT}/configs/deepspeed/zero3.json"]
    start = time.time()
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    print(f"zero3 + eval + kl: 2 ranks, 2 GRPO steps in {time.time() - start:.0f} s")
    run = tmp_path / "runs" / "zero3_eval"
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward" in r] == [1, 2]
    assert all("monitor/kl_to_start" in r for r in rows if "reward" in r)
    assert [r["step"] for r in rows if "eval/rm/score" in r] == [0, 1, 2]
    single = tiny_grpo_overrides(tiny_model_dir, tiny_rm, tmp_path / "runs", "single_eval")
    proc = subprocess.run(
        [sys.executable, "-m", "rlcw", "grpo", *single, *evals, "train.max_steps=1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    def stories(name: str) -> list[tuple]:
        lines = (tmp_path / "runs" / name / "samples" / "baseline.jsonl").read_text().splitlines()
        return [(r["id"], r["story"], r["seed"]) for r in map(json.loads, lines)]

    assert len(stories("zero3_eval")) == 3
    assert stories("zero3_eval") == stories("single_eval")
