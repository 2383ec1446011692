#!/usr/bin/env bash
# Lint, type-check and test. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
bin=.venv/bin

"$bin/ruff" check .
"$bin/ruff" format --check .
"$bin/mypy"
"$bin/pytest" "$@"
