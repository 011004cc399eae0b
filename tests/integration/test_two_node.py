"""A two-node Slurm launch on one machine: the torchrun command slurm/lib.sh builds, run as two launchers.

On a real 2-node allocation srun starts one copy of the same command on each node, with the Slurm
variables of that node (SLURM_NNODES=2, SLURM_NODEID=0/1, SLURM_JOB_NODELIST, ...). Here
`bash slurm/lib.sh --print-launch` builds that command from those variables for "node 0" and
"node 1" (the first host of the node list is `localhost`, so the c10d rendezvous is on 127.0.0.1),
and the test starts both copies as separate processes: `--nnodes 2`, one rank each, gloo, one
thread each, a few real `rlcw grpo` steps on the tiny policy with DeepSpeed ZeRO-2
(configs/deepspeed/zero2.json). Both ranks must report world size 2 and end with identical
trainable parameters (the hash hook of test_distributed.py). Also checks the host-list parsing
lib.sh uses when scontrol is not installed.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_distributed import check_ranks, tiny_grpo_overrides, write_hook
from test_serve_rm import free_port, make_tiny_rm

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "slurm" / "lib.sh"


def print_launch(env: dict) -> str:
    out = subprocess.run(["bash", str(LIB), "--print-launch"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def slurm_node_env(node: int, job_id: str, port: int) -> dict[str, str]:
    """The variables a 2-node, one-task-per-node allocation gives the task on node `node`."""
    nodes = "localhost,127.0.0.1"
    return {
        "SLURM_JOB_ID": job_id,
        "SLURM_JOBID": job_id,
        "SLURM_NNODES": "2",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NODEID": str(node),
        "SLURM_JOB_NODELIST": nodes,
        "SLURM_NODELIST": nodes,
        "SLURMD_NODENAME": nodes.split(",")[node],
        "SLURM_NTASKS": "2",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_PROCID": str(node),
        "SLURM_LOCALID": "0",
        "SLURM_CPUS_PER_TASK": "1",
        "SLURM_CPUS_ON_NODE": "1",
        "MASTER_PORT": str(port),  # the knob: a free port instead of 20000 + job id
    }


@pytest.mark.parametrize(
    "nodelist, first",
    [
        ("node[03-05,9],gpu1", "node03"),
        ("gpu7", "gpu7"),
        ("a[1-2]-ib,b", "a1-ib"),
        ("localhost,127.0.0.1", "localhost"),
    ],
)
def test_print_launch_without_scontrol(nodelist, first):
    # scontrol shadowed by a failing function: lib.sh must expand the host list itself
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "77", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": nodelist}
    script = f"scontrol() {{ return 1; }}; export -f scontrol; bash {shlex.quote(str(LIB))} --print-launch"
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert shlex.split(out.stdout) == [
        "torchrun",
        "--nnodes",
        "2",
        "--nproc_per_node",
        "1",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        f"{first}:20077",
        "--rdzv_id",
        "77",
    ]


def test_two_launchers_grpo_zero2(tiny_model_dir, tmp_path):
    rm = make_tiny_rm(tiny_model_dir, tmp_path / "rm")
    hook, hashes = write_hook(tmp_path / "hook"), tmp_path / "hashes"
    hashes.mkdir()
    job_id, port = str(900000 + os.getpid() % 1000), free_port()
    base = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "RANK", "WORLD_SIZE"))},
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),  # torchrun of this venv
        "PYTHONPATH": os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")])),
        "RLCW_TEST_HASH_DIR": str(hashes),
        "DS_ACCELERATOR": "cpu",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    envs = [{**base, **slurm_node_env(node, job_id, port)} for node in (0, 1)]
    launches = [print_launch(env) for env in envs]
    assert launches[0] == launches[1]  # every node runs the same command; the rendezvous assigns ranks
    cmd = shlex.split(launches[0])
    assert cmd[:5] == ["torchrun", "--nnodes", "2", "--nproc_per_node", "1"], cmd
    assert f"localhost:{port}" in cmd and job_id in cmd and "srun" not in cmd
    args = [
        "-m",
        "rlcw",
        "grpo",
        *tiny_grpo_overrides(tiny_model_dir, rm, tmp_path / "runs", "two-node"),
        f"train.deepspeed={ROOT}/configs/deepspeed/zero2.json",
    ]
    start = time.time()
    logs = [open(tmp_path / f"node{node}.log", "w") for node in (0, 1)]  # noqa: SIM115 (closed below)
    procs = [
        subprocess.Popen(cmd + args, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
        for env, log in zip(envs, logs, strict=True)
    ]
    try:
        codes = [p.wait(timeout=900) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for log in logs:
            log.close()
    tails = "\n".join(f"--- node{n}\n" + (tmp_path / f"node{n}.log").read_text()[-4000:] for n in (0, 1))
    assert codes == [0, 0], tails
    print(f"\ntwo launchers (--nnodes 2, one rank each, ZeRO-2): 2 GRPO steps in {time.time() - start:.0f} s")
    ranks = check_ranks(hashes, deepspeed=True)
    assert {r["rank"] for r in ranks} == {0, 1}
    run = tmp_path / "runs" / "two-node"
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert (run / "checkpoints" / "final" / "adapter_model.safetensors").is_file()
