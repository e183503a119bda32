#!/usr/bin/env bash
# Chromium for the tests that open the report's HTML page (tests/test_report_html.py,
# tests/test_report.py): Debian's package, installed with apt-get when /usr/bin/chromium is
# missing and apt-get is there (as root, or with sudo that needs no password). Never fails the
# test run: where it cannot install, it says so in one line and those tests skip, saying why.
set -uo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup_browser: no chromium and no apt-get: the Chromium checks of the HTML report will skip (install chromium to run them)"
  exit 0
fi
if [ "${EUID:-1}" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "setup_browser: no chromium, and apt-get needs root: the Chromium checks of the HTML report will skip (sudo apt-get install chromium to run them)"
  exit 0
fi
echo "setup_browser: installing Debian's chromium with apt-get (once) ..."
log=$(mktemp)
if { "${sudo[@]}" apt-get install -y --no-install-recommends chromium \
     || { "${sudo[@]}" apt-get update && "${sudo[@]}" apt-get install -y --no-install-recommends chromium; }; } \
   >"$log" 2>&1; then
  echo "setup_browser: chromium installed: $(chromium --version 2>/dev/null)"
else
  echo "setup_browser: apt-get could not install chromium (last lines of its output below): the Chromium checks of the HTML report will skip"
  tail -n 3 "$log"
fi
rm -f "$log"
exit 0
