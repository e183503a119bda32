#!/usr/bin/env bash
# Everything that needs a GPU, in one device call of under 9 minutes on a bare lent machine
# (docs/how-to/gpu.md): install the carried wheels the image lacks (scripts/device_wheels.txt,
# downloaded here by scripts/device_wheels.sh into .whl/) into a temporary folder, run
# tests/test_cuda.py, count the padding of CRAFT's recipe partition (benchmarks/padding.py), time
# the bucketed vectorised engine and try torch.compile on its step on an H100/H200
# (benchmarks/bucketed.py), then time the paper recipes on synthetic CIFAR-10 with each engine,
# untracked and tracked (benchmarks/gpu_recipes.py). Writes $OUT/gpu_check.txt (the log),
# $OUT/padding.json, $OUT/bucketed.json and $OUT/gpu_table.md (the table; $OUT/gpu_table.json
# the raw times).
#
#     bash benchmarks/gpu_check.sh                            # on the GPU machine
#     bash benchmarks/gpu_check.sh --device cpu --rounds 1    # dry run here: tiny sizes
#
# Options: --device cuda|cpu (default cuda), --rounds N timed rounds per run (default 10),
# --wheels DIR (default .whl), --budget S: no recipe run starts after S seconds (default 220).
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE=cuda ROUNDS=10 WHEELS=.whl BUDGET=220
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --wheels) WHEELS=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    *) echo "gpu_check: unknown option $1; allowed: --device, --rounds, --wheels, --budget" >&2
       exit 2 ;;
  esac
done
case "$DEVICE" in cuda|cpu) ;; *) echo "gpu_check: --device $DEVICE; allowed: cuda, cpu" >&2; exit 2 ;; esac
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.txt"
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
export PYTHONUNBUFFERED=1
{
  echo "== $(date -u +%FT%TZ) gpu_check --device $DEVICE --rounds $ROUNDS"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  # 1. wheels: the list must be well formed; the folder, when there, exactly the list
  "$PY" benchmarks/wheel_list.py verify || exit 1
  if [ -d "$WHEELS" ]; then
    "$PY" benchmarks/wheel_list.py check "$WHEELS" || exit 1
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$SITE" "$WHEELS"/*.whl || exit 1
    export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    echo "installed $(ls "$WHEELS"/*.whl | wc -l) wheels into $SITE"
  elif [ "$DEVICE" = cuda ]; then
    echo "gpu_check: no $WHEELS folder: run scripts/device_wheels.sh here and carry .whl" >&2
    exit 2
  else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    echo "dry run: no $WHEELS folder, install skipped (wheel list verified)"
  fi
  "$PY" -c "import torch, pydantic; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'pydantic', pydantic.VERSION)"
  # 2. the CUDA tests (all skipped without CUDA)
  timeout 120 "$PY" -m pytest -q -n 0 -m cuda tests/test_cuda.py -p no:cacheprovider
  echo "cuda tests exit: $?"
  # 3. padding of CRAFT's recipe partition, counted (lock-step vs buckets; no training)
  COUNTED=50; [ "$DEVICE" = cpu ] && COUNTED=5
  timeout 60 "$PY" -m benchmarks.padding --rounds "$COUNTED" --json "$OUT/padding.json"
  echo "padding exit: $?"
  # 4. the bucketed engine's seconds per round, and torch.compile of its step (H100/H200)
  SMALL=(); [ "$DEVICE" = cpu ] && SMALL=(--tiny --rounds 1)
  timeout 120 "$PY" -m benchmarks.bucketed --device "$DEVICE" --out "$OUT/bucketed.json" \
    "${SMALL[@]}"
  echo "bucketed exit: $?"
  # 5. the recipes, each engine, untracked and tracked
  TINY=(); [ "$DEVICE" = cpu ] && TINY=(--tiny --warmup 1)
  timeout 300 "$PY" -m benchmarks.gpu_recipes --device "$DEVICE" --rounds "$ROUNDS" \
    --budget "$BUDGET" --out "$OUT/gpu_table.md" "${TINY[@]}"
  echo "recipes exit: $?"
} 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
