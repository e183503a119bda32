#!/usr/bin/env bash
# Create (or reuse) .venv at the project root with exactly the locked environment
# (requirements/lock.txt: every package pinned and hashed; scripts/lock.sh refreshes it), then
# fedcore itself, editable. Re-installs only when the lock, pyproject.toml or setup.py changed
# since the last successful install.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOCK=requirements/lock.txt
NEED_MB=7000  # torch with its CUDA libraries (x86_64 PyPI wheels) makes the venv about 6.5 GB

free_mb() { df -Pm . | awk 'NR == 2 {print $4}'; }

pip_run() {
  if ! .venv/bin/python -m pip --disable-pip-version-check "$@" \
      2> >(grep -v "^WARNING: Location" >&2); then
    echo "setup: pip $1 failed (its error is above)." >&2
    echo "setup: free disk in $(pwd): $(free_mb) MB; the venv needs about $NEED_MB MB." >&2
    exit 1
  fi
}

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.fedcore-installed
want=$(cat "$LOCK" pyproject.toml setup.py | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  if [ "$(free_mb)" -lt "$NEED_MB" ]; then
    echo "setup: warning: $(free_mb) MB free in $(pwd); the install needs about $NEED_MB MB." >&2
  fi
  # the locked versions, each checked against its recorded hashes; nothing resolved here
  pip_run install --quiet --require-hashes --no-deps -r "$LOCK"
  # packages the lock does not name (an older lock's, a hand install) go
  extra=$(comm -23 \
    <(.venv/bin/python -m pip freeze --exclude-editable 2>/dev/null | sed -E 's/(==| @ ).*//' \
        | tr 'A-Z_.' 'a-z--' | sort -u) \
    <(grep -E '^[A-Za-z0-9]' "$LOCK" | sed 's/==.*//' | tr 'A-Z_.' 'a-z--' | sort -u))
  if [ -n "$extra" ]; then
    # shellcheck disable=SC2086
    pip_run uninstall --quiet --yes $extra
  fi
  # the distribution was called fedcore before it became fedcore-fl: drop the old one's files
  .venv/bin/python -m pip uninstall --yes --quiet fedcore > /dev/null 2>&1 || true
  # fedcore itself; setuptools' notes on editable installs are kept out of sight unless it fails
  log=$(mktemp)
  if ! .venv/bin/python -m pip --disable-pip-version-check install --quiet --no-deps -e . \
      > "$log" 2>&1; then
    cat "$log" >&2
    echo "setup: pip could not install fedcore itself (its error is above)." >&2
    exit 1
  fi
  rm -f "$log"
  pip_run check
  .venv/bin/python -c "import fedcore, torch, mlflow, prefect"
  echo "$want" > "$stamp"
fi
# Prefect's database (its migrations, about 5 s of CPU) is made here, once, not by the first
# sweep's temporary server (fedcore.flows.server.prepare_database)
if [ -z "${PREFECT_API_URL:-}" ] && [ ! -f "${PREFECT_HOME:-.fedcore/prefect}/prefect.db" ]; then
  .venv/bin/python -m fedcore.flows.server
fi
