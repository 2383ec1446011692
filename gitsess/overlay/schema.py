"""The delta.db schema: every statement that shapes the session's upper layer lives here.

Versioned with `PRAGMA user_version`; each step runs once, in order, inside one transaction.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import apsw

from gitsess.durable import fsync_dir
from gitsess.store import db
from gitsess.store.sqlvalue import integer, scalar

# The upper layer is inode based, like a real filesystem: `nodes` holds every object the
# session created or changed, `dentries` the names inside directories the session touched.
# A dentry with ino 0 is a whiteout hiding the lower name. A directory node with `origin`
# merges with that lower directory (NULL = opaque); a file node with data = 0 still reads its
# bytes from `origin` in the lower tree (metadata-only change), with data = 1 from its data file
# (`DeltaStore.data_path`; until version 3, from `chunks`), with data = 2 from `inline_data`
# (small files, since version 4).
Migration = str | Callable[[apsw.Connection, str], None]
# The chunk size of version 2 deltas that did not record theirs.
DEFAULT_CHUNK_SIZE = 128 * 1024


def _chunks_to_data_files(conn: apsw.Connection, data_dir: str) -> None:
    """3: file contents move out of SQLite into one sparse data file per node, so big writes are
    written once instead of into the WAL and again at checkpoint."""
    chunk = integer(
        scalar(conn, "SELECT value FROM meta WHERE key = 'chunk_size'") or DEFAULT_CHUNK_SIZE
    )
    os.makedirs(data_dir, mode=0o700, exist_ok=True)
    fds: dict[int, int] = {}
    try:
        for ino, idx, data in conn.execute("SELECT ino, idx, data FROM chunks"):
            assert isinstance(ino, int) and isinstance(idx, int) and isinstance(data, bytes)
            fd = fds.get(ino)
            if fd is None:
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
                fd = fds[ino] = os.open(os.path.join(data_dir, str(ino)), flags, 0o600)
            os.pwrite(fd, data, idx * chunk)
        # Durable before the chunks go: a crash in between redoes the whole step.
        for fd in fds.values():
            os.fsync(fd)
    finally:
        for fd in fds.values():
            os.close(fd)
    fsync_dir(data_dir)
    conn.execute("DROP TABLE chunks; DELETE FROM meta WHERE key = 'chunk_size'")


MIGRATIONS: list[Migration] = [
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
    CREATE TABLE nodes (
        ino INTEGER PRIMARY KEY,
        mode INTEGER NOT NULL,
        uid INTEGER NOT NULL,
        gid INTEGER NOT NULL,
        rdev INTEGER NOT NULL DEFAULT 0,
        size INTEGER NOT NULL DEFAULT 0,
        atime_ns INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        ctime_ns INTEGER NOT NULL,
        nlink INTEGER NOT NULL DEFAULT 1,
        origin BLOB,
        data INTEGER NOT NULL DEFAULT 1,
        target BLOB,
        origin_mode INTEGER,
        origin_size INTEGER,
        origin_mtime_ns INTEGER
    );
    CREATE TABLE dentries (
        parent INTEGER NOT NULL,
        name BLOB NOT NULL,
        ino INTEGER NOT NULL,
        PRIMARY KEY (parent, name)
    ) WITHOUT ROWID;
    CREATE INDEX dentries_ino ON dentries (ino);
    CREATE TABLE chunks (
        ino INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (ino, idx)
    );
    CREATE TABLE xattrs (
        ino INTEGER NOT NULL,
        name BLOB NOT NULL,
        value BLOB NOT NULL,
        PRIMARY KEY (ino, name)
    ) WITHOUT ROWID;
    """,
    # 2: what happened in the session (audit log), its key-value store, and drift records.
    """
    CREATE TABLE processes (
        id INTEGER PRIMARY KEY,
        pid INTEGER NOT NULL,
        name TEXT NOT NULL,
        cmdline TEXT NOT NULL
    );
    CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        time_ns INTEGER NOT NULL,
        op TEXT NOT NULL,
        path TEXT NOT NULL,
        target TEXT,
        bytes INTEGER,
        pid INTEGER,
        process INTEGER REFERENCES processes (id),
        role TEXT,
        run_id INTEGER
    );
    CREATE INDEX events_time ON events (time_ns);
    CREATE TABLE kv (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL CHECK (json_valid(value)),
        updated_ns INTEGER NOT NULL
    );
    CREATE TABLE drift (
        path TEXT PRIMARY KEY,
        time_ns INTEGER NOT NULL
    );
    """,
    _chunks_to_data_files,
    # 4: the bytes of small files live here (nodes.data = 2) instead of in a data file each:
    # creating a file on disk cost more than everything else a small file's creation does.
    "CREATE TABLE inline_data (ino INTEGER PRIMARY KEY, bytes BLOB NOT NULL)",
    # 5: checkpoints (`overlay/history.py`): each key's state saved once per epoch, before its
    # first change after a checkpoint (ino NULL / present 0: there was none), the operation
    # log of rewinds, and what the audit log's retention keeps of the events it drops.
    """
    CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        time_ns INTEGER NOT NULL,
        kind TEXT NOT NULL,
        message TEXT NOT NULL,
        run_id INTEGER,
        role TEXT,
        added INTEGER NOT NULL,
        removed INTEGER NOT NULL,
        changed INTEGER NOT NULL
    );
    CREATE TABLE cp_nodes (
        ino INTEGER NOT NULL,
        epoch INTEGER NOT NULL,
        present INTEGER NOT NULL,
        mode INTEGER, uid INTEGER, gid INTEGER, rdev INTEGER, size INTEGER,
        atime_ns INTEGER, mtime_ns INTEGER, ctime_ns INTEGER, nlink INTEGER,
        origin BLOB, data INTEGER, target BLOB,
        origin_mode INTEGER, origin_size INTEGER, origin_mtime_ns INTEGER,
        PRIMARY KEY (ino, epoch)
    ) WITHOUT ROWID;
    CREATE INDEX cp_nodes_epoch ON cp_nodes (epoch);
    CREATE TABLE cp_xattrs (
        ino INTEGER NOT NULL, epoch INTEGER NOT NULL, name BLOB NOT NULL, value BLOB NOT NULL,
        PRIMARY KEY (ino, epoch, name)
    ) WITHOUT ROWID;
    CREATE INDEX cp_xattrs_epoch ON cp_xattrs (epoch);
    CREATE TABLE cp_inline (
        ino INTEGER NOT NULL, epoch INTEGER NOT NULL, bytes BLOB NOT NULL,
        PRIMARY KEY (ino, epoch)
    );
    CREATE INDEX cp_inline_epoch ON cp_inline (epoch);
    CREATE TABLE cp_dentries (
        parent INTEGER NOT NULL, name BLOB NOT NULL, epoch INTEGER NOT NULL, ino INTEGER,
        PRIMARY KEY (parent, name, epoch)
    ) WITHOUT ROWID;
    CREATE INDEX cp_dentries_epoch ON cp_dentries (epoch);
    CREATE TABLE operations (
        id INTEGER PRIMARY KEY,
        time_ns INTEGER NOT NULL,
        kind TEXT NOT NULL,
        target INTEGER NOT NULL,
        before INTEGER NOT NULL,
        after INTEGER NOT NULL,
        keys INTEGER NOT NULL
    );
    CREATE TABLE run_summaries (
        run_id INTEGER PRIMARY KEY,
        events INTEGER NOT NULL,
        first_ns INTEGER NOT NULL,
        last_ns INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        ops TEXT NOT NULL
    );
    """,
]


