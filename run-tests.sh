#!/usr/bin/env bash
# Set up the environment and run the test suite (CPU, a few minutes). Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
.venv/bin/ruff check fedcore flows tests benchmarks
.venv/bin/mypy  # the core and flows are type-checked ([tool.mypy] in pyproject.toml)
.venv/bin/lint-imports --no-cache  # the import contracts ([tool.importlinter] in pyproject.toml)
# the docs site: a broken link, a missing page or a bad API reference fails (docs/how-to/docs.md)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir site
# two workers (pytest-xdist): one core runs tests while the other's test waits on a subprocess
# or server; `-n 0` in the arguments runs them in this process instead
.venv/bin/python -m pytest -q -n 2 --dist loadgroup "$@"
