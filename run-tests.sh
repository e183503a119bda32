#!/usr/bin/env bash
# Set up the environment from the lock and run the test suite (CPU, minutes). Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
# seconds: every cross-reference to fedcore's API in docstrings and pages resolves (file:line)
.venv/bin/python scripts/check_refs.py
.venv/bin/ruff check fedcore flows tests benchmarks scripts
.venv/bin/mypy  # the core and flows are type-checked ([tool.mypy] in pyproject.toml)
.venv/bin/lint-imports --no-cache  # the import contracts ([tool.importlinter] in pyproject.toml)
# the docs site: a broken link, a missing page or a bad API reference fails (docs/how-to/docs.md);
# no --quiet: it drops warnings before --strict counts them
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir site
# Debian's chromium for the HTML report's browser checks (installed once; never fails the run)
bash scripts/setup_browser.sh
# three workers (pytest-xdist) on the 2 cores: many tests wait on a subprocess or a server
# while another runs (2026-12-05: 11 min 38 s against 12 min 14 s with two); `-n 0` in the
# arguments runs them in this process instead
.venv/bin/python -m pytest -q -n 3 --dist loadgroup "$@"
