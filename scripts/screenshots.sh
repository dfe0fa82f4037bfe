#!/usr/bin/env bash
# Regenerates docs/screenshots/*.png: the dashboard's browser tests (tests/web/test_actions.py)
# and tests/web/test_workplace.py take them as they click through every action, and write them here when VIRTPLANE_SCREENSHOTS
# names a directory (in an ordinary test run they go to a temporary one, so that running the
# suite never changes the worktree). Needs Chromium and playwright, as those tests do.
#   scripts/screenshots.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export VIRTPLANE_SCREENSHOTS="$ROOT/docs/screenshots"
exec .venv/bin/pytest -q -p no:cacheprovider tests/web/test_actions.py tests/web/test_workplace.py "$@"
