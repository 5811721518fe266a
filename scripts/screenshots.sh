#!/bin/sh
# Regenerates the console screenshots in docs/img/ (overview, events list,
# an entity page, the exception queue) from a live `hookledger demo`: the
# test behind the `screenshots` build tag runs the demo in-process, logs in
# with its one-time link in headless Chromium and saves 1280x800 PNGs.
#
# Needs Debian's chromium (apt-get install chromium) or
# HOOKLEDGER_CHROMIUM=/path/to/chrome. HOOKLEDGER_SCREENSHOTS_DIR writes
# them elsewhere.
set -eu
cd "$(dirname "$0")/.."
out="${HOOKLEDGER_SCREENSHOTS_DIR:-$PWD/docs/img}"
HOOKLEDGER_SCREENSHOTS_DIR="$out" go test -tags screenshots -run '^TestScreenshots$' -count=1 -v ./internal/demo
ls -l "$out"/*.png
