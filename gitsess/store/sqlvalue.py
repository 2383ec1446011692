"""Typed reads of SQLite values. apsw types every column value as `apsw.SQLiteValue` (None,
int, float, a buffer or str); these give the type the schema declares, or raise TypeError
naming what came instead, so that row reads need no casts."""

from __future__ import annotations

import apsw


def integer(value: apsw.SQLiteValue) -> int:
    """An INTEGER column's value (a number kept as text converts, as SQLite's affinity would)."""
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError(f"expected an integer from SQLite, got {type(value).__name__}")


def optional_integer(value: apsw.SQLiteValue) -> int | None:
    return None if value is None else integer(value)


def blob(value: apsw.SQLiteValue) -> bytes:
    """A BLOB column's value."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"expected a blob from SQLite, got {type(value).__name__}")


def text(value: apsw.SQLiteValue) -> str:
    """A TEXT column's value."""
    if isinstance(value, str):
        return value
    raise TypeError(f"expected text from SQLite, got {type(value).__name__}")


def scalar(conn: apsw.Connection, sql: str, bindings: apsw.Bindings = ()) -> apsw.SQLiteValue:
    """The first column of the first row of `sql`, None when it gives no row."""
    rows = conn.execute(sql, bindings).fetchall()
    return rows[0][0] if rows else None
