#!/usr/bin/env bash
# The main job on a fresh machine: set up, then run the whole loop on the embedded model and
# leave runs/quickstart/report.md (+ plots, samples, exported model).
#   bash scripts/quickstart.sh [key=value ...]     e.g. grpo.train.max_steps=20
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
echo "set-up took $(( $(date +%s) - start ))s"
status=0
rlcw quickstart --config configs/quickstart/cpu.yaml "$@" || status=$?  # 1: a quality gate failed (see the report)
echo "quickstart wall time (incl. set-up): $(( $(date +%s) - start ))s; report: runs/quickstart/report.md"
exit "$status"
