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
limit=${GITSESS_TEST_LIMIT:-1500}
nonroot=tests/runtime/test_nonroot.py
if (($#)); then
    timeout --kill-after=30 "$limit" "$bin/pytest" "$@"
    exit
fi
timeout --kill-after=30 "$limit" "$bin/pytest" --ignore="$nonroot"
# The main paths (new, run in place, git inside, apply --commit, mount/umount, rm, gc) as an
# ordinary user made with useradd, as a job of its own: there a skip (no useradd, no Python
# the user can run) fails instead of passing unseen. The user gets its own virtualenv of a
# Python it can execute, which reaches this checkout's libraries, or copies of them
# (tests/nonroot.py).
GITSESS_NONROOT_REQUIRED=1 timeout --kill-after=30 600 "$bin/pytest" -n 0 "$nonroot"
