#!/usr/bin/env bash
#SBATCH --job-name=rlcw-judge
#SBATCH --output=logs/%x-%j.out
#SBATCH --open-mode=append
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=04:00:00
# LLM judges over story files (`rlcw judge`), one process. All hyperparameters are config:
#   sbatch slurm/judge.sh --config configs/judge/litbench.yaml
#   sbatch --gpus-per-node=1 slurm/judge.sh --config configs/judge/local_server.yaml
# Environment: RLCW_VENV (see slurm/lib.sh). Submit from the repo root (bash slurm/submit.sh makes logs/).
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"
# shellcheck source=slurm/lib.sh
. slurm/lib.sh
echo "rlcw judge $*"
rlcw_run rlcw judge "$@"
