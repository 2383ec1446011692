"""The daemon's WAL checkpoints run in a thread, never inside its commits (checkpointer.py)."""

from __future__ import annotations

import os
from pathlib import Path

import apsw
import pytest
import trio

from gitsess.overlay import checkpointer
from gitsess.overlay.checkpointer import Checkpointer


def _wal_db(path: Path) -> apsw.Connection:
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE t(b BLOB)")
    return conn


def _commit_mib(conn: apsw.Connection, mib: int) -> None:
    for _ in range(mib):
        with conn:
            conn.executemany("INSERT INTO t VALUES (?)", [(os.urandom(4096),)] * 256)


def test_commits_leave_the_wal_to_the_thread(tmp_path: Path) -> None:
    path = tmp_path / "delta.db"
    conn = _wal_db(path)
    cp = Checkpointer(conn, str(path))
    _commit_mib(conn, 6)  # over WAL_PAGES: SQLite alone would have checkpointed in a COMMIT
    assert cp.pages >= checkpointer.WAL_PAGES
    assert path.stat().st_size < 1 << 20  # nothing copied into the database by the commits

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cp.run)
            cp.committed()
            with trio.fail_after(30):
                while path.stat().st_size < 6 << 20:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main)
    _commit_mib(conn, 1)
    assert cp.pages < checkpointer.WAL_PAGES  # the WAL started over after the full copy
    assert conn.execute("SELECT count(*) FROM t").fetchall()[0][0] == 7 * 256
    cp.close()
    conn.close()


def test_a_wal_past_its_bound_is_checkpointed_by_the_committer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpointer, "WAL_MAX_PAGES", 1500)
    path = tmp_path / "delta.db"
    conn = _wal_db(path)
    cp = Checkpointer(conn, str(path))
    _commit_mib(conn, 7)
    assert path.stat().st_size < 1 << 20
    cp.committed()  # no thread runs: the caller checkpoints
    assert path.stat().st_size >= 7 << 20
    cp.close()
    conn.close()
