# Sourced by the slurm/*.sh wrappers (not submitted itself): environment checks, the run header,
# and the torchrun rendezvous taken from the Slurm allocation.
#   . slurm/lib.sh            # from the repository root (the wrappers cd there first)
# Sets: NPROC (processes per node), NNODES, MASTER_ADDR, MASTER_PORT, OMP_NUM_THREADS, and
# TORCHRUN (an array: the torchrun command with c10d rendezvous flags, ready for "$@").
# Knobs: RLCW_VENV (default .venv), NPROC (default: GPUs on the node, else 1), MASTER_PORT
# (default: 20000 + job id mod 20000, so concurrent jobs differ).

rlcw_die() { echo "rlcw slurm: $*" >&2; exit 2; }

[ -f pyproject.toml ] && [ -d rlcw ] || rlcw_die "run from the rlcw repository root (sbatch from there: SLURM_SUBMIT_DIR=$PWD)"
VENV=${RLCW_VENV:-.venv}
[ -x "$VENV/bin/rlcw" ] || rlcw_die "rlcw is not installed in $VENV: run scripts/setup.sh first (or set RLCW_VENV)"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
mkdir -p logs

GPUS=${SLURM_GPUS_ON_NODE:-0}
NPROC=${NPROC:-$(( GPUS > 0 ? GPUS : 1 ))}
NNODES=${SLURM_NNODES:-1}
CPUS=${SLURM_CPUS_PER_TASK:-$(nproc)}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( CPUS / NPROC > 0 ? CPUS / NPROC : 1 ))}
if [ -n "${SLURM_JOB_NODELIST:-}" ]; then
  MASTER_ADDR=${MASTER_ADDR:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}
else
  MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
fi
JOB_ID=${SLURM_JOB_ID:-$$}
MASTER_PORT=${MASTER_PORT:-$(( 20000 + JOB_ID % 20000 ))}
export MASTER_ADDR MASTER_PORT

# One torchrun per node (srun starts it on every node of the allocation); torchrun starts NPROC
# ranks there and they meet through the c10d rendezvous on the first node.
TORCHRUN=(torchrun --nnodes "$NNODES" --nproc_per_node "$NPROC" --rdzv_backend c10d
  --rdzv_endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv_id "$JOB_ID")
if [ -n "${SLURM_JOB_ID:-}" ]; then
  TORCHRUN=(srun --ntasks-per-node=1 --nodes "$NNODES" --kill-on-bad-exit=1 "${TORCHRUN[@]}")
fi

echo "rlcw job ${SLURM_JOB_ID:-local} ($(date -u +%FT%TZ)) on $(hostname): nodes=$NNODES procs/node=$NPROC" \
  "threads/proc=$OMP_NUM_THREADS rendezvous=$MASTER_ADDR:$MASTER_PORT git=$(git rev-parse --short HEAD 2>/dev/null || echo none)"
