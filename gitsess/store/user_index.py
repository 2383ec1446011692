"""The per-user index of repositories that have sessions, for `gitsess ls --everywhere`.

It holds repositories only, not sessions: listing reads each repository's own registry, so
names, titles and states are never stale, and renaming a session needs no index update.
`sessions.create` adds the repository before it inserts the session (an entry without sessions
is harmless; a session no entry leads to would be lost to `--everywhere`), `sessions.remove` of
the last session takes it out, and `sessions.list_everywhere` drops repositories whose
registry is gone and reports an unreadable one without failing.
"""

from __future__ import annotations

import os
from pathlib import Path

import apsw

from gitsess.errors import GitsessError
from gitsess.store import db

_SCHEMA = """
CREATE TABLE IF NOT EXISTS repos (
    state_dir  TEXT PRIMARY KEY,
    common_dir TEXT NOT NULL
);
"""


def index_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME")
    state = Path(base) if base else Path.home() / ".local" / "state"
    return state / "gitsess" / "index.db"


class UserIndex:
    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, state_dir: Path, common_dir: Path) -> None:
        try:
            db.private_dir(self.path.parent)
        except OSError as e:
            raise GitsessError(
                f"cannot create {self.path.parent} ({e.strerror}); set XDG_STATE_HOME to a "
                "writable directory"
            ) from e
        self._write(
            "INSERT OR REPLACE INTO repos (state_dir, common_dir) VALUES (?, ?)",
            str(state_dir),
            str(common_dir),
        )

    def discard(self, state_dir: Path) -> None:
        if self.path.exists():
            self._write("DELETE FROM repos WHERE state_dir = ?", str(state_dir))

    def repos(self) -> list[tuple[Path, Path]]:
        """(state dir, common dir) of every indexed repository, in path order."""
        if not self.path.exists():
            return []
        conn = db.connect(self.path)
        try:
            conn.execute(_SCHEMA)
            rows = conn.execute("SELECT state_dir, common_dir FROM repos ORDER BY common_dir")
            return [(Path(s), Path(c)) for s, c in rows]
        except apsw.Error as e:
            raise db.db_error(self.path, e) from e
        finally:
            conn.close()

    def _write(self, sql: str, *args: str) -> None:
        conn = db.connect(self.path)
        try:
            with db.write_txn(conn):
                conn.execute(_SCHEMA)
                conn.execute(sql, args)
        except apsw.Error as e:
            raise db.db_error(self.path, e) from e
        finally:
            conn.close()
