#!/usr/bin/env bash
#SBATCH --job-name=rlcw-sweep
#SBATCH --output=logs/%x-%A_%a.out
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --time=04:00:00
# One run of a sweep per array task: `rlcw sweep` submits this with --array=0-(N-1); task I runs
# override set I (the same list `rlcw sweep SWEEP.yaml --dry-run` prints). FILE is the frozen manifest
# `rlcw sweep --slurm` wrote at submission (<output_dir>/<name>/sweep.json, with a copy of the base
# config), so edits of the sweep YAML or the base config after submission change nothing here.
#   rlcw sweep configs/sweeps/build_pairs_seeds.yaml --slurm   # submits: sbatch --array=0-3 slurm/sweep_array.sh .../sweep.json
# Environment: RLCW_VENV (default .venv). Submit from the repo root.
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"
[ -n "${SLURM_ARRAY_TASK_ID:-}" ] || { echo "rlcw slurm: submit as a job array (rlcw sweep FILE --slurm)" >&2; exit 2; }
[ $# -ge 1 ] || { echo "rlcw slurm: usage: rlcw sweep SWEEP.yaml --slurm (submits this with the frozen sweep.json)" >&2; exit 2; }
# shellcheck source=slurm/lib.sh
. slurm/lib.sh
echo "rlcw sweep --index $SLURM_ARRAY_TASK_ID $* (array job ${SLURM_ARRAY_JOB_ID:-?})"
rlcw_run rlcw sweep --index "$SLURM_ARRAY_TASK_ID" "$@"
