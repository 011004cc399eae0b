#!/usr/bin/env bash
# Submit one of the slurm/ scripts with its log folder made first. sbatch opens the job's --output
# file (logs/%x-%j.out, relative to the submission folder) before the script runs, so a `mkdir -p logs`
# inside the script comes too late: without the folder the job fails and leaves no log at all. This
# makes the folder, then submits from the repository root (so config paths are relative to it).
#   bash slurm/submit.sh slurm/grpo.sh --config configs/grpo/cpu.yaml train.resume=auto
#   bash slurm/submit.sh --nodes=2 --gpus-per-node=8 --exclusive slurm/grpo.sh --config configs/grpo/litbench_2node.yaml
#   RLCW_LOGS=/scratch/me/rlcw-logs bash slurm/submit.sh slurm/train_rm.sh --config configs/train_rm/cpu.yaml
# Arguments: sbatch's own (options, the script, its arguments). Prints sbatch's reply (the job id).
# Environment: RLCW_LOGS (log folder; default logs/ in the repository root; any other folder is made
# and passed to sbatch as an absolute --output=FOLDER/%x-%j.out).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "rlcw submit: usage: bash slurm/submit.sh [sbatch options] slurm/SCRIPT.sh [args]" >&2; exit 2; }
LOGS=${RLCW_LOGS:-logs}
mkdir -p "$LOGS"
output=()
if [ "$LOGS" != logs ]; then
  output=(--output="$(cd "$LOGS" && pwd)/%x-%j.out")
fi
echo "rlcw submit: logs in $LOGS/ (submitted from $PWD)" >&2
exec sbatch "${output[@]}" "$@"
