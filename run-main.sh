#!/usr/bin/env bash
# Set up the environment from the lock and run the main job: the showcase sweep on the embedded
# digits data, recorded in MLflow (mlflow.db in this folder). Extra arguments are sweep overrides
# (rounds=5); without them the run is the shipped one, and its report is published into the
# docs (docs/benchmarks/main-report.md, docs/report-example/, the README's quote of it).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
start=$SECONDS
# one Dask worker per core; each report is written in its sweep's process (`fedcore report
# configs/sweeps/main.yaml` writes it again from the store)
.venv/bin/fedcore sweep configs/sweeps/main.yaml --runner dask --workers "$(nproc)" --report \
  --latex "$@"
# the families again on seeds no earlier run used (100-104): the confirmation of the answers
.venv/bin/fedcore sweep configs/sweeps/main-confirm.yaml --runner dask --workers "$(nproc)" \
  --report --latex "$@"
elapsed=$((SECONDS - start))
if [ $# -eq 0 ]; then
  .venv/bin/python scripts/ship_main_report.py --seconds "$elapsed"
fi
cat <<MSG

The main job took $((elapsed / 60)) min $((elapsed % 60)) s after set-up.
The comparison report (table.md/.html/.csv, families.tex and plots) is in $(pwd)/reports/main/,
its confirmation on fresh seeds in $(pwd)/reports/main-confirm/.
Runs are recorded in $(pwd)/mlflow.db. To compare them in the MLflow UI:
  .venv/bin/fedcore ui
and open the link it prints (experiment "fedcore" in the training view; the sweep is one parent
run, its description the report table).
MSG
