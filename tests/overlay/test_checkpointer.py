"""The daemon's WAL checkpoints run in a thread, never inside its commits (checkpointer.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest
import trio

from gitsess.overlay import checkpointer, mounttable, schema
from gitsess.overlay.checkpointer import Checkpointer
from gitsess.runtime import mount


def _wal_db(path: Path) -> apsw.Connection:
    """A delta.db as the daemon opens it, with a table of its own to fill."""
    conn = schema.connect(str(path))
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


def test_its_connection_has_the_settings_of_every_other(tmp_path: Path) -> None:
    """Opened by the one opener of delta.db (`schema.connect`), so its settings cannot drift
    from those of the daemon's own connection."""
    path = tmp_path / "delta.db"
    conn = _wal_db(path)
    cp = Checkpointer(conn, str(path))
    for name in ("busy_timeout", "synchronous", "journal_mode"):
        mine = cp._own.execute(f"PRAGMA {name}").fetchall()
        assert mine == conn.execute(f"PRAGMA {name}").fetchall(), name
    cp.close()
    conn.close()


# The daemon, with one of its parts that cannot start (our own class, made to fail).
_REFUSING_DAEMON = """
import sys
from gitsess.overlay import {module}, daemon

def refuse(self, *args):
    raise RuntimeError("this part cannot start")

{module}.{cls}.__init__ = refuse
sys.exit(daemon.main(sys.argv[1:]))
"""


@pytest.mark.fuse
@pytest.mark.parametrize(
    ("module", "cls"),
    [("checkpointer", "Checkpointer"), ("presence", "Presence")],
    ids=["made-before-the-mount", "made-after-the-mount"],
)
def test_a_part_that_cannot_start_leaves_no_mount(
    tmp_path: Path, worktree: Path, module: str, cls: str
) -> None:
    session_dir = tmp_path / "session"
    mnt = session_dir / "mnt"
    mnt.mkdir(mode=0o700, parents=True)
    read_end, write_end = os.pipe()
    argv = ["--session-id", "s", "--lower", str(worktree), "--delta", str(session_dir / "delta.db")]
    argv += ["--mountpoint", str(mnt), "--ready-fd", str(write_end)]
    try:
        try:
            done = subprocess.run(
                [sys.executable, "-c", _REFUSING_DAEMON.format(module=module, cls=cls), *argv],
                pass_fds=(write_end,),
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            os.close(write_end)
        with os.fdopen(read_end, "rb") as ready:
            answer = ready.read()
        assert done.returncode != 0
        assert "this part cannot start" in done.stderr
        assert answer != b"ready\n"
        assert not mounttable.is_mount_point(mnt)
    finally:
        if mounttable.is_mount_point(mnt):
            mount.unmount(mnt)
