#!/usr/bin/env bash
#SBATCH --job-name=rlcw-train-rm
#SBATCH --output=logs/%x-%j.out
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=04:00:00
# Reward-model training (`rlcw train-rm`) under torchrun, one or more nodes. All hyperparameters are config:
#   sbatch slurm/train_rm.sh --config configs/train_rm/cpu.yaml
#   sbatch --gpus-per-node=4 slurm/train_rm.sh --config configs/train_rm/cpu.yaml model.name=HUB_ID
# Environment: RLCW_VENV, NPROC, MASTER_PORT (see slurm/lib.sh). Submit from the repo root.
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"
# shellcheck source=slurm/lib.sh
. slurm/lib.sh
echo "rlcw train-rm $*"
"${TORCHRUN[@]}" -m rlcw train-rm "$@"
