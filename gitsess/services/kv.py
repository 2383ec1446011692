"""A session's key-value store: JSON values in the `kv` table of its delta.db.

Safe beside a live daemon: delta.db is in WAL mode, every write here is one short
`BEGIN IMMEDIATE` transaction. Inside a run the state dir is read-only (`runtime/inplace.py`):
writes go through the session's daemon there, which is live as long as the run is. The daemon
itself never touches the table otherwise. A write makes delta.db when the session has none yet;
a read never does. The command line stores `kv set KEY VALUE` as a string and parses VALUE only
with `--json`: guessing whether `3` is a number or a string would type a value by its content.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, NamedTuple

import apsw

from gitsess.errors import GitsessError
from gitsess.git.location import RepoContext
from gitsess.overlay import kvtable, layout, schema
from gitsess.services import sealed
from gitsess.store.registry import Session


class Item(NamedTuple):  # (not a frozen dataclass: `kv get` starts faster without one)
    key: str
    value: Any  # decoded JSON
    updated_ns: int

    @property
    def updated(self) -> datetime:
        return datetime.fromtimestamp(self.updated_ns / 1e9, UTC)


def encode(value: object) -> str:
    """`value` as the JSON text the store keeps; NaN and infinities are not JSON."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise GitsessError(f"not a JSON value: {e}") from None
    except RecursionError:
        raise GitsessError(f"not a JSON value: {_TOO_DEEP}") from None
    _utf8(text, "a value")
    return text


# Python's json nests as deep as its stack: deeper, a RecursionError (a traceback).
_TOO_DEEP = "nested too deeply"


def _utf8(text: str, what: str) -> None:
    """Refuse text that is not UTF-8: bytes from the command line that are not (kept as
    surrogates), or a lone surrogate a JSON escape made. SQLite keeps UTF-8 text only."""
    try:
        text.encode()
    except UnicodeEncodeError:
        raise GitsessError(f"{what} must be UTF-8 text: {text!r} is not") from None


def decode(text: str) -> Any:
    """JSON text given by a user (`kv set --json`), refusing what `encode` would refuse."""

    def no_constant(name: str) -> float:
        raise ValueError(f"{name} is not JSON")

    try:
        value = json.loads(text, parse_constant=no_constant)
    except ValueError as e:
        raise GitsessError(f"not valid JSON: {e}") from None
    except RecursionError:
        raise GitsessError(f"not valid JSON: {_TOO_DEEP}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise GitsessError(f"not valid JSON: {text} is out of range")
    return value


def _check_key(key: str) -> str:
    if not key:
        raise GitsessError("a key cannot be empty")
    _utf8(key, "a key")
    return key


@contextmanager
def _store(ctx: RepoContext, session: Session, *, create: bool) -> Iterator[apsw.Connection | None]:
    path = layout.delta(ctx.session_dir(session.id))
    if not path.exists() and not create:
        yield None
        return
    if not path.parent.is_dir():
        raise GitsessError(f"the directory of session {session.name} is missing: {path.parent}")
    try:
        conn = schema.connect(str(path), readonly=sealed.inside_run(ctx))
    except apsw.Error as e:
        raise GitsessError(f"cannot open {path}: {e}") from e
    try:
        yield conn
    except apsw.Error as e:
        raise GitsessError(f"{path}: {e}") from e
    finally:
        conn.close()


def check_item(key: str, value: object) -> None:
    """What `put` would refuse, refused before anything is written (a pull takes many)."""
    _check_key(key)
    encode(value)


def get(ctx: RepoContext, session: Session, key: str) -> Item:
    with _store(ctx, session, create=False) as conn:
        row = None if conn is None else kvtable.kv_get(conn, _check_key(key))
    if row is None:
        raise GitsessError(f"session {session.name} has no key {key!r}")
    return _item(key, *row)


def put(ctx: RepoContext, session: Session, key: str, value: object) -> Item:
    """Set `key` to `value` (any JSON-encodable value), replacing what it held."""
    text = encode(value)
    stamp = time.time_ns()
    if sealed.inside_run(ctx):
        _through_daemon(ctx, session, _check_key(key), text, stamp)
        return Item(key, json.loads(text), stamp)
    with _store(ctx, session, create=True) as conn:
        assert conn is not None
        kvtable.kv_put(conn, _check_key(key), text, stamp)
    return Item(key, json.loads(text), stamp)


def _through_daemon(
    ctx: RepoContext, session: Session, key: str, text: str | None, stamp: int
) -> bool:
    from gitsess.overlay import protocol  # (inside a run only: `kv get` never asks the daemon)

    try:
        existed = protocol.kv(str(ctx.session_dir(session.id)), key, text, stamp)
    except (OSError, ConnectionError, protocol.Refused) as e:
        raise GitsessError(f"session {session.name}'s daemon: {e}") from None
    if existed is None:
        raise GitsessError(
            f"session {session.name} is not mounted, and inside a run its key-value store is"
            " written only through its daemon"
        )
    return existed


def remove(ctx: RepoContext, session: Session, key: str) -> None:
    if sealed.inside_run(ctx):
        if not _through_daemon(ctx, session, _check_key(key), None, time.time_ns()):
            raise GitsessError(f"session {session.name} has no key {key!r}")
        return
    with _store(ctx, session, create=False) as conn:
        removed = conn is not None and kvtable.kv_remove(conn, _check_key(key))
    if not removed:
        raise GitsessError(f"session {session.name} has no key {key!r}")


def items(ctx: RepoContext, session: Session) -> list[Item]:
    """Every key, in key order."""
    with _store(ctx, session, create=False) as conn:
        if conn is None:
            return []
        rows = kvtable.kv_items(conn)
    return [_item(*row) for row in rows]


def _item(key: Any, value: Any, updated_ns: Any) -> Item:
    return Item(key, json.loads(value), updated_ns)


def put_json(ctx: RepoContext, session: Session, data: bytes) -> None:
    """Set the keys of a store kept as JSON (`archives.kv_json`), with their update times."""
    with _store(ctx, session, create=True) as conn:
        assert conn is not None
        for key, text, updated_ns in json.loads(data):
            kvtable.kv_put(conn, key, text, updated_ns)
