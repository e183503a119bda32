#!/usr/bin/env bash
# Build the docs site and screenshot six of its pages with headless Chromium (Debian's
# chromium) into docs/site-screenshots/: the home page, a tutorial, the config reference, the
# Python API reference (down to federate's parameter table) and two method pages with maths
# (rendered by the vendored KaTeX). The site is served from a temporary folder on 127.0.0.1
# while it is shot.
# Usage: bash scripts/site_screenshots.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/site-screenshots
port=${PORT:-8765}
tmp=$(mktemp -d)
mkdir -p "$out"
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$tmp/site"
.venv/bin/python -m http.server "$port" --bind 127.0.0.1 --directory "$tmp/site" \
  > /dev/null 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -rf "$tmp"' EXIT
until curl -sf "http://127.0.0.1:$port/" > /dev/null; do sleep 0.2; done
shot() {
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
    --user-data-dir="$(mktemp -d -p "$tmp")" --window-size="${3:-1280,900}" --virtual-time-budget=5000 \
    --screenshot="$out/$1.png" "http://127.0.0.1:$port/$2" 2> /dev/null
}
shot home ""
shot tutorial-server-rule tutorials/server-rule/
shot reference-config reference/config/
shot reference-api reference/api/ 1280,3200  # down to federate's parameter table
shot method-craft methods/craft/
shot method-crf methods/crf/
ls -l "$out"/*.png
