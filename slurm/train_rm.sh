#!/usr/bin/env bash
#SBATCH --job-name=rlcw-train-rm
#SBATCH --output=logs/%x-%j.out
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=04:00:00
# Reward-model training on one node. All hyperparameters are config: pass --config FILE and key=value overrides.
#   sbatch slurm/train_rm.sh --config configs/train_rm/cpu.yaml
# Environment: RLCW_VENV (default .venv), NPROC (processes per node, default 1).
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"
mkdir -p logs
VENV=${RLCW_VENV:-.venv}
if [ ! -x "$VENV/bin/rlcw" ]; then
  echo "rlcw is not installed in $VENV: run scripts/setup.sh first (or set RLCW_VENV)" >&2
  exit 2
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
NPROC=${NPROC:-1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( ${SLURM_CPUS_PER_TASK:-2} / NPROC ))}
echo "job ${SLURM_JOB_ID:-local} on $(hostname) | git $(git rev-parse --short HEAD 2>/dev/null || echo none) | args: $*"
torchrun --standalone --nproc_per_node "$NPROC" -m rlcw train-rm "$@"
