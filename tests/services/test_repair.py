"""A lost or damaged registry loses no session's changes (issue 29 item 11)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.util import gitsess

pytestmark = pytest.mark.fuse


@pytest.mark.parametrize("damage", ["noise", "zero bytes", "removed"])
def test_gc_keeps_and_doctor_repair_recovers_every_session(repo: Path, damage: str) -> None:
    for name in ("one", "two"):
        done = gitsess(repo, "run", "-s", name, "--", "sh", "-c", f"echo {name} > {name}.txt")
        assert done.returncode == 0, done.stderr
    state = repo / ".git" / "gitsess"
    ids = sorted(p.name for p in (state / "sessions").iterdir())
    registry = state / "sessions.db"
    for suffix in ("-wal", "-shm"):
        Path(f"{registry}{suffix}").unlink(missing_ok=True)
    if damage == "noise":
        registry.write_bytes(os.urandom(4096))
    elif damage == "zero bytes":
        registry.write_bytes(b"")
    else:
        registry.unlink()
    gc = gitsess(repo, "gc")
    if damage == "noise":
        assert gc.returncode == 1 and "doctor --repair" in gc.stderr
    assert sorted(p.name for p in (state / "sessions").iterdir()) == ids  # nothing deleted
    repaired = gitsess(repo, "doctor", "--repair")
    assert repaired.returncode == 0, repaired.stderr
    assert repaired.stdout.count("Recovered session") == 2
    for session_id, text in zip(ids, _contents(repo, ids), strict=True):
        assert text in ("one\n", "two\n"), session_id
    assert gitsess(repo, "gc").returncode == 0
    assert sorted(p.name for p in (state / "sessions").iterdir()) == ids


def _contents(repo: Path, ids: list[str]) -> list[str]:
    out = []
    for session_id in ids:
        name = f"recovered-{session_id[:8]}"
        listing = gitsess(repo, "fs", name, "ls").stdout.split()
        mine = next(n for n in listing if n in ("one.txt", "two.txt"))
        out.append(gitsess(repo, "fs", name, "cat", mine).stdout)
    return out
