"""Opening gitsess's SQLite databases the one way they are meant to be opened.

WAL, foreign keys, a 10 s busy timeout set before the connection is used, and every write in
`BEGIN IMMEDIATE` (`write_txn`): a deferred transaction that reads and then writes fails with
"database is locked" when another writer got in between, without waiting. Switching a new
database to WAL does not wait on the busy timeout either, so `enable_wal` retries it. Inside a
run the state dir is read-only and SQLite cannot make a `-shm`: databases are then opened as
immutable. `db_error` turns a SQLite failure into one line (a full disk says so).
"""

from __future__ import annotations

import os
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw

from gitsess.durable import nearly_full
from gitsess.errors import GitsessError

BUSY_TIMEOUT_MS = 10_000


def private_dir(path: Path) -> Path:
    """Create `path` and any missing parents as 0700 directories; gitsess state is per-user."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for p in reversed(missing):
        p.mkdir(mode=0o700, exist_ok=True)
    return path


def keep_private(path: Path) -> None:
    """Make an existing directory of ours 0700, whatever it was made with (a `.git/gitsess`
    made 0755 by hand or by an old version would show titles and command lines to everyone)."""
    try:
        st = path.stat()
        if st.st_uid == os.geteuid() and st.st_mode & 0o077:
            path.chmod(0o700)
    except OSError as e:
        raise GitsessError(f"cannot make {path} private: {e.strerror}") from e


def connect(path: Path) -> apsw.Connection:
    """A connection in WAL mode with foreign keys on and a busy timeout.

    Readers and writers of other processes wait for each other instead of failing; writes go
    through `write_txn` so they take the write lock up front.
    """
    read_only = _on_read_only_fs(path.parent)
    try:
        conn = open_read_only(path) if read_only else apsw.Connection(str(path))
    except apsw.Error as e:
        raise db_error(path, e) from e
    try:
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        conn.execute("PRAGMA foreign_keys = ON")
        if not read_only:
            enable_wal(conn)
    except apsw.Error as e:
        conn.close()
        raise db_error(path, e) from e
    return conn


def open_read_only(path: Path | str) -> apsw.Connection:
    """A reader of a WAL database in a read-only directory (the state dir inside a run).

    SQLite reads such a database through its `-shm` file, which it cannot create there: when
    no connection holds the database open there is none, and no `-wal` either, so everything
    is in the database file itself, which is then opened as immutable (no locks, no WAL). A
    live writer's (a session's daemon) `-shm` is used as it is. A `-wal` without a `-shm` is
    a writer's last close in progress (SQLite deletes the `-shm`, then the `-wal`) or a
    writer's open (it makes the `-wal`, then the `-shm`): either is over in a moment."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        try:
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            return conn
        except apsw.CantOpenError:
            conn.close()
            if not _holds_commits(Path(f"{path}-wal")):
                break
            if time.monotonic() > deadline:
                raise
        except apsw.ReadOnlyError as e:
            conn.close()
            if getattr(e, "extendedresult", None) not in _RECOVERING or time.monotonic() > deadline:
                raise
        time.sleep(0.005)
    uri = f"file:{urllib.parse.quote(str(path))}?immutable=1"
    return apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)


# A writer that opened the database first rebuilds its `-shm`, which a reader that cannot
# write it must wait out.
_RECOVERING = frozenset({apsw.SQLITE_READONLY_RECOVERY, apsw.SQLITE_READONLY_CANTINIT})


def _holds_commits(wal: Path) -> bool:
    try:
        return wal.stat().st_size > 0
    except FileNotFoundError:
        return False


def enable_wal(conn: apsw.Connection) -> None:
    """Put the database in WAL mode, waiting out other processes doing the same.

    Switching takes the write lock while holding a read lock, and SQLite does not wait for
    that (it could deadlock): of several processes creating a database at once, all but one
    fail at once with "database is locked" whatever the busy timeout.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while conn.execute("PRAGMA journal_mode").get != "wal":
        try:
            conn.execute("PRAGMA journal_mode = WAL")
        except apsw.BusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.002)


@contextmanager
def write_txn(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """One write transaction, holding the write lock from its start.

    A deferred transaction that reads and then writes can fail with "database is locked" when
    another writer got in between, without waiting; BEGIN IMMEDIATE waits its turn instead.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def db_error(path: Path, e: apsw.Error) -> GitsessError:
    """A message for an SQLite failure that says which file and what to do about it."""
    if isinstance(e, apsw.NotADBError | apsw.CorruptError):
        return GitsessError(
            f"{path} is corrupt ({e}); `gitsess doctor --repair` sets it aside and rebuilds "
            "the registry from the session dirs"
        )
    if isinstance(e, apsw.FullError | apsw.IOError) and nearly_full(path.parent):
        return GitsessError(f"cannot use {path}: no space left on its device; free some and retry")
    if _on_read_only_fs(path.parent):
        # SQLite needs its -wal and -shm files beside the database even to read it.
        return GitsessError(f"cannot use {path}: {path.parent} is on a read-only file system")
    if isinstance(e, apsw.ReadOnlyError):
        return GitsessError(f"{path} is read-only ({e})")
    if isinstance(e, apsw.CantOpenError):
        return GitsessError(f"cannot open {path} ({e})")
    return GitsessError(f"{path}: {e}")


def _on_read_only_fs(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False
