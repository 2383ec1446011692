"""One damaged delta.db is that session's problem, not the repository's (issue 29 item 12)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.util import gitsess

pytestmark = pytest.mark.fuse


@pytest.fixture
def damaged(repo: Path) -> str:
    """Sessions `good` and `bad`, both with a change; bad's delta.db overwritten with noise."""
    for name in ("good", "bad"):
        done = gitsess(repo, "run", "-s", name, "--", "sh", "-c", f"echo {name} > {name}.txt")
        assert done.returncode == 0, done.stderr
    bad = json.loads(gitsess(repo, "show", "bad", "--json").stdout)["id"]
    gitsess(repo, "umount", "bad")
    delta = repo / ".git" / "gitsess" / "sessions" / bad / "delta.db"
    for suffix in ("-wal", "-shm"):
        Path(f"{delta}{suffix}").unlink(missing_ok=True)
    delta.write_bytes(os.urandom(8192))
    return str(delta)


def test_ls_marks_it_and_every_other_command_goes_on(repo: Path, damaged: str) -> None:
    listed = gitsess(repo, "ls", env={"COLUMNS": "200"})
    assert listed.returncode == 0, listed.stderr
    assert "damaged" in listed.stdout and "good" in listed.stdout
    assert gitsess(repo, "show", "good").returncode == 0
    assert gitsess(repo, "diff", "good").returncode == 0
    shown = gitsess(repo, "show", "bad")
    assert shown.returncode == 1
    assert shown.stderr.count("\n") == 1 and damaged in shown.stderr
    assert "rm --force" in shown.stderr
    assert gitsess(repo, "gc", "--dry-run").returncode in (0, 1)


def test_rm_keeps_it_unless_forced(repo: Path, damaged: str) -> None:
    refused = gitsess(repo, "rm", "bad")
    assert refused.returncode == 1 and "rm --force" in refused.stderr
    assert Path(damaged).exists()
    forced = gitsess(repo, "rm", "bad", "--force")
    assert forced.returncode == 0, forced.stderr
    assert not Path(damaged).exists()
    assert "good" in gitsess(repo, "ls").stdout
