#!/usr/bin/env bash
# Idempotent machine + checkout setup: Debian packages, .venv, editable install with extras.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(fuse3 libfuse3-dev pkg-config git)
missing=()
for pkg in "${apt_packages[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}"
fi

python=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating .venv"
    "$python" -m venv .venv
fi

# Reinstall only when the dependency declaration changed since the last successful install.
stamp=.venv/.gitsess-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]] || ! .venv/bin/python -c 'import gitsess' 2>/dev/null; then
    echo "setup: installing gitsess and its extras into .venv"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[test,dev]'
    touch "$stamp"
fi
