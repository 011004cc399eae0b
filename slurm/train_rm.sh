#!/usr/bin/env bash
#SBATCH --job-name=rlcw-train-rm
#SBATCH --output=logs/%x-%j.out
#SBATCH --open-mode=append
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --time=04:00:00
#SBATCH --requeue
#SBATCH --signal=B:USR1@300
# Reward-model training (`rlcw train-rm`) under torchrun, one or more nodes. All hyperparameters are config:
#   sbatch slurm/train_rm.sh --config configs/train_rm/cpu.yaml train.save_steps=20 train.resume=auto
#   sbatch --gpus-per-node=8 --cpus-per-task=64 --exclusive slurm/train_rm.sh --config configs/train_rm/litbench_bt_1b.yaml train.resume=auto
#   sbatch --gpus-per-node=8 --cpus-per-task=64 --exclusive slurm/train_rm.sh --config configs/train_rm/litbench_bt_8b.yaml train.resume=auto
#   sbatch --gpus-per-node=8 --cpus-per-task=64 --exclusive slurm/train_rm.sh --config configs/train_rm/litbench_genrm_7b.yaml train.resume=auto
# Preemption, `scontrol requeue` and the time limit (USR1 300 s before it: the job requeues itself)
# restart the job with the same arguments: pass train.resume=auto and it continues from its last checkpoint.
# Environment: RLCW_VENV, NPROC, MASTER_PORT (see slurm/lib.sh). Submit from the repo root (bash slurm/submit.sh makes logs/).
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"
# shellcheck source=slurm/lib.sh
. slurm/lib.sh
echo "rlcw train-rm $*"
rlcw_run "${TORCHRUN[@]}" -m rlcw train-rm "$@"
