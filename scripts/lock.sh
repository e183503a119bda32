#!/usr/bin/env bash
# Refresh requirements/lock.txt, the pinned and hashed environment that scripts/setup.sh
# installs for both README commands and CI, from pyproject.toml's ranges (core + pipeline +
# dev + hub). Review its diff like code. With no argument, pins already in the lock are kept and only
# what pyproject.toml changed is resolved; `--upgrade` re-resolves everything to the newest
# releases the ranges admit; `--upgrade-package NAME` moves one package.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/pip-compile --quiet --extra dev --extra pipeline --extra hub --strip-extras --generate-hashes \
  --allow-unsafe --no-emit-index-url --no-emit-find-links --constraint requirements/torch.txt \
  --output-file requirements/lock.txt "$@" pyproject.toml
echo "lock: requirements/lock.txt ($(grep -c '==' requirements/lock.txt) pins); review: git diff requirements/lock.txt"
