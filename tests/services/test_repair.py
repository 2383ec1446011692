"""A lost or damaged registry loses no session's changes (issue 29 item 11)."""

from __future__ import annotations

import json
import os
import sqlite3
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


def _commands_say_repair(repo: Path) -> None:
    for args in (["ls"], ["show", "exp"], ["gc"], ["run", "-s", "exp", "--", "true"]):
        done = gitsess(repo, *args)
        assert done.returncode == 1, (args, done.stdout)
        assert done.stderr.count("\n") == 1 and "doctor --repair" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_text_that_is_not_utf8_is_found_by_doctor_and_mended(repo: Path) -> None:
    """Issue 37 item 13: bad bytes in a text column; every command says so in one line,
    doctor finds it, and --repair mends it in place (names and all stay)."""
    assert gitsess(repo, "new", "exp", "--title", "ok").returncode == 0
    registry = repo / ".git" / "gitsess" / "sessions.db"
    with sqlite3.connect(registry) as db:
        db.execute("UPDATE sessions SET title = CAST(x'41ff42' AS TEXT)")
    db.close()
    _commands_say_repair(repo)
    doctor = gitsess(repo, "doctor")
    assert doctor.returncode == 1
    assert "damaged" in doctor.stdout and "not UTF-8" in doctor.stdout
    repaired = gitsess(repo, "doctor", "--repair")
    assert repaired.stdout == "Mended 1 text value(s) of the registry that were not UTF-8\n"
    shown = gitsess(repo, "show", "exp", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["title"] == "A\ufffdB"
    assert "session registry" in gitsess(repo, "doctor").stdout


def test_a_zeroed_page_is_found_by_doctor_and_repaired(repo: Path) -> None:
    for name in ("exp", "two"):
        done = gitsess(repo, "run", "-s", name, "--", "sh", "-c", f"echo {name} > {name}.txt")
        assert done.returncode == 0, done.stderr
    registry = repo / ".git" / "gitsess" / "sessions.db"
    with sqlite3.connect(registry) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = db.execute("PRAGMA page_size").fetchone()[0]
        root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'sessions'").fetchone()
    db.close()
    with open(registry, "r+b") as f:
        f.seek((root[0] - 1) * page)
        f.write(b"\0" * page)
    doctor = gitsess(repo, "doctor")
    assert doctor.returncode == 1
    assert "sessions.db" in doctor.stdout and "OK" not in doctor.stdout.split("session registry")[1]
    repaired = gitsess(repo, "doctor", "--repair")
    assert "The unreadable registry is kept as" in repaired.stdout
    assert repaired.stdout.count("Recovered session") == 2
