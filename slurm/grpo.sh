#!/usr/bin/env bash
#SBATCH --job-name=rlcw-grpo
#SBATCH --output=logs/%x-%j.out
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=04:00:00
# GRPO (`rlcw grpo`) under torchrun, one or more nodes. All hyperparameters are config:
#   sbatch slurm/grpo.sh --config configs/grpo/cpu.yaml train.max_steps=50
#   NPROC=2 sbatch slurm/grpo.sh --config configs/grpo/cpu.yaml             # 2 CPU ranks, one node
#   sbatch --nodes=2 --gpus-per-node=8 slurm/grpo.sh --config configs/grpo/cpu.yaml train.deepspeed=configs/deepspeed/zero2.json
# Environment: RLCW_VENV, NPROC, MASTER_PORT (see slurm/lib.sh). Submit from the repo root.
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"
# shellcheck source=slurm/lib.sh
. slurm/lib.sh
echo "rlcw grpo $*"
"${TORCHRUN[@]}" -m rlcw grpo "$@"
