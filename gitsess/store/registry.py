"""The session registry of one repository: `<state>/sessions.db`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw

from gitsess.errors import GitsessError
from gitsess.store import db, schema


@dataclass(frozen=True)
class Session:
    """One row of the `sessions` table."""

    id: str
    seq: int  # creation order: -1 is the highest
    name: str
    title: str
    created_at: datetime
    last_used_at: datetime
    worktree: Path
    branch: str | None  # None when bound to a detached HEAD
    base_commit: str | None  # None when the branch had no commit yet
    state: str
    read_only: bool
    parent: str | None
    created_worktree: bool  # gitsess made the worktree, so `rm` may remove it
    created_branch: bool  # gitsess made the branch, so `rm` may delete it


_COLUMNS = (
    "id, seq, name, title, created_at, last_used_at, worktree, branch, base_commit, state, "
    "read_only, parent, created_worktree, created_branch"
)


def now() -> datetime:
    return datetime.now(UTC)


def _session(row: tuple[Any, ...]) -> Session:
    (id_, seq, name, title, created, used, worktree, branch, base, state, ro, parent, cw, cb) = row
    return Session(
        id=id_,
        seq=seq,
        name=name,
        title=title,
        created_at=datetime.fromisoformat(created),
        last_used_at=datetime.fromisoformat(used),
        worktree=Path(worktree),
        branch=branch,
        base_commit=base,
        state=state,
        read_only=bool(ro),
        parent=parent,
        created_worktree=bool(cw),
        created_branch=bool(cb),
    )


@dataclass(frozen=True)
class Run:
    """One row of the `runs` table: a command run inside a session."""

    id: int
    command: list[str]
    cwd: Path
    pid: int | None
    role: str | None
    started_at: datetime
    ended_at: datetime | None  # None while it runs (or when its runner died)
    exit_code: int | None


def _run(row: tuple[Any, ...]) -> Run:
    id_, command, cwd, pid, role, started, ended, code = row
    return Run(
        id=id_,
        command=json.loads(command),
        cwd=Path(cwd),
        pid=pid,
        role=role,
        started_at=datetime.fromisoformat(started),
        ended_at=None if ended is None else datetime.fromisoformat(ended),
        exit_code=code,
    )


class NameTaken(GitsessError):
    """Another session already has this name or id."""


class Registry:
    """Queries on an open registry. Every SQLite failure comes out as a GitsessError."""

    def __init__(self, conn: apsw.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path

    @classmethod
    def open(cls, path: Path, *, create: bool) -> Registry | None:
        """The registry at `path`, migrated to the current schema.

        Without `create`, a registry that does not exist yet is None and nothing is written:
        commands that only read leave a repository without sessions untouched.
        """
        if not path.exists():
            if not create:
                return None
            try:
                db.private_dir(path.parent)
            except OSError as e:
                raise GitsessError(f"cannot create {path.parent}: {e.strerror}") from e
        registry = cls(db.connect(path), path)
        try:
            with registry.guard():
                schema.migrate(registry.conn, str(path))
        except BaseException:
            registry.close()
            raise
        return registry

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def guard(self) -> Iterator[None]:
        try:
            yield
        except apsw.Error as e:
            raise db.db_error(self.path, e) from e

    @contextmanager
    def write(self) -> Iterator[None]:
        """A write transaction; work done inside it that raises rolls the registry back too."""
        with self.guard(), db.write_txn(self.conn):
            yield

    def _one(self, where: str, *args: object) -> Session | None:
        with self.guard():
            row = self.conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE {where}", args
            ).fetchone()
        return None if row is None else _session(row)

    def _many(self, where: str, *args: object) -> list[Session]:
        sql = f"SELECT {_COLUMNS} FROM sessions WHERE {where} ORDER BY seq"
        with self.guard():
            return [_session(row) for row in self.conn.execute(sql, args)]

    def all(self) -> list[Session]:
        """Every session, oldest first."""
        return self._many("1")

    def by_id(self, session_id: str) -> Session | None:
        return self._one("id = ?", session_id)

    def by_name(self, name: str) -> Session | None:
        return self._one("name = ?", name)

    def by_id_prefix(self, prefix: str) -> list[Session]:
        # substr rather than LIKE: no wildcard in the prefix can match more than it says.
        return self._many("substr(id, 1, ?) = ?", len(prefix), prefix)

    def by_offset(self, offset: int) -> Session | None:
        """The `offset`-th most recently created session (1 = the newest)."""
        with self.guard():
            row = self.conn.execute(
                f"SELECT {_COLUMNS} FROM sessions ORDER BY seq DESC LIMIT 1 OFFSET ?",
                (offset - 1,),
            ).fetchone()
        return None if row is None else _session(row)

    def count(self) -> int:
        with self.guard():
            n = self.conn.execute("SELECT count(*) FROM sessions").get
        assert isinstance(n, int)
        return n

    def names(self) -> set[str]:
        with self.guard():
            return {name for (name,) in self.conn.execute("SELECT name FROM sessions")}

    def insert(
        self,
        *,
        id: str,
        name: str,
        title: str,
        worktree: Path,
        branch: str | None,
        base_commit: str | None,
        read_only: bool,
        parent: str | None,
        created_worktree: bool,
        created_branch: bool,
    ) -> Session:
        """Add a session; call inside `write()`. Raises NameTaken when the name or id is used."""
        stamp = now().isoformat()
        try:
            self.conn.execute(
                f"""INSERT INTO sessions ({_COLUMNS}) VALUES (
                    ?, (SELECT coalesce(max(seq), 0) + 1 FROM sessions), ?, ?, ?, ?, ?, ?, ?,
                    'active', ?, ?, ?, ?)""",
                (
                    id,
                    name,
                    title,
                    stamp,
                    stamp,
                    str(worktree),
                    branch,
                    base_commit,
                    int(read_only),
                    parent,
                    int(created_worktree),
                    int(created_branch),
                ),
            )
        except apsw.ConstraintError as e:
            taken = self.by_id(id)
            raise NameTaken(
                f"a session with id {id} already exists ({taken.name})"
                if taken is not None
                else f"a session named {name!r} already exists"
            ) from e
        session = self.by_id(id)
        assert session is not None
        return session

    def update(self, session_id: str, **values: object) -> Session:
        """Set columns of one session; raises NameTaken when a new name is in use."""
        assignments = ", ".join(f"{column} = ?" for column in values)
        with self.write():
            try:
                self.conn.execute(
                    f"UPDATE sessions SET {assignments} WHERE id = ?",
                    (*values.values(), session_id),
                )
            except apsw.ConstraintError as e:
                raise NameTaken(f"a session named {values.get('name')!r} already exists") from e
        session = self.by_id(session_id)
        if session is None:
            raise GitsessError(f"session {session_id} was removed meanwhile")
        return session

    def touch(self, session_id: str) -> Session:
        """Set the session's last use to now."""
        return self.update(session_id, last_used_at=now().isoformat())

    def start_run(
        self, session_id: str, command: list[str], cwd: Path, pid: int, role: str | None
    ) -> int:
        """Record a command started in the session; returns the run's id."""
        with self.write():
            self.conn.execute(
                "INSERT INTO runs (session_id, command, cwd, pid, role, started_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (session_id, json.dumps(command), str(cwd), pid, role, now().isoformat()),
            )
            run_id = self.conn.last_insert_rowid()
        return run_id

    def end_run(self, run_id: int, exit_code: int) -> None:
        with self.write():
            self.conn.execute(
                "UPDATE runs SET ended_at = ?, exit_code = ? WHERE id = ?",
                (now().isoformat(), exit_code, run_id),
            )

    def runs(self, session_id: str) -> list[Run]:
        """The session's runs, oldest first."""
        with self.guard():
            rows = self.conn.execute(
                "SELECT id, command, cwd, pid, role, started_at, ended_at, exit_code FROM runs"
                " WHERE session_id = ? ORDER BY started_at, id",
                (session_id,),
            ).fetchall()
        return [_run(row) for row in rows]

    def delete(self, session_id: str) -> None:
        """Remove a session with its participants and runs; call inside `write()`."""
        self.conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
