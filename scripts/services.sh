#!/usr/bin/env bash
# Install the Debian packages the integration tests use: slurm-wlm + munge (a one-node Slurm
# cluster) and chromium + chromium-driver (the human-study page in a headless browser).
#   bash scripts/services.sh          # needs root (or passwordless sudo); skips what is there
# Without root it prints what is missing and exits 0: those tests then skip (fail under CI=true).
set -euo pipefail
need=()
command -v sbatch >/dev/null 2>&1 || need+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || need+=(munge)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
if [ "${#need[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  sudo=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo="sudo -n"
else
  echo "services.sh: not root; missing Debian packages: ${need[*]} (their tests will skip)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
echo "services.sh: installed ${need[*]}"
