#!/usr/bin/env bash
# Download the wheels the lent GPU machine lacks (scripts/device_wheels.txt: exactly those names
# and versions, no dependencies) for CPython 3.12 on manylinux x86_64, into .whl/ (git-ignored).
# benchmarks/gpu_check.sh installs them there; the folder travels with `carry: [".whl"]` and
# counts towards the device call's 64 MiB. Needs network (PyPI) here, none there.
#
#     bash scripts/device_wheels.sh [DEST] [PYTHON_VERSION]     # defaults: .whl 3.12
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.whl}
PYVER=${2:-3.12}
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
LIST=scripts/device_wheels.txt
mapfile -t PKGS < <(grep -v '^\s*#' "$LIST" | grep -v '^\s*$')
mkdir -p "$DEST"
PLATFORMS=()
for p in manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do
  PLATFORMS+=(--platform "$p")
done
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" \
  --implementation cp "${PLATFORMS[@]}" -d "$DEST" "${PKGS[@]}"
"$PY" benchmarks/wheel_list.py check "$DEST"
du -sh "$DEST"
