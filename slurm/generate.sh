#!/usr/bin/env bash
#SBATCH --job-name=rlcw-generate
#SBATCH --output=logs/%x-%j.out
#SBATCH --open-mode=append
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=04:00:00
# Stories for prompts (`rlcw generate`), one process. All hyperparameters are config:
#   sbatch slurm/generate.sh --config configs/generate/eval_prompts.yaml model.name=runs/export/model system=tuned
#   sbatch --gpus-per-node=1 slurm/generate.sh --config configs/generate/eval_prompts.yaml best_of.n=8 best_of.rm_path=runs/train_rm/model
# Environment: RLCW_VENV (see slurm/lib.sh). Submit from the repo root (bash slurm/submit.sh makes logs/).
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"
# shellcheck source=slurm/lib.sh
. slurm/lib.sh
echo "rlcw generate $*"
rlcw_run rlcw generate "$@"
