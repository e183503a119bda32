#!/usr/bin/env bash
# The vectorised-engine benchmark on a GPU machine, in one call of under 10 minutes:
# client-steps/s sequential vs vectorised, CNN on digits and MNIST (../shared), 5/20/50 clients
# per round, 10 local steps, best of 3; the table also goes to $OUT/vectorised_gpu.txt if set.
#
#     bash benchmarks/gpu_vectorised.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
OUT_FILE="${OUT:-/tmp}/vectorised_gpu.txt"
timeout 540 "$PY" -m benchmarks.vectorised --device cuda --steps 10 --repeats 3 | tee "$OUT_FILE"
