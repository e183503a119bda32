#!/usr/bin/env bash
# Create (or reuse) .venv at the project root and install fedcore with its dev and pipeline extras.
# Re-installs only when pyproject.toml or setup.py changed since the last successful install.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
NEED_MB=7000  # torch with its CUDA libraries (x86_64 PyPI wheels) makes the venv about 6.5 GB

free_mb() { df -Pm . | awk 'NR == 2 {print $4}'; }

pip_install() {
  if ! .venv/bin/python -m pip install --quiet "$@" 2> >(grep -v "^WARNING: Location" >&2); then
    echo "setup: pip could not install $* (its error is above)." >&2
    echo "setup: free disk in $(pwd): $(free_mb) MB; the venv needs about $NEED_MB MB." >&2
    exit 1
  fi
}

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.fedcore-installed
want=$(cat pyproject.toml setup.py | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  if [ "$(free_mb)" -lt "$NEED_MB" ]; then
    echo "setup: warning: $(free_mb) MB free in $(pwd); the install needs about $NEED_MB MB." >&2
  fi
  pip_install --upgrade pip
  # the distribution was called fedcore before it became fedcore-fl: drop the old one's files
  .venv/bin/python -m pip uninstall --yes --quiet fedcore > /dev/null 2>&1 || true
  pip_install -e ".[dev,pipeline]"
  .venv/bin/python -c "import fedcore, torch, mlflow, prefect"
  echo "$want" > "$stamp"
fi
