#!/usr/bin/env bash
#SBATCH --job-name=rlcw-rloo
#SBATCH --output=logs/%x-%j.out
#SBATCH --open-mode=append
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=04:00:00
#SBATCH --requeue
#SBATCH --signal=B:USR1@300
# RLOO (`rlcw rloo`) under torchrun, one or more nodes. All hyperparameters are config:
#   sbatch slurm/rloo.sh --config configs/rloo/cpu.yaml train.max_steps=50 train.resume=auto
#   NPROC=2 sbatch slurm/rloo.sh --config configs/rloo/cpu.yaml             # 2 CPU ranks, one node
# Preemption, `scontrol requeue` and the time limit (USR1 300 s before it: the job requeues itself)
# restart the job with the same arguments: pass train.resume=auto and it continues from its last checkpoint.
# Environment: RLCW_VENV, NPROC, MASTER_PORT (see slurm/lib.sh). Submit from the repo root (bash slurm/submit.sh makes logs/).
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"
# shellcheck source=slurm/lib.sh
. slurm/lib.sh
echo "rlcw rloo $*"
rlcw_run "${TORCHRUN[@]}" -m rlcw rloo "$@"
