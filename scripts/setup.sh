#!/usr/bin/env bash
# Set up rlrm in ./.venv with the serving and router extras (what `rlrm train --profile tiny-genrm`
# needs). Usage: bash scripts/setup.sh [--dev]
#   --dev  also install the test, report and Ray extras.
# On a machine without an NVIDIA GPU the CPU build of torch is installed first, so that
# resolving the other dependencies never pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${RLRM_VENV:-.venv}
extras="[serve,router]"
[[ "${1:-}" == "--dev" ]] && extras="[dev]"

if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
"$py" -m pip install -q --upgrade pip >/dev/null 2>&1 || true

torch_pin=${RLRM_TORCH:-torch==2.13.0}
if ! "$py" -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    "$py" -m pip install -q "torch"
  else
    # A local CPU wheel (pip's find-links), or the CPU index named by RLRM_TORCH_INDEX.
    "$py" -m pip install -q "$torch_pin" ${RLRM_TORCH_INDEX:+--index-url "$RLRM_TORCH_INDEX"}
  fi
fi
# Keep whatever torch is installed now: the constraint stops pip from replacing it.
constraint=$(mktemp)
trap 'rm -f "$constraint"' EXIT
"$py" -c "import torch; print('torch==' + torch.__version__)" > "$constraint"
"$py" -m pip install -q -c "$constraint" -e ".$extras"
echo "rlrm is installed in $venv (activate with: source $venv/bin/activate)"
