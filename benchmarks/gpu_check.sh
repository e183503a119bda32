#!/usr/bin/env bash
# Everything that needs a GPU, in one call for a lent GPU machine (under 10 minutes):
# the CUDA tests (tests/test_cuda.py, skipped elsewhere), then the vectorised-engine benchmark.
# Output also goes to $OUT/gpu_check.txt and $OUT/vectorised_gpu.txt when $OUT is set.
#
#     bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
LOG="${OUT:-/tmp}/gpu_check.txt"
{
  timeout 240 "$PY" -m pytest -q -m cuda tests/test_cuda.py -p no:cacheprovider
  echo "cuda tests exit: $?"
} 2>&1 | tee "$LOG"
bash benchmarks/gpu_vectorised.sh 2>&1 | tee -a "$LOG"
