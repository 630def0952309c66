#!/usr/bin/env bash
# The device check: on a machine with an NVIDIA GPU, after the README's setup (bash scripts/setup.sh --dev),
# run the gpu test tier and a short table of real runs, and print one summary table; no network. A whole run
# took 6-8 minutes on one H100 when the 0.5B step rows stopped early (tiny models carried, built); with the
# decode row and both step rows running to the end it will take longer (not yet run): on a 15-minute lease,
# run the short form below.
# Usage: bash scripts/gpu_check.sh [--quick] [--only ROWS]
#   --quick          leave out the 0.5B-shape rows (decoding, the step against TRL)
#   --only ROWS      only these rows of the table (python scripts/gpu_check.py --help lists them)
#   RLRM_PYTHON      the interpreter (default: .venv/bin/python)
#   GPU_CHECK_OUT    where the runs, logs and gpu_check.md go (default: gpu_check_out, replaced each time)
#   GPU_TIER_K       run only the gpu tier's tests this pytest -k expression selects (default: all)
#   GPU_CHECK_BUDGET_S  seconds for the whole check (a lease): the tier and the row running are stopped there,
#                    the rows not started marked NOT REACHED, and the table still written (default: no limit)
# On a short lease, only the rows not yet measured:
#   GPU_CHECK_BUDGET_S=520 GPU_TIER_K="graph or compile or sleep or moving or random_state or chunks or tf32 or trainers_gpu or host or fsdp2 or doctor" bash scripts/gpu_check.sh --only decode,step-fp32,step-bf16,logits,step-tf32
# On an offline machine lent for minutes, the wheels it lacks and the one command: docs/development.md
# ("The device check on a lent, offline GPU machine"; scripts/gpu_wheels.py fetches the wheels).
set -uo pipefail
cd "$(dirname "$0")/.."
py=${RLRM_PYTHON:-.venv/bin/python}
out=${GPU_CHECK_OUT:-gpu_check_out}
budget=${GPU_CHECK_BUDGET_S:-}
if [ -n "$budget" ] && ! [[ "$budget" =~ ^[0-9]+$ ]]; then
  echo "gpu_check: GPU_CHECK_BUDGET_S must be whole seconds, not '$budget'" >&2
  exit 2
fi
if ! command -v "$py" >/dev/null 2>&1; then
  echo "gpu_check: no interpreter $py; set RLRM_PYTHON to the python that has torch (after bash scripts/setup.sh: .venv/bin/python)" >&2
  exit 2
fi
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "gpu_check: $py cannot import torch; set RLRM_PYTHON to the python that has it" >&2
  exit 2
fi
if ! "$py" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo "gpu_check: no CUDA device visible to $py (torch.cuda.is_available() is False); run it on a GPU machine" >&2
  exit 2
fi
rm -rf "$out" && mkdir -p "$out"
export PYTHONUNBUFFERED=1
# the models, the tier and the rows share the budget: each stops where it runs out. SIGINT, not SIGTERM: pytest
# stopped by SIGINT still writes its JUnit XML, so the table keeps what passed before the budget ran out.
limit() { [ -n "$budget" ] && echo timeout -s INT -k 30 "$((budget - SECONDS > 1 ? budget - SECONDS : 1))"; }
# the models first, so the tier's tests find them built (copied from the shipped ones: seconds)
if ! $(limit) "$py" -m rlrm models prepare >"$out/models_first.log" 2>&1; then
  echo "gpu_check: rlrm models prepare failed or ran out of the budget; see $out/models_first.log" >&2
fi
start=$SECONDS
$(limit) "$py" -m pytest -m gpu tests/gpu -q -p no:cacheprovider ${GPU_TIER_K:+-k "$GPU_TIER_K"} --junitxml="$out/tier.xml" 2>&1 \
  | tee "$out/tier.log" | tail -n 25
tier_rc=${PIPESTATUS[0]}
tier_s=$((SECONDS - start))
rows=()
[ -n "$budget" ] && rows=(--budget-s "$((budget - SECONDS))")
"$py" scripts/gpu_check.py --out "$out" --tier-xml "$out/tier.xml" --tier-seconds "$tier_s" --tier-rc "$tier_rc" "${rows[@]}" "$@"
