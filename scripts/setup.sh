#!/usr/bin/env bash
# Idempotent setup of the machine and the checkout: Debian packages, .venv, an editable install
# with the test and dev extras. A no-op (well under a second) when all of that is in place.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}

# gcc and libfuse3-dev build pyfuse3, which PyPI ships as source only.
apt_packages=(fuse3 libfuse3-dev pkg-config fuse-overlayfs git gcc)
# Debian's own python3 needs python3-venv (ensurepip) to create a virtualenv.
"$python" -c 'import ensurepip' 2>/dev/null || apt_packages+=(python3-venv)
missing=()
for pkg in "${apt_packages[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "setup: gitsess needs Python 3.11 or newer; $python is $("$python" --version)" >&2
    exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating .venv"
    "$python" -m venv .venv
fi

# Install again when the declared dependencies changed since the last install, or when an
# import shows the environment incomplete.
stamp=.venv/.gitsess-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]] ||
    ! .venv/bin/python -c 'import gitsess.cli, pyfuse3, pytest, xdist, mypy' 2>/dev/null; then
    echo "setup: installing gitsess with its test and dev extras into .venv"
    .venv/bin/python -m pip install -q -e '.[test,dev]'
    touch "$stamp"
fi
