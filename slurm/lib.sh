# shellcheck shell=bash
# Sourced by the slurm/*.sh wrappers (not submitted itself): environment checks, the run header,
# the torchrun rendezvous taken from the Slurm allocation, and the launcher that requeues on a signal.
#   . slurm/lib.sh                      # from the repository root (the wrappers cd there first)
#   rlcw_run "${TORCHRUN[@]}" -m rlcw grpo "$@"
# Sets: NPROC (processes per node), NNODES, MASTER_ADDR, MASTER_PORT, OMP_NUM_THREADS, and
# TORCHRUN (an array: srun + torchrun with c10d rendezvous flags inside a job, ready for "$@").
# Knobs: RLCW_VENV (default .venv), NPROC (default: GPUs on the node, else 1), MASTER_ADDR (default:
# first host of SLURM_JOB_NODELIST), MASTER_PORT (default: 20000 + job id mod 20000, so concurrent
# jobs differ).
#
# Executed instead of sourced, it prints the torchrun command one node runs (what srun starts on
# every node), built from the SLURM_* variables in the environment, without srun and without a venv:
#   SLURM_JOB_ID=7 SLURM_NNODES=2 SLURM_JOB_NODELIST='node[01-02]' bash slurm/lib.sh --print-launch
#   torchrun --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint node01:20007 --rdzv_id 7

rlcw_die() { echo "rlcw slurm: $*" >&2; exit 2; }

# The first host of a Slurm hostlist ("node[03-05,9],gpu1" -> node03): scontrol when it is installed,
# else the same expansion of the first entry done here (hostlists with one bracket group).
rlcw_first_host() {
  local list=$1 prefix rest first after
  if command -v scontrol >/dev/null 2>&1; then
    first=$(scontrol show hostnames "$list" 2>/dev/null | head -n 1 || true)
    [ -n "$first" ] && { echo "$first"; return 0; }
  fi
  prefix=${list%%[[,]*}
  if [ "${list:${#prefix}:1}" = "[" ]; then
    rest=${list:${#prefix}+1}
    first=${rest%%[],-]*}
    after=${rest#*]}
    echo "$prefix$first${after%%,*}"
  else
    echo "$prefix"
  fi
}

# The rendezvous from the allocation: one torchrun per node, NPROC ranks each, meeting through the
# c10d store on the first node. Sets NPROC NNODES CPUS MASTER_ADDR MASTER_PORT JOB_ID OMP_NUM_THREADS
# and TORCHRUN (torchrun only, no srun).
rlcw_rendezvous() {
  local gpus=${SLURM_GPUS_ON_NODE:-0}
  NPROC=${NPROC:-$(( gpus > 0 ? gpus : 1 ))}
  NNODES=${SLURM_NNODES:-1}
  CPUS=${SLURM_CPUS_PER_TASK:-$(nproc)}
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( CPUS / NPROC > 0 ? CPUS / NPROC : 1 ))}
  if [ -n "${SLURM_JOB_NODELIST:-}" ]; then
    MASTER_ADDR=${MASTER_ADDR:-$(rlcw_first_host "$SLURM_JOB_NODELIST")}
  else
    MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
  fi
  JOB_ID=${SLURM_JOB_ID:-$$}
  MASTER_PORT=${MASTER_PORT:-$(( 20000 + JOB_ID % 20000 ))}
  export MASTER_ADDR MASTER_PORT
  TORCHRUN=(torchrun --nnodes "$NNODES" --nproc_per_node "$NPROC" --rdzv_backend c10d
    --rdzv_endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv_id "$JOB_ID")
}

# Run the launch command in the background and wait, so that the batch shell can act on a signal:
# `#SBATCH --signal=B:USR1@300` sends USR1 before the time limit and the job requeues itself (it
# needs `#SBATCH --requeue`); with `train.resume=auto` the next start continues from the last
# checkpoint. Preemption and `scontrol requeue` need nothing here: Slurm requeues a --requeue job.
rlcw_run() {
  local pid status
  trap 'rlcw_requeue' USR1
  echo "rlcw launch: $*"
  "$@" &
  pid=$!
  while true; do
    status=0
    wait "$pid" || status=$?
    kill -0 "$pid" 2>/dev/null || return "$status"  # a status > 128 with the child alive was the trap
  done
}

rlcw_requeue() {
  echo "rlcw slurm: USR1 at $(date -u +%FT%TZ) (time limit near): requeueing job ${SLURM_JOB_ID:-?}" >&2
  if [ -n "${SLURM_JOB_ID:-}" ]; then
    scontrol requeue "$SLURM_JOB_ID" || echo "rlcw slurm: scontrol requeue failed (submitted without --requeue?)" >&2
  fi
}

# What every wrapper needs before its launch line: repository root, the virtual environment,
# logs/, the rendezvous, srun on every node inside a job, and the run header.
rlcw_setup() {
  { [ -f pyproject.toml ] && [ -d rlcw ]; } || rlcw_die "run from the rlcw repository root (sbatch from there: SLURM_SUBMIT_DIR=$PWD)"
  local venv=${RLCW_VENV:-.venv}
  [ -x "$venv/bin/rlcw" ] || rlcw_die "rlcw is not installed in $venv: run scripts/setup.sh first (or set RLCW_VENV)"
  # shellcheck disable=SC1091
  . "$venv/bin/activate"
  mkdir -p logs
  rlcw_rendezvous
  if [ -n "${SLURM_JOB_ID:-}" ]; then
    # Slurm >= 22.05: srun no longer inherits --cpus-per-task from the allocation; pass it on.
    local srun=(srun --ntasks-per-node=1 --nodes "$NNODES" --kill-on-bad-exit=1)
    [ -n "${SLURM_CPUS_PER_TASK:-}" ] && srun+=(--cpus-per-task="$SLURM_CPUS_PER_TASK")
    TORCHRUN=("${srun[@]}" "${TORCHRUN[@]}")
  fi
  if [ "${SLURM_GPUS_ON_NODE:-0}" -gt 0 ]; then
    # A rank that hits an NCCL error or timeout aborts (and srun --kill-on-bad-exit ends the job)
    # instead of hanging until the time limit; the second name is the one torch < 2.2 reads.
    export TORCH_NCCL_ASYNC_ERROR_HANDLING=${TORCH_NCCL_ASYNC_ERROR_HANDLING:-1}
    export NCCL_ASYNC_ERROR_HANDLING=${NCCL_ASYNC_ERROR_HANDLING:-1}
  fi
  echo "rlcw job ${SLURM_JOB_ID:-local} ($(date -u +%FT%TZ)) on $(hostname): nodes=$NNODES procs/node=$NPROC" \
    "threads/proc=$OMP_NUM_THREADS rendezvous=$MASTER_ADDR:$MASTER_PORT restarts=${SLURM_RESTART_COUNT:-0}" \
    "git=$(git rev-parse --short HEAD 2>/dev/null || echo none)"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  [ "${1:-}" = --print-launch ] || rlcw_die "usage: bash slurm/lib.sh --print-launch (or source it from a wrapper)"
  rlcw_rendezvous
  printf '%q ' "${TORCHRUN[@]}"
  echo
else
  rlcw_setup
fi
