#!/usr/bin/env bash
#SBATCH --job-name=rlcw-eval-rm
#SBATCH --output=logs/%x-%j.out
#SBATCH --open-mode=append
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=04:00:00
# Reward-model evaluation (`rlcw eval-rm`), one process. All hyperparameters are config:
#   sbatch slurm/eval_rm.sh --config configs/eval_rm/bt.yaml scorer.path=runs/train_rm/model
#   sbatch --gpus-per-node=1 slurm/eval_rm.sh --config configs/eval_rm/genrm.yaml scorer.path=runs/train_rm/model
# Environment: RLCW_VENV (see slurm/lib.sh). Submit from the repo root (bash slurm/submit.sh makes logs/).
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"
# shellcheck source=slurm/lib.sh
. slurm/lib.sh
echo "rlcw eval-rm $*"
rlcw_run rlcw eval-rm "$@"
