"""The session registry of one repository: `<state>/sessions.db`.

`sessions`: `id` (uuid4 text), `seq` (creation order), `name` (unique), `title`, times,
`worktree`, `branch` (NULL when detached), `base_commit` (NULL on an unborn branch), `state`
(`active`, `merged`, `detached`), `read_only`, `parent` (forks), `created_worktree` and
`created_branch` (so that `rm` deletes only what gitsess made). `participants`: one row per
(session, role) with its isolation root, lever (JSON), seeds (JSON), pid and state. `runs`: one
per `gitsess run`, with its command, pid, role, times and exit code. `synced`: per session, the
remote, the session commit last pushed or pulled and the session's state right after.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw

from gitsess.errors import GitsessError
from gitsess.store import db, schema

if TYPE_CHECKING:
    from gitsess.store.agent_rows import Participant, Seed
    from gitsess.store.rows import Run, Synced


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


def _sql(value: object) -> object:
    """A value as SQLite keeps it: text must be UTF-8, so a str holding bytes that are not
    (os.fsdecode's surrogates: a path, an argument) goes as those bytes, a BLOB, which
    `_text` turns back (a lookup by such a value finds no text, as it should)."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogateescape")
    return value


def _text(value: Any) -> Any:
    return os.fsdecode(value) if isinstance(value, bytes) else value


