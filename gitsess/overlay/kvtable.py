"""The session's key-value store: the `kv` table of delta.db (JSON text by key).

Its own module, apart from `delta`: `gitsess kv get` reads one row, and loading the delta
store's code (with the checkpoints') took longer than the rest of the command.
"""

from __future__ import annotations

import apsw

from gitsess.store.sqlvalue import integer, text


def kv_get(conn: apsw.Connection, key: str) -> tuple[str, int] | None:
    """The JSON text and update time of `key`, None if absent."""
    rows = conn.execute("SELECT value, updated_ns FROM kv WHERE key = ?", (key,)).fetchall()
    return (text(rows[0][0]), integer(rows[0][1])) if rows else None


def kv_put(conn: apsw.Connection, key: str, text: str, updated_ns: int) -> None:
    with conn:
        conn.execute(
            "INSERT INTO kv (key, value, updated_ns) VALUES (?, ?, ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value,"
            " updated_ns = excluded.updated_ns",
            (key, text, updated_ns),
        )


def kv_remove(conn: apsw.Connection, key: str) -> bool:
    """Remove `key`; whether it was there."""
    with conn:
        conn.execute("DELETE FROM kv WHERE key = ?", (key,))
        removed = conn.changes()
    return removed > 0


def kv_items(conn: apsw.Connection) -> list[tuple[str, str, int]]:
    """(key, JSON text, update time) of every key, in key order."""
    rows = conn.execute("SELECT key, value, updated_ns FROM kv ORDER BY key").fetchall()
    return [(text(k), text(v), integer(t)) for k, v, t in rows]
