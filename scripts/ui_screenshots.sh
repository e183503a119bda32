#!/usr/bin/env bash
# Refresh docs/ui/*.png from the real MLflow UI (needs Debian's chromium): serves this project's
# store with `fedcore ui` on a spare port, then screenshots the training view and one run.
# Usage: scripts/ui_screenshots.sh RUN_ID
set -euo pipefail
cd "$(dirname "$0")/.."
run_id=${1:?usage: scripts/ui_screenshots.sh RUN_ID}
port=5055
setsid .venv/bin/fedcore ui --port "$port" > /dev/null 2>&1 &
ui=$!
trap 'kill -- -"$ui" 2>/dev/null || true' EXIT
sleep 15
exp=$(.venv/bin/python -c "from fedcore.tracking import get_experiment_id, load_settings, mlflow_client as c; s = load_settings(); print(get_experiment_id(c(s), s))")
shot() {
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
    --user-data-dir="$(mktemp -d)" --window-size="$1" --virtual-time-budget=20000 \
    --screenshot="$2" "$3" 2> /dev/null
}
base="http://127.0.0.1:$port/#/experiments/$exp"
shot 1600,1000 docs/ui/mlflow_runs.png "$base/runs?workflowType=machine_learning"
shot 1600,1100 docs/ui/mlflow_run.png "$base/runs/$run_id?workflowType=machine_learning"
