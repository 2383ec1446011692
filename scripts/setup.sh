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

# pyfuse3 from its PyPI source with the series patches/pyfuse3/NNNN-*.patch applied in order (what
# each patch is for: its header; which could go upstream: docs/ARCHITECTURE.md), before gitsess
# itself so that pip finds the requirement met and keeps this build. The stamp is a hash over
# the series: a changed, added or removed patch rebuilds it.
pyfuse3_version=3.5.0
pyfuse3_series=(patches/pyfuse3/[0-9][0-9][0-9][0-9]-*.patch)
pyfuse3_stamp=.venv/.gitsess-pyfuse3-patch
pyfuse3_hash=$(for patch in "${pyfuse3_series[@]}"; do
    echo "$patch $(sha256sum <"$patch")"
done | sha256sum)
if [[ "$(cat "$pyfuse3_stamp" 2>/dev/null)" != "$pyfuse3_hash" ]] ||
    ! .venv/bin/python -c 'import pyfuse3' 2>/dev/null; then
    echo "setup: building pyfuse3 $pyfuse3_version with the ${#pyfuse3_series[@]} patches of patches/pyfuse3/"
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    .venv/bin/python -m pip download -q --no-binary :all: --no-deps "pyfuse3==$pyfuse3_version" \
        -d "$build"
    tar xzf "$build/pyfuse3-$pyfuse3_version.tar.gz" -C "$build"
    for patch in "${pyfuse3_series[@]}"; do
        if ! (cd "$build/pyfuse3-$pyfuse3_version" && git apply "$OLDPWD/$patch" 2>"$build/apply.err"); then
            echo "setup: $patch does not apply to pyfuse3 $pyfuse3_version ($(head -n1 "$build/apply.err"))" >&2
            exit 1
        fi
    done
    .venv/bin/python -m pip install -q --force-reinstall --no-deps "$build/pyfuse3-$pyfuse3_version"
    echo "$pyfuse3_hash" >"$pyfuse3_stamp"
fi

# Install again when the declared dependencies or the install's mode changed since the last
# install, or when an import shows the environment incomplete. The editable install is
# setuptools' "compat" one, a .pth naming the checkout: its default for this layout is an import
# finder, which every Python process loaded at startup (16 ms of imports here, pathlib and
# urllib.parse among them), before a command could prestart its daemon and in the daemon's
# process as well: `gitsess mount` 227-244 ms with it, 213-232 ms without (docs/PERFORMANCE.md).
stamp=.venv/.gitsess-installed
install_mode=compat
# The install also builds gitsess's C extensions (gitsess/overlay/_lister.c,
# gitsess/git/_indexsweep.c) and its two programs, the fsmonitor hook and the daemon's guard
# (gitsess/overlay/fsmonitor_hook.c and guard.c, by setup.py), in place.
if [[ ! -f $stamp || pyproject.toml -nt $stamp || setup.py -nt $stamp ||
    -n $(find gitsess -name '*.c' -newer "$stamp") ||
    $(<"$stamp") != "$install_mode" ]] ||
    ! .venv/bin/python -c 'import gitsess.cli, gitsess.overlay._lister, gitsess.git._indexsweep, pyfuse3, pytest, xdist, mypy, os, gitsess.overlay.guard as g; assert os.access(g.COMPILED, os.X_OK)' \
        2>/dev/null; then
    echo "setup: installing gitsess with its test and dev extras into .venv"
    .venv/bin/python -m pip install -q -e '.[test,dev]' --config-settings "editable_mode=$install_mode"
    echo "$install_mode" >"$stamp"
fi
