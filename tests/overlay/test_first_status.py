"""The first `git status` in a session: what it costs the daemon, and that it stays right."""

from __future__ import annotations

import subprocess

import pytest

from tests.overlay.conftest import Mounted

pytestmark = pytest.mark.fuse


def test_taking_the_git_unit_loads_no_pygit2(mounted: Mounted) -> None:
    """A status takes the index's lock, which makes HEAD, the index and the branch the
    session's own: reading HEAD for that needs no libgit2 (loading it cost some 60 ms)."""
    subprocess.run(["git", "status", "--porcelain"], cwd=mounted.mnt, check=True)
    assert (mounted.mnt / ".git" / "index").exists()
    with open(f"/proc/{mounted.daemon_pid()}/maps") as f:
        assert "libgit2" not in f.read()
