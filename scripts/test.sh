#!/usr/bin/env bash
# Lint, type-check and test. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
bin=.venv/bin

"$bin/ruff" check .
"$bin/ruff" format --check .
"$bin/mypy"
# A bound on the whole run, so that a hang the per-test timeout cannot end still ends the run
# with its output (GITSESS_TEST_LIMIT seconds; raise it for long -m slow runs).
timeout --kill-after=30 "${GITSESS_TEST_LIMIT:-1500}" "$bin/pytest" "$@"
