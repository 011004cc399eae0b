#!/usr/bin/env bash
# The outcome study on a fresh machine: set up, then run every stage on the embedded model and
# leave runs/outcome/report.md (the Gao plot with fits, the RM table, the surface curves, every point with CIs).
#   bash scripts/outcome_study.sh [key=value ...]     e.g. data.tmas=/data/tell-me-a-story runs=[grpo,best_of_n]
#   RLCW_OUTCOME_CONFIG=configs/outcome/seeds_cpu.yaml bash scripts/outcome_study.sh    # another study config
# TELL ME A STORY (human side of the gold RM) is read from data.tmas (default ../shared/data/tell-me-a-story,
# or $RLCW_TMAS_DIR when set). A killed study continues where it stopped when run again.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
RLCW_EXTRAS=${RLCW_EXTRAS-} bash scripts/setup.sh   # what the study runs: no test, serving or tracking extras
# shellcheck disable=SC1091
. .venv/bin/activate
echo "set-up took $(( $(date +%s) - start ))s"
extra=()
if [[ -n "${RLCW_TMAS_DIR:-}" ]]; then extra+=("data.tmas=${RLCW_TMAS_DIR}"); fi
rlcw outcome --config "${RLCW_OUTCOME_CONFIG:-configs/outcome/cpu.yaml}" "${extra[@]}" "$@"
echo "outcome study wall time (incl. set-up): $(( $(date +%s) - start ))s; report: runs/outcome/report.md"
