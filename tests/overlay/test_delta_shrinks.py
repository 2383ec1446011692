"""delta.db gives back what the session deleted (issue 29 item 16)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.live_util import eventually
from tests.util import gitsess

pytestmark = pytest.mark.fuse


@pytest.mark.timeout(120)
def test_delta_db_shrinks_after_everything_is_deleted(repo: Path, tmp_path: Path) -> None:
    view = tmp_path / "view"
    view.mkdir()
    assert gitsess(repo, "new", "exp").returncode == 0
    assert gitsess(repo, "mount", "exp", str(view)).returncode == 0
    session_id = json.loads(gitsess(repo, "show", "exp", "--json").stdout)["id"]
    delta = repo / ".git" / "gitsess" / "sessions" / session_id / "delta.db"
    try:
        (view / "many").mkdir()
        for i in range(1500):  # small files: their bytes are rows of delta.db
            (view / "many" / f"f{i}").write_bytes(os.urandom(12_000))
        os.sync()
        assert eventually(lambda: delta.stat().st_size > 15_000_000)
        for i in range(1500):
            (view / "many" / f"f{i}").unlink()
        (view / "many").rmdir()
        assert eventually(lambda: delta.stat().st_size < 4_000_000, timeout=60)
        usage = json.loads(gitsess(repo, "show", "exp", "--json").stdout)["usage"]
        assert usage["live_bytes"] < 2_000_000
        (view / "after").write_text("still served\n")
        time.sleep(0.3)
        assert (view / "after").read_text() == "still served\n"
    finally:
        gitsess(repo, "umount", "exp")
