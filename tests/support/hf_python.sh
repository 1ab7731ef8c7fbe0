#!/usr/bin/env bash
# Runs a Python script with the transformers of tools/install_deps.sh --hf (its virtual environment at
# ${LWCL_HF_VENV:-$HOME/.cache/lwcl/hf-venv}), offline, single-threaded.
#   bash tests/support/hf_python.sh script.py [args...]
set -euo pipefail
venv="${LWCL_HF_VENV:-$HOME/.cache/lwcl/hf-venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "hf_python.sh: no transformers environment at $venv; run tools/install_deps.sh --hf" >&2
  exit 1
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" "$@"
