"""Shared originals under the test's HOME, and fake agent CLIs on a PATH of their own."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

FAKECLI = Path(__file__).with_name("fakecli.py")

# What the shipped claude and cline profiles link, relative to HOME.
ORIGINALS = {
    ".claude/.credentials.json": "claude-token-1",
    ".claude/settings.json": '{"theme": "dark"}',
    ".claude/plugins/installed.json": "[]",
    ".cline/data/secrets.json": "cline-token-1",
    ".cline/data/globalState.json": "{}",
    ".cline/data/settings/cline_mcp_settings.json": '{"servers": []}',
}

Snapshot = dict[str, tuple[int, bytes]]


@pytest.fixture
def home() -> Path:
    return Path(os.environ["HOME"])


@pytest.fixture
def originals(home: Path) -> Callable[[], Snapshot]:
    """Creates the shared files; calling the result snapshots their inodes and contents."""
    for rel, text in ORIGINALS.items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o600)

    def snapshot() -> Snapshot:
        return {rel: ((home / rel).stat().st_ino, (home / rel).read_bytes()) for rel in ORIGINALS}

    return snapshot


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """`claude` and `cline` programs (see fakecli.py)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for kind in ("claude", "cline"):
        program = bin_dir / kind
        program.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKECLI}" {kind} "$@"\n')
        program.chmod(0o755)
    return bin_dir
