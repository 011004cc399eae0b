#!/usr/bin/env bash
#SBATCH --job-name=rlcw-ppo
#SBATCH --output=logs/%x-%j.out
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=04:00:00
# PPO (`rlcw ppo`) under torchrun, one or more nodes. All hyperparameters are config:
#   sbatch slurm/ppo.sh --config configs/ppo/cpu.yaml train.max_steps=50
#   NPROC=2 sbatch slurm/ppo.sh --config configs/ppo/cpu.yaml             # 2 CPU ranks, one node
#   sbatch --nodes=2 --gpus-per-node=8 slurm/ppo.sh --config configs/ppo/cpu.yaml   # DDP (accelerate); no DeepSpeed in ppo
# Environment: RLCW_VENV, NPROC, MASTER_PORT (see slurm/lib.sh). Submit from the repo root.
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"
# shellcheck source=slurm/lib.sh
. slurm/lib.sh
echo "rlcw ppo $*"
"${TORCHRUN[@]}" -m rlcw ppo "$@"
