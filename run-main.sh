#!/usr/bin/env bash
# Set up the environment and run the main job: the showcase sweep on the embedded digits data,
# recorded in MLflow (mlflow.db in this folder). Extra arguments are sweep overrides (rounds=5).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
# one Dask worker per core; the report is written in the sweep's process (`fedcore report
# configs/sweeps/main.yaml` writes it again from the store)
.venv/bin/fedcore sweep configs/sweeps/main.yaml --runner dask --workers "$(nproc)" --report "$@"
cat <<MSG

The comparison report (table.md/.html/.csv and plots) is in $(pwd)/reports/main/.
Runs are recorded in $(pwd)/mlflow.db. To compare them in the MLflow UI:
  .venv/bin/fedcore ui
and open the link it prints (experiment "fedcore" in the training view; the sweep is one parent
run, its description the report table).
MSG
