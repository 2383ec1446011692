"""The registry's schema as forward migrations, tracked with PRAGMA user_version.

Step N (1-based) moves the schema from version N-1 to N. Steps are only ever appended: a
released step never changes, because databases in the field have already run it. Each step
runs in its own `BEGIN IMMEDIATE` transaction and re-reads the version under the lock, so
processes racing on a fresh database apply it once. A database newer than the code is refused.
"""

from __future__ import annotations

import apsw

from gitsess.errors import GitsessError
from gitsess.store.db import write_txn

MIGRATIONS: tuple[str, ...] = (
    # 1: sessions, the participants (agent roles) that work in them, and the runs they start.
    """
    CREATE TABLE sessions (
        id               TEXT PRIMARY KEY,
        seq              INTEGER NOT NULL UNIQUE,
        name             TEXT NOT NULL UNIQUE,
        title            TEXT NOT NULL DEFAULT '',
        created_at       TEXT NOT NULL,
        last_used_at     TEXT NOT NULL,
        worktree         TEXT NOT NULL,
        branch           TEXT,
        base_commit      TEXT,
        state            TEXT NOT NULL DEFAULT 'active',
        read_only        INTEGER NOT NULL DEFAULT 0 CHECK (read_only IN (0, 1)),
        parent           TEXT REFERENCES sessions (id) ON DELETE SET NULL,
        created_worktree INTEGER NOT NULL DEFAULT 0 CHECK (created_worktree IN (0, 1)),
        created_branch   INTEGER NOT NULL DEFAULT 0 CHECK (created_branch IN (0, 1))
    );
    CREATE INDEX sessions_worktree ON sessions (worktree);

    CREATE TABLE participants (
        id             INTEGER PRIMARY KEY,
        session_id     TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        role           TEXT NOT NULL,
        kind           TEXT NOT NULL,
        isolation_uuid TEXT UNIQUE,
        root           TEXT,
        lever          TEXT,
        seeded         TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(seeded)),
        pid            INTEGER,
        state          TEXT NOT NULL DEFAULT 'idle',
        started_at     TEXT,
        ended_at       TEXT,
        UNIQUE (session_id, role)
    );

    CREATE TABLE runs (
        id         INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        command    TEXT NOT NULL CHECK (json_valid(command)),
        cwd        TEXT NOT NULL,
        pid        INTEGER,
        role       TEXT,
        started_at TEXT NOT NULL,
        ended_at   TEXT,
        exit_code  INTEGER
    );
    CREATE INDEX runs_session ON runs (session_id, started_at);
    """,
    # 2: the session commit each session last pushed or pulled (`gitsess push/pull`): what a
    # pull must descend from to fast-forward, and the local state (tree, base) it left.
    """
    CREATE TABLE synced (
        session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
        remote     TEXT NOT NULL,
        commit_id  TEXT NOT NULL,
        tree       TEXT NOT NULL,
        base       TEXT NOT NULL,
        synced_at  TEXT NOT NULL
    );
    """,
)

VERSION = len(MIGRATIONS)


def user_version(conn: apsw.Connection) -> int:
    version = conn.execute("PRAGMA user_version").get
    assert isinstance(version, int)
    return version


def migrate(conn: apsw.Connection, path: str) -> None:
    """Bring the database to `VERSION`, one transaction per step.

    Several processes may open a fresh database at once: each step re-reads the version under
    the write lock, so every step runs exactly once.
    """
    while (current := user_version(conn)) < VERSION:
        with write_txn(conn):
            current = user_version(conn)
            if current >= VERSION:
                break
            conn.execute(MIGRATIONS[current])
            conn.execute(f"PRAGMA user_version = {current + 1}")
    if current > VERSION:
        raise GitsessError(
            f"{path} has schema version {current}, newer than this gitsess knows ({VERSION}); "
            "upgrade gitsess"
        )