def data_dir(path: str) -> str:
    """Where the data files of the delta.db at `path` live."""
    return os.path.join(os.path.dirname(os.path.abspath(path)), "data")


def connect(path: str, *, readonly: bool = False) -> apsw.Connection:
    """Open delta.db with the settings every user of it shares, migrated to this version (a
    reader of an old delta.db migrates it first: its data may no longer be where it was)."""
    if readonly:
        conn = _open(path, apsw.SQLITE_OPEN_READONLY)
        try:
            if _version(conn) >= len(MIGRATIONS):
                return conn
        except BaseException:
            conn.close()
            raise
        conn.close()
        connect(path).close()
        return _open(path, apsw.SQLITE_OPEN_READONLY)
    conn = _open(path, apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE)
    if pragma(conn, "page_count") == 0:
        # Only before the first table: pages freed by deletions can then be given back to the
        # disk bit by bit (`DeltaStore.shrink`), not only by a VACUUM of the whole file.
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
    db.enable_wal(conn)
    # NORMAL: a kill -9 loses nothing committed; fsync(2) from a writer syncs the WAL itself.
    conn.execute("PRAGMA synchronous=NORMAL")
    migrate(conn, data_dir(path))
    return conn


def _open(path: str, flags: int) -> apsw.Connection:
    if flags == apsw.SQLITE_OPEN_READONLY and _in_read_only_dir(path):
        conn = db.open_read_only(path)  # inside a run, see there
    else:
        conn = apsw.Connection(path, flags=flags)
    # Before any statement: a daemon committing or closing holds locks a reader must wait for.
    conn.set_busy_timeout(db.BUSY_TIMEOUT_MS)
    return conn


def _in_read_only_dir(path: str) -> bool:
    try:
        return bool(os.statvfs(os.path.dirname(path) or ".").f_flag & os.ST_RDONLY)
    except OSError:
        return False


def pragma(conn: apsw.Connection, name: str) -> int:
    """An integer PRAGMA's value."""
    return integer(scalar(conn, f"PRAGMA {name}"))


def _version(conn: apsw.Connection) -> int:
    return integer(scalar(conn, "PRAGMA user_version"))


def migrate(conn: apsw.Connection, data: str) -> None:
    """Bring the schema up to date; IMMEDIATE so two processes opening at once migrate once."""
    if _version(conn) == len(MIGRATIONS):
        return  # readers beside a live daemon take no write lock
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _version(conn)
        for number, step in enumerate(MIGRATIONS[version:], start=version + 1):
            if isinstance(step, str):
                conn.execute(step)
            else:
                step(conn, data)
            conn.execute(f"PRAGMA user_version={number}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
