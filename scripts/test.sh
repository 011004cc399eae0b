#!/usr/bin/env bash
# Set up and run the tests. Tiers (pytest markers, by folder): unit, recipe, integration.
#   bash scripts/test.sh                      # all tiers (what CI runs)
#   RLCW_TIERS=unit bash scripts/test.sh      # one tier;  extra args go to pytest
# pytest's exit code 5 (no tests collected) is a failure here.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/services.sh
# shellcheck disable=SC1091
. .venv/bin/activate
set +e
python -m pytest -m "${RLCW_TIERS:-unit or recipe or integration}" --durations=15 "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$code"
