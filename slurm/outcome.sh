#!/usr/bin/env bash
#SBATCH --job-name=rlcw-outcome
#SBATCH --output=logs/%x-%j.out
#SBATCH --open-mode=append
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=08:00:00
#SBATCH --requeue
#SBATCH --signal=B:USR1@300
# The outcome study (`rlcw outcome`), one process on one node. All hyperparameters are config:
#   sbatch slurm/outcome.sh --config configs/outcome/cpu.yaml
#   sbatch --gpus-per-node=1 slurm/outcome.sh --config configs/outcome/cpu.yaml
# Requeued (preemption, time limit) it starts again with the same arguments; finished parts are reused.
# Environment: RLCW_VENV (see slurm/lib.sh). Submit from the repo root (bash slurm/submit.sh makes logs/).
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"
# shellcheck source=slurm/lib.sh
. slurm/lib.sh
echo "rlcw outcome $*"
rlcw_run rlcw outcome "$@"
