#!/usr/bin/env bash
# Set up the environment from the lock and run the main job: the showcase sweep on the embedded
# digits data, recorded in MLflow (mlflow.db in this folder). Extra arguments are sweep overrides
# (rounds=5); without them the run is the shipped one, and its report is published into the
# docs (docs/benchmarks/main-report.md, docs/report-example/, the README's quote of it).
#
#   ./run-main.sh             the main job: every method, each paper's family in its protocol
#   ./run-main.sh --confirm   then: the families again on seeds no earlier run used (100-104),
#                             added beside the main job's answers in the published report
set -euo pipefail
cd "$(dirname "$0")"
sweep=configs/sweeps/main.yaml
report=reports/main
if [ "${1:-}" = "--confirm" ]; then
  shift
  sweep=configs/sweeps/main-confirm.yaml
  report=reports/main-confirm
fi
bash scripts/setup.sh
start=$SECONDS
# one Dask worker per core and one more: a cell also waits on its store's writes, and 3 worker
# processes ran 20 cells of the five protocols in 58-62 s where 2 took 65-67 s on 2 cores
# (2026-12-05; the numbers do not depend on the worker count: tests/test_scaleout.py, and every
# worker runs FEDCORE_TORCH_THREADS torch threads, default 1); the report is written in the
# sweep's process (`fedcore report configs/sweeps/main.yaml` writes it again from the store)
.venv/bin/fedcore sweep "$sweep" --runner dask --workers "$(($(nproc) + 1))" --report --latex \
  "$@"
elapsed=$((SECONDS - start))
if [ $# -eq 0 ]; then
  if [ "$sweep" = configs/sweeps/main.yaml ]; then
    .venv/bin/python scripts/ship_main_report.py --seconds "$elapsed"
  else
    .venv/bin/python scripts/ship_main_report.py --keep-facts --confirmation-seconds "$elapsed"
  fi
fi
cat <<MSG

$sweep took $((elapsed / 60)) min $((elapsed % 60)) s after set-up.
The comparison report (table.md/.html/.csv, families.tex and plots) is in $(pwd)/$report/.
Runs are recorded in $(pwd)/mlflow.db. To compare them in the MLflow UI:
  .venv/bin/fedcore ui
and open the link it prints (experiment "fedcore" in the training view; the sweep is one parent
run, its description the report table).
MSG
