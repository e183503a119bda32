#!/usr/bin/env bash
# Refresh docs/ui/prefect_*.png and docs/ui/optuna_*.png from the real Prefect UI and
# optuna-dashboard. Needs Debian's chromium (driven by scripts/ui_shot.py) and the `dashboard`
# extra (.venv/bin/pip install -e ".[dashboard]"). Everything runs in a temporary folder, so the
# project's mlflow.db, optuna.db and Prefect home are untouched: a Prefect server on
# 127.0.0.1:4211, a 3-cell sweep (rounds=2) run through it, a 3-trial study (rounds=2),
# optuna-dashboard on 127.0.0.1:8085, then screenshots of the sweep's flow run (Task Runs tab),
# its Markdown artifact, the study's history and its trials with their user attributes.
# Usage: scripts/ui_screenshots_prefect_optuna.sh        (a few minutes on 2 CPU cores)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tmp=$(mktemp -d)
prefect_port=4211
dashboard_port=8085
export PREFECT_HOME=$tmp/prefect PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_API_URL=http://127.0.0.1:$prefect_port/api
export MLFLOW_TRACKING_URI=sqlite:///$tmp/mlflow.db FEDCORE_ARTIFACT_LOCATION=$tmp/mlartifacts
mkdir -p "$PREFECT_HOME"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -- -"$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
setsid .venv/bin/prefect server start --host 127.0.0.1 --port "$prefect_port" > "$tmp/prefect.log" 2>&1 &
pids+=($!)
until curl -sf "$PREFECT_API_URL/health" > /dev/null; do sleep 1; done

cat > "$tmp/ui_demo.yaml" <<YAML
name: ui_demo
base: $root/configs/experiment.yaml
grid:
  - method: [fedavg, fedprox, fedquad]
    dataset.alpha: [0.1]
set: {model.name: mlp, rounds: 2, seed: 0}
YAML
.venv/bin/fedcore sweep "$tmp/ui_demo.yaml" --workers 2
.venv/bin/fedcore tune configs/studies/fedquad_margins.yaml n_trials=3 rounds=2 \
  storage="sqlite:///$tmp/optuna.db" study_name=fedquad_margins_demo

setsid .venv/bin/optuna-dashboard "sqlite:///$tmp/optuna.db" --host 127.0.0.1 \
  --port "$dashboard_port" > "$tmp/dashboard.log" 2>&1 &
pids+=($!)
until curl -sf "http://127.0.0.1:$dashboard_port/" > /dev/null; do sleep 1; done

read -r flow_run artifact < <(.venv/bin/python - <<'PY'
from prefect.client.orchestration import get_client

with get_client(sync_client=True) as client:
    run = next(r for r in client.read_flow_runs() if r.state_name == "Completed")
    art = next(a for a in client.read_artifacts() if (a.key or "").startswith("sweep-"))
    print(run.id, art.id)
PY
)
study=$(.venv/bin/python -c "import optuna, sys; print(optuna.storages.RDBStorage(sys.argv[1]).get_study_id_from_name('fedquad_margins_demo'))" "sqlite:///$tmp/optuna.db")

prefect_ui=http://127.0.0.1:$prefect_port
dashboard=http://127.0.0.1:$dashboard_port/dashboard/studies/$study
shot() { .venv/bin/python scripts/ui_shot.py "$@"; }
shot docs/ui/prefect_sweep.png "$prefect_ui/runs/flow-run/$flow_run" --click "Task Runs" --size 1400x1000
shot docs/ui/prefect_artifact.png "$prefect_ui/artifacts/artifact/$artifact" --size 1800x720
shot docs/ui/optuna_history.png "$dashboard" --size 1400x900
shot docs/ui/optuna_trials.png "$dashboard/trials" --click "Trial 2" --size 1400x760
echo "wrote docs/ui/prefect_sweep.png prefect_artifact.png optuna_history.png optuna_trials.png"