def _title(value: object) -> object:
    """A title is text to show: bytes in it that are not UTF-8 become U+FFFD."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return value


def _session(row: tuple[Any, ...]) -> Session:
    row = tuple(_text(v) for v in row)
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
        if create:
            db.keep_private(path.parent)
        registry = cls(db.connect(path), path)
        try:
            with registry.guard():
                schema.migrate(registry.conn, str(path))
        except BaseException:
            registry.close()
            raise
        return registry

    @classmethod
    @contextmanager
    def opened(cls, path: Path, *, create: bool) -> Iterator[Registry | None]:
        """`open`, closed again when the block ends."""
        registry = cls.open(path, create=create)
        try:
            yield registry
        finally:
            if registry is not None:
                registry.close()

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def guard(self) -> Iterator[None]:
        try:
            yield
        except apsw.Error as e:
            raise db.db_error(self.path, e) from e
        except UnicodeDecodeError as e:
            raise GitsessError(
                f"{self.path} is damaged (a text in it is not UTF-8: {e.reason}); "
                "`gitsess doctor --repair` mends it"
            ) from e

    def problems(self) -> list[str]:
        """What reading all of it finds: SQLite's own check (a zeroed page), text that is
        not UTF-8 (which every command reading that row would fail on)."""
        with self.guard():
            found = [str(r[0]) for r in self.conn.execute("PRAGMA quick_check") if r[0] != "ok"]
        if found:
            return found
        return [f"{t}.{c} of row {rowid} is not UTF-8" for t, c, rowid, _ in self._bad_text()]

    def _bad_text(self) -> list[tuple[str, str, int, bytes]]:
        bad = []
        with self.guard():
            tables = [
                str(name)
                for (name,) in self.conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                    " AND name NOT LIKE 'sqlite_%'"
                )
            ]
            for table in tables:
                columns = [str(r[1]) for r in self.conn.execute(f'PRAGMA table_info("{table}")')]
                for column in columns:
                    rows = self.conn.execute(
                        f'SELECT rowid, CAST("{column}" AS BLOB) FROM "{table}"'
                        f" WHERE typeof(\"{column}\") = 'text'"
                    )
                    for rowid, raw in rows:
                        try:
                            bytes(raw).decode()
                        except UnicodeDecodeError:
                            bad.append((table, column, int(rowid), bytes(raw)))
        return bad

    def mend_text(self) -> int:
        """Replace what is not UTF-8 in text values (U+FFFD, as a reader would show it); how
        many values it mended."""
        bad = self._bad_text()
        with self.write():
            for table, column, rowid, raw in bad:
                self.conn.execute(
                    f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?',
                    (raw.decode(errors="replace"), rowid),
                )
        return len(bad)

    @contextmanager
    def write(self) -> Iterator[None]:
        """A write transaction; work done inside it that raises rolls the registry back too."""
        with self.guard(), db.write_txn(self.conn):
            yield

    def _one(self, where: str, *args: object) -> Session | None:
        with self.guard():
            row = self.conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE {where}", tuple(_sql(a) for a in args)
            ).fetchone()
        return None if row is None else _session(row)

    def _many(self, where: str, *args: object) -> list[Session]:
        sql = f"SELECT {_COLUMNS} FROM sessions WHERE {where} ORDER BY seq"
        with self.guard():
            return [_session(row) for row in self.conn.execute(sql, tuple(_sql(a) for a in args))]

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
                    _sql(name),
                    _title(title),
                    stamp,
                    stamp,
                    _sql(str(worktree)),
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
                    (*(_title(v) if k == "title" else _sql(v) for k, v in values.items()),
                     session_id),
                )  # fmt: skip
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
        import json  # (with what writes or reads the other tables: see `rows.py`)

        with self.write():
            self.conn.execute(
                "INSERT INTO runs (session_id, command, cwd, pid, role, started_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (session_id, json.dumps(command), _sql(str(cwd)), pid, role, now().isoformat()),
            )
            run_id = self.conn.last_insert_rowid()
        return run_id

    def end_run(self, run_id: int, exit_code: int) -> None:
        with self.write():
            self.conn.execute(
                "UPDATE runs SET ended_at = ?, exit_code = ? WHERE id = ?",
                (now().isoformat(), exit_code, run_id),
            )

    def end_lost_run(self, run_id: int) -> None:
        """A run whose `gitsess run` died without ending it: ended now, with no exit code."""
        with self.write():
            self.conn.execute(
                "UPDATE runs SET ended_at = ? WHERE id = ? AND ended_at IS NULL",
                (now().isoformat(), run_id),
            )

    def runs(self, session_id: str) -> list[Run]:
        """The session's runs, oldest first."""
        with self.guard():
            rows = self.conn.execute(
                "SELECT id, command, cwd, pid, role, started_at, ended_at, exit_code FROM runs"
                " WHERE session_id = ? ORDER BY started_at, id",
                (session_id,),
            ).fetchall()
        from gitsess.store.rows import run_of

        return [run_of(row) for row in rows]

    def delete(self, session_id: str) -> None:
        """Remove a session with its participants and runs; call inside `write()`."""
        self.conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    def participant(self, session_id: str, role: str) -> Participant | None:
        from gitsess.store.agent_rows import PARTICIPANT_COLUMNS, participant_of

        with self.guard():
            row = self.conn.execute(
                f"SELECT {PARTICIPANT_COLUMNS} FROM participants WHERE session_id = ? AND role = ?",
                (session_id, role),
            ).fetchone()
        return None if row is None else participant_of(row)

    def participants(self, session_id: str | None = None) -> list[Participant]:
        """The participants of one session, or of every session; by session age, then role."""
        from gitsess.store.agent_rows import PARTICIPANT_COLUMNS, participant_of

        columns = ", ".join(f"p.{c}" for c in PARTICIPANT_COLUMNS.split(", "))
        with self.guard():
            return [
                participant_of(row)
                for row in self.conn.execute(
                    f"SELECT {columns} FROM participants p JOIN sessions s ON s.id = p.session_id"
                    " WHERE ? IS NULL OR p.session_id = ? ORDER BY s.seq, p.role",
                    (session_id, session_id),
                )
            ]

    def add_participant(
        self, *, session_id: str, role: str, kind: str, isolation_uuid: str, root: Path, lever: str
    ) -> Participant:
        """Add an idle participant; call inside `write()`."""
        self.conn.execute(
            "INSERT INTO participants (session_id, role, kind, isolation_uuid, root, lever)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, role, kind, isolation_uuid, str(root), lever),
        )
        found = self.participant(session_id, role)
        assert found is not None
        return found

    def participant_started(
        self, participant_id: int, *, root: Path, pid: int, seeded: list[Seed]
    ) -> None:
        """Mark a participant running; call inside `write()`."""
        import json

        self.conn.execute(
            "UPDATE participants SET root = ?, pid = ?, seeded = ?, state = 'running',"
            " started_at = ?, ended_at = NULL WHERE id = ?",
            (
                str(root),
                pid,
                json.dumps([asdict(s) for s in seeded]),
                now().isoformat(),
                participant_id,
            ),
        )

    def participant_ended(self, participant_id: int) -> None:
        """Mark a participant idle; call inside `write()`."""
        self.conn.execute(
            "UPDATE participants SET state = 'idle', ended_at = ? WHERE id = ?",
            (now().isoformat(), participant_id),
        )

    def delete_participant(self, participant_id: int) -> None:
        """Call inside `write()`."""
        self.conn.execute("DELETE FROM participants WHERE id = ?", (participant_id,))

    def isolation_uuids(self) -> set[str]:
        """The isolation roots that participants own (a session's removal takes its rows)."""
        with self.guard():
            return {
                uuid
                for (uuid,) in self.conn.execute(
                    "SELECT isolation_uuid FROM participants WHERE isolation_uuid IS NOT NULL"
                )
            }

    def synced(self, session_id: str) -> Synced | None:
        with self.guard():
            row = self.conn.execute(
                "SELECT remote, commit_id, tree, base, synced_at FROM synced WHERE session_id = ?",
                (session_id,),
            ).fetchone()
        if row is None:
            return None
        from gitsess.store.rows import Synced

        remote, commit, tree, base, at = row
        return Synced(remote, commit, tree, base, datetime.fromisoformat(at))

    def set_synced(
        self, session_id: str, *, remote: str, commit: str, tree: str, base: str
    ) -> None:
        with self.write():
            self.conn.execute(
                "INSERT INTO synced (session_id, remote, commit_id, tree, base, synced_at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET"
                " remote = excluded.remote, commit_id = excluded.commit_id,"
                " tree = excluded.tree, base = excluded.base, synced_at = excluded.synced_at",
                (session_id, remote, commit, tree, base, now().isoformat()),
            )
